"""`OverCap`: the one rule for sequences longer than `max_seq_len` (`--over-cap`).

Every path that meets such a sequence asks an `OverCap` instead of deciding again: the job's
checks and summary, the histogram the packer gets, the pools passes (their SQL parameters, the
store's lengths, a Dask group's counts), the split store's pieces, and at training time the
collator's cut (`Prepared.over_cap`, built from the manifest).

The policies:
- `error`: refuse the inputs (one `InputError` naming how many, the longest, and the ways out);
- `drop`: leave them out;
- `truncate`: keep them, counted and pooled at `max_seq_len`; the collator keeps their first
  `max_seq_len` tokens;
- `split`: (with a token store) cut them into pieces of `max_seq_len` tokens, the last the
  remainder, each piece a sequence with a new id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpack_cli.checks import MAX_SEQ_LEN_LIMIT, check_max_seq_len
from seqpack_cli.errors import ConfigError, InputError, option

__all__ = ["OVER_CAP", "OverCap", "check_over_cap", "cut_lengths", "over_cap_option"]

OVER_CAP = ("error", "drop", "truncate", "split")
"""What `over_cap` does with sequences longer than max_seq_len: refuse the inputs, leave them
out, keep them with the length max_seq_len (the collator is to take their first tokens), or (with
a token store) cut them into pieces of max_seq_len tokens, each a sequence with a new id."""


def over_cap_option(value: str) -> str:
    """`--over-cap VALUE` / `over_cap='VALUE'`, inside a message."""
    return option(f"over_cap {value}", python=f"over_cap={value!r}")


def check_over_cap(value: Any) -> str:
    """Return `value` if it is one of `OVER_CAP`, else raise the one `ConfigError` naming it."""
    if not isinstance(value, str) or value not in OVER_CAP:
        raise ConfigError(
            f"{option('over_cap')} is {value!r}; expected one of {', '.join(OVER_CAP)}"
        )
    return value


def cut_lengths(lengths: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """(each piece's length, each row's number of pieces): rows longer than `cap` cut into pieces
    of `cap` tokens, the last one the remainder; other rows one piece each."""
    pieces = np.maximum((lengths + (cap - 1)) // cap, 1)
    rows = np.repeat(lengths, pieces)
    index = np.arange(rows.size, dtype=np.int64) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    return np.minimum(rows - index * cap, cap), pieces


# int64 arithmetic is kept only while every sum stays below this (an estimate in float64 is off
# by far less than the margin to 2**63).
_INT64_SAFE = 2**62


def _exact_arrays(
    lengths: np.ndarray, counts: np.ndarray, cap: int
) -> tuple[np.ndarray, np.ndarray]:
    """`lengths` and `counts` as int64 arrays when no length, count or kept total can reach
    2**62 (the kept counts sum to at most `sum(count * (length // cap + 1))`), else as Python
    ints (dtype=object), on which numpy's arithmetic is exact."""
    lengths, counts = np.asarray(lengths), np.asarray(counts)
    if lengths.size == 0:
        return lengths.astype(np.int64), counts.astype(np.int64)
    float_lengths = np.abs(lengths.astype(np.float64))
    float_counts = np.abs(counts.astype(np.float64))
    largest = max(float(float_lengths.max()), float(float_counts.max()))
    kept_bound = float(np.sum(float_counts * (float_lengths / cap + 1)))
    if largest < _INT64_SAFE and kept_bound < _INT64_SAFE:
        return lengths.astype(np.int64), counts.astype(np.int64)
    return _python_ints(lengths), _python_ints(counts)


def _python_ints(values: np.ndarray) -> np.ndarray:
    """`values` as a dtype=object array of Python ints (numpy ints overflow, Python's do not)."""
    result = np.empty(values.size, dtype=object)
    result[:] = [int(value) for value in values.tolist()]
    return result


@dataclass(frozen=True)
class OverCap:
    """The over-cap `policy` (one of `OVER_CAP`) at `max_seq_len`, validated on construction.

    Lengths may be Python ints past int64 in the histogram methods and in `kept_arrays` (a
    length column of uint64 holds them); the other array methods take int64 arrays.
    """

    policy: str
    max_seq_len: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", check_over_cap(self.policy))
        object.__setattr__(self, "max_seq_len", check_max_seq_len(self.max_seq_len))

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> OverCap:
        """The rule a manifest's `config` records: its `over_cap` at its `max_seq_len` (a
        manifest without `over_cap`: `drop` for `filter_over_cap`, its alias, else `error`)."""
        policy = config.get("over_cap")
        if policy is None:
            policy = "drop" if config.get("filter_over_cap") else "error"
        return cls(policy, config["max_seq_len"])

    @property
    def drops(self) -> bool:
        return self.policy == "drop"

    @property
    def truncates(self) -> bool:
        return self.policy == "truncate"

    @property
    def splits(self) -> bool:
        return self.policy == "split"

    @property
    def cut_to(self) -> int | None:
        """The length a kept sequence's tokens are cut to when read (truncate: `max_seq_len`),
        or None when every stored sequence is read whole."""
        return self.max_seq_len if self.truncates else None

    @property
    def checked_policy(self) -> str:
        """The policy the passes without a store check the inputs with: split cuts the store,
        so they check (and pool) as truncate, and the pieces replace those pools after."""
        return "truncate" if self.splits else self.policy

    def sql_params(self) -> dict[str, Any]:
        """The parameters of the `sql/pool_rows_*.sql` queries: `$max_seq_len`, and `$truncate`
        (keep the longer rows at `$max_seq_len` instead of leaving them out)."""
        return {"max_seq_len": self.max_seq_len, "truncate": self.truncates}

    # ---- one sequence at a time: the pools from a store ----------------------------------------

    def keep(self, lengths: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, ids) as the pools hold them: drop leaves the longer ones out, truncate
        counts them at `max_seq_len` (`lengths` is cut in place). Error has refused them
        already and split's store holds pieces, so both pass everything through."""
        if self.drops:
            kept = lengths <= self.max_seq_len
            return lengths[kept], ids[kept]
        if self.truncates:
            np.minimum(lengths, self.max_seq_len, out=lengths)
        return lengths, ids

    def cut(self, lengths: np.ndarray) -> np.ndarray:
        """Each length as a sequence is read (a new array): truncate keeps the first
        `max_seq_len` tokens of a longer one; the other policies read every stored sequence
        whole."""
        return np.minimum(lengths, self.max_seq_len) if self.truncates else lengths.copy()

    def pooled(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(whether each row of `lengths` is in a pool, the length of the pool it would be in):
        the rows up to `max_seq_len`, and under truncate the longer ones too, in the pool of
        `max_seq_len` (the pool queries' `WHERE $truncate OR length <= $max_seq_len`)."""
        return (lengths <= self.max_seq_len) | self.truncates, np.minimum(lengths, self.max_seq_len)

    def pieces(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Split's pieces of the rows of `lengths`: (each piece's length, each row's number of
        pieces)."""
        return cut_lengths(lengths, self.max_seq_len)

    # ---- histograms -------------------------------------------------------------------------

    def kept_histogram(self, histogram: Mapping[int, int]) -> dict[int, int]:
        """`{length: count}` of what is packed, ascending: `kept_arrays` on the histogram's
        lengths and counts, exact whatever their size (Python ints past int64 included).

        Args:
            histogram: `{length: count}` of the inputs, lengths and counts of any size.

        Returns:
            The kept `{length: count}`, ascending by length, with Python int keys and values.
        """
        lengths = np.array(list(histogram), dtype=object)
        counts = np.array([histogram[length] for length in histogram], dtype=object)
        kept_lengths, kept_counts = self.kept_arrays(lengths, counts)
        return dict(zip(kept_lengths.tolist(), kept_counts.tolist(), strict=True))

    def kept_arrays(self, lengths: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What is packed, on arrays: the lengths up to `max_seq_len`, plus the longer ones at
        `max_seq_len` (truncate) or as their pieces (split: full pieces of `max_seq_len`, then
        the remainder); drop and error leave them out (error refuses them in `check`).

        The work is done in int64 when every length, count and sum fits in it with room to
        spare, else on Python ints (dtype=object), so a histogram of a uint64 length column, or
        counts whose pieces overflow int64, comes out exact.

        Args:
            lengths: distinct lengths, any integer dtype or Python ints (dtype=object).
            counts: their counts, the same size.

        Returns:
            The kept lengths, ascending and distinct, and their counts (zero counts included as
            given): int64 arrays, or dtype=object arrays of Python ints where int64 would not
            hold them.
        """
        cap = self.max_seq_len
        lengths, counts = _exact_arrays(lengths, counts, cap)
        over = lengths > cap
        parts_lengths, parts_counts = [lengths[~over]], [counts[~over]]
        if over.any() and self.truncates:
            parts_lengths.append(np.array([cap], dtype=lengths.dtype))
            parts_counts.append(np.array([counts[over].sum()], dtype=counts.dtype))
        elif over.any() and self.splits:  # pieces of cap tokens, the last the remainder
            # // and %, not np.divmod: numpy has no divmod on Python ints (dtype=object)
            full, rest = lengths[over] // cap, lengths[over] % cap
            over_counts = counts[over]
            parts_lengths += [np.array([cap], dtype=lengths.dtype), rest[rest > 0]]
            full_pieces = np.array([(full * over_counts).sum()], dtype=counts.dtype)
            parts_counts += [full_pieces, over_counts[rest > 0]]
        unique, where = np.unique(np.concatenate(parts_lengths), return_inverse=True)
        merged = np.zeros(unique.size, dtype=counts.dtype)
        np.add.at(merged, where, np.concatenate(parts_counts))
        return unique, merged

    def check(
        self, histogram: Mapping[int, int], length_column: str, *, source: str | None = None
    ) -> None:
        """Raise the one `InputError` for `histogram` under this policy: error with sequences
        over `max_seq_len`, or nothing left to pack (drop of every sequence). `source` names
        where the lengths come from (default: the length column)."""
        cap = self.max_seq_len
        over = {length: count for length, count in histogram.items() if length > cap}
        num_over = sum(over.values())
        if num_over and self.policy == "error":
            longest = max(over)
            where = source or f"length column {length_column!r}"
            what = f"{num_over} sequences in {where} are longer than {option('max_seq_len')} {cap}"
            drop = (
                f"pass {over_cap_option('drop')} to drop them or "
                f"{over_cap_option('truncate')} to keep their first {cap} tokens"
            )
            if longest > MAX_SEQ_LEN_LIMIT:  # no max_seq_len is allowed to hold it
                raise InputError(
                    f"{what}, and the longest has {longest}, over seqpack's limit of "
                    f"{MAX_SEQ_LEN_LIMIT} tokens, so no {option('max_seq_len')} can hold it; "
                    f"{drop}, or fix the lengths in the data"
                )
            raise InputError(
                f"{what} (the longest has {longest}); {drop}, or raise {option('max_seq_len')} "
                f"to {longest}"
            )
        if histogram and not self.kept_histogram(histogram):
            shortest = min(histogram)
            fix = f"raise {option('max_seq_len')}"
            if shortest > MAX_SEQ_LEN_LIMIT:
                fix = (
                    f"even the shortest is over seqpack's limit of {MAX_SEQ_LEN_LIMIT} tokens, "
                    f"so no {option('max_seq_len')} can hold it: fix the lengths in the data"
                )
            raise InputError(
                f"all {num_over} sequences are longer than {option('max_seq_len')} {cap} (the "
                f"shortest has {shortest}), so nothing is left to pack; {fix}, or pass "
                f"{over_cap_option('truncate')} to keep their first {cap} tokens"
            )

    def summary(self, histogram: Mapping[int, int]) -> dict[str, int]:
        """The manifest summary's (exact) counts of this policy on `histogram`: `num_over_cap`
        sequences over max_seq_len hold `num_tokens_over_cap` tokens (as `seqpack stats` counts
        them); `num_input_tokens` = `num_tokens` + `num_tokens_dropped` (drop: all their tokens)
        + `num_tokens_truncated` (truncate: their tokens past max_seq_len). Split keeps every
        token: `num_split` sequences (holding `num_tokens_split` tokens) became `num_pieces`
        sequences of at most max_seq_len tokens."""
        cap = self.max_seq_len
        over = {length: count for length, count in histogram.items() if length > cap}
        num_over = sum(over.values())
        over_tokens = sum(length * count for length, count in over.items())
        # error: nothing is over the cap once `check` passed, so its counts are truncate's zeros
        truncated = self.policy in ("error", "truncate")
        num_pieces = sum(-(-length // cap) * count for length, count in over.items())
        return {
            "num_input_tokens": sum(length * count for length, count in histogram.items()),
            "num_over_cap": num_over,
            "num_tokens_over_cap": over_tokens,
            "num_dropped": num_over if self.drops else 0,
            "num_tokens_dropped": over_tokens if self.drops else 0,
            "num_truncated": num_over if truncated else 0,
            "num_tokens_truncated": over_tokens - cap * num_over if truncated else 0,
            "num_split": num_over if self.splits else 0,
            "num_pieces": num_pieces if self.splits else 0,
            "num_tokens_split": over_tokens if self.splits else 0,
        }

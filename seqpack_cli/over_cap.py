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


@dataclass(frozen=True)
class OverCap:
    """The over-cap `policy` (one of `OVER_CAP`) at `max_seq_len`, validated on construction.

    Lengths may be Python ints past int64 in the histogram methods (a length column of uint64
    holds them); the array methods take int64 arrays.
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
        """`{length: count}` of what is packed, ascending: the lengths up to `max_seq_len`, plus
        the longer ones at `max_seq_len` (truncate) or as their pieces (split); drop and error
        leave them out (error refuses them in `check`)."""
        cap = self.max_seq_len
        kept = {length: count for length, count in histogram.items() if length <= cap}
        for length, count in histogram.items():
            if length <= cap:
                continue
            if self.truncates:
                kept[cap] = kept.get(cap, 0) + count
            elif self.splits:  # pieces of cap tokens, the last the remainder
                full, rest = divmod(length, cap)
                kept[cap] = kept.get(cap, 0) + full * count
                if rest:
                    kept[rest] = kept.get(rest, 0) + count
        return dict(sorted(kept.items()))

    def kept_arrays(self, lengths: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`kept_histogram` on arrays (distinct int64 lengths, their counts): the kept lengths
        ascending and distinct, and their counts (int64, zero counts included as given)."""
        cap = self.max_seq_len
        over = lengths > cap
        parts_lengths, parts_counts = [lengths[~over]], [counts[~over].astype(np.int64)]
        if over.any() and self.truncates:
            parts_lengths.append(np.array([cap], dtype=lengths.dtype))
            parts_counts.append(np.array([counts[over].sum(dtype=np.int64)]))
        elif over.any() and self.splits:
            full, rest = np.divmod(lengths[over], cap)
            parts_lengths += [np.array([cap], dtype=lengths.dtype), rest[rest > 0]]
            over_counts = counts[over].astype(np.int64)
            parts_counts += [np.array([(full * over_counts).sum()]), over_counts[rest > 0]]
        merged_lengths = np.concatenate(parts_lengths)
        unique, where = np.unique(merged_lengths, return_inverse=True)
        merged = np.zeros(unique.size, dtype=np.int64)
        np.add.at(merged, where, np.concatenate(parts_counts))
        return unique, merged

    def check(self, histogram: Mapping[int, int], length_column: str) -> None:
        """Raise the one `InputError` for `histogram` under this policy: error with sequences
        over `max_seq_len`, or nothing left to pack (drop of every sequence)."""
        cap = self.max_seq_len
        over = {length: count for length, count in histogram.items() if length > cap}
        num_over = sum(over.values())
        if num_over and self.policy == "error":
            longest = max(over)
            what = (
                f"{num_over} sequences in length column {length_column!r} are longer than "
                f"{option('max_seq_len')} {cap}"
            )
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

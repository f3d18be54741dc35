"""Validation at the boundary: every integer argument, and the lengths every packer accepts.

One kind of fault, one error class (`seqpack_cli.errors`):
- `ConfigError`: an argument or option the caller chose (`max_seq_len`, `seed`, `rank`, a batch
  size, a CLI flag): fixed by passing another value;
- `InputError`: a value read from the data (a length, a count, a template, an id): fixed by
  cleaning the data;
- `PreparedFormatError`: a `prepared/` directory (`seqpack_cli.prepared.schema`).

`check_int` is the one integer check: bools are refused (True == 1 is almost always a mistake),
numpy integers and anything with `__index__` are accepted, and the message names the argument,
the value, what was expected and the fix. The callers pass `error=InputError` only for data.

The packers accept lengths as a flat sequence (Python list, tuple or numpy array of any integer
dtype) or as a histogram `{length: count}`. Everything is checked here, once, at the boundary:
a bad length raises `InputError` naming the value, where it is, the limit and the way out; a bad
limit raises `ConfigError` naming the option.

`max_seq_len`, and so every length packed, is at most `MAX_SEQ_LEN_LIMIT` (2**31 - 1).
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from seqpack_cli.errors import ConfigError, InputError, SeqpackError, option

__all__ = [
    "MAX_SEQ_LEN_LIMIT",
    "check_int",
    "check_max_seq_len",
    "check_max_seqs_per_bin",
    "check_tolerance",
    "is_int",
    "validate_length_array",
    "validate_length_counts",
]

MAX_SEQ_LEN_LIMIT = 2**31 - 1
"""The largest `max_seq_len` seqpack accepts. A bin's token offsets (`cu_seqlens`, position ids)
are int32 in FlashAttention's varlen kernels and in the collator, so a bin of more tokens could not
be trained on; the bound also keeps every length, and a template's sum, far from int64 overflow."""

_OVER_CAP_FIX = (
    f"filter the sequences (e.g. {option('filter_over_cap', python='filter_over_cap=True')}) "
    f"or raise {option('max_seq_len')}"
)


def is_int(value: Any) -> bool:
    """Whether `value` is an integer: Python or numpy, never a bool."""
    # bool is an int subclass but never a count; numpy integers are numbers.Integral.
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    expected: str | None = None,
    fix: str | None = None,
    error: type[SeqpackError] = ConfigError,
) -> int:
    """Return `value` as an int, or raise `error` unless it is an integer in [minimum, maximum].

    `name` is the argument as the message shows it (an `option(...)` where it is one);
    `expected` replaces the default description ("an integer >= minimum"); `fix` says what to do.
    `error` is `ConfigError` for arguments and options, `InputError` for values from the data.
    """
    number: int | None = None
    if not isinstance(value, (bool, np.bool_)):
        try:
            number = operator.index(value)
        except TypeError:
            number = None
    in_range = number is not None and (
        (minimum is None or number >= minimum) and (maximum is None or number <= maximum)
    )
    if number is None or not in_range:
        if expected is None:
            expected = _range_words(minimum, maximum)
        shown = f"the bool {value!r}" if isinstance(value, (bool, np.bool_)) else repr(value)
        if number is None and not isinstance(value, (bool, np.bool_)):
            shown += f" of type {type(value).__name__}"
        raise error(f"{name} is {shown}; expected {expected}" + (f"; {fix}" if fix else ""))
    return number


def _range_words(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"an integer from {minimum} to {maximum}"
    if minimum == 1:
        return "a positive integer"
    if minimum == 0:
        return "a non-negative integer"
    return "an integer" if minimum is None else f"an integer >= {minimum}"


def _check_int(name: str, value: Any, minimum: int, expected: str, fix: str) -> int:
    return check_int(name, value, minimum=minimum, expected=expected, fix=fix)


def check_max_seq_len(max_seq_len: Any) -> int:
    """Return `max_seq_len` as an int, or raise `ConfigError` unless it is an integer in
    [1, `MAX_SEQ_LEN_LIMIT`]."""
    name = option("max_seq_len")
    value = _check_int(name, max_seq_len, 1, "a positive integer", f"pass {name} 1 or more")
    if value > MAX_SEQ_LEN_LIMIT:
        raise ConfigError(
            f"{name} {value} is over seqpack's limit of {MAX_SEQ_LEN_LIMIT} (2**31 - 1) tokens "
            f"per bin; bins are trained with int32 token offsets: pass {name} "
            f"{MAX_SEQ_LEN_LIMIT} or less"
        )
    return value


def check_max_seqs_per_bin(max_seqs_per_bin: Any) -> int | None:
    """Return the per-bin sequence cap (None = no cap), or raise `ConfigError` if it is <= 0."""
    if max_seqs_per_bin is None:
        return None
    name = option("max_seqs_per_bin")
    return _check_int(
        name,
        max_seqs_per_bin,
        1,
        "a positive integer",
        f"pass {name} 1 or more, or leave it unset for no cap",
    )


def check_tolerance(tolerance: Any) -> int:
    """Return the tie-bucket width `tolerance`, or raise `ConfigError` unless it is >= 1."""
    return _check_int(
        "tolerance", tolerance, 1, "a positive integer", "use 1 to shuffle exact ties only"
    )


def _length_error(value: Any, where: str, max_seq_len: int | None) -> InputError:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a whole float from a float array: report it as the count it is
    if is_int(value) and max_seq_len is not None and int(value) > max_seq_len:
        return InputError(
            f"length {int(value)} {where} exceeds {option('max_seq_len')} {max_seq_len}; "
            f"{_OVER_CAP_FIX}"
        )
    if is_int(value):
        return InputError(
            f"length {int(value)} {where} is not positive; every length must be an integer "
            f"from 1 to {option('max_seq_len')}: drop empty sequences before packing"
        )
    return InputError(
        f"length {value!r} {where} is not an integer token count; pass whole numbers "
        "(Python ints or a numpy integer array)"
    )


def validate_length_array(lengths: Any, max_seq_len: int | None) -> np.ndarray:
    """Return `lengths` as a 1-D int64 array, each in [1, max_seq_len], or raise `InputError`.

    Accepts lists, tuples and numpy arrays of any integer dtype. Floats are accepted only when
    every value is a whole number (a float column of token counts); 3.5, NaN, bools and strings
    are refused. `max_seq_len=None` checks only that lengths are positive. The array is not
    copied when it already is int64.
    """
    limit = check_max_seq_len(max_seq_len) if max_seq_len is not None else None
    if isinstance(lengths, (list, tuple)):
        # np.asarray would silently turn True into 1 and "5" into a string array: look at the
        # element types first (one C-level pass, no per-item Python loop).
        kinds = set(map(type, lengths))
        bad = [
            kind for kind in kinds if not issubclass(kind, (numbers.Integral, float, np.floating))
        ]
        bad += [kind for kind in kinds if issubclass(kind, (bool, np.bool_))]
        if bad:
            index = next(i for i, value in enumerate(lengths) if type(value) in bad)
            raise _length_error(lengths[index], f"at index {index}", limit)
    array = np.asarray(lengths)
    if array.ndim != 1:
        raise InputError(
            f"lengths must be a flat sequence of integers, got an array of shape {array.shape}; "
            "pass one length per sequence"
        )
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind == "f":
        not_whole = ~(np.isfinite(array) & (np.floor(array) == array))
        if not_whole.any():
            index = int(np.flatnonzero(not_whole)[0])
            raise _length_error(array[index].item(), f"at index {index}", limit)
    elif array.dtype.kind not in "iu":
        raise _length_error(array[0].item(), "at index 0", limit)
    # Compare in the input dtype, before any cast, so that huge values cannot wrap.
    upper = limit if limit is not None else np.iinfo(np.int64).max
    out_of_range = (array <= 0) | (array > upper)
    if out_of_range.any():
        index = int(np.flatnonzero(out_of_range)[0])
        raise _length_error(array[index].item(), f"at index {index}", limit)
    return array.astype(np.int64, copy=False)


def validate_length_counts(
    length_counts: Mapping[Any, Any] | Iterable[tuple[Any, Any]], max_seq_len: int
) -> list[tuple[int, int]]:
    """Return the histogram as `[(length, count), ...]`, lengths descending, counts >= 1.

    Lengths must be integers in [1, max_seq_len] (`InputError` otherwise); counts must be
    non-negative integers (zero counts are dropped).
    """
    max_seq_len = check_max_seq_len(max_seq_len)
    if isinstance(length_counts, Mapping):
        lengths, counts = list(length_counts.keys()), list(length_counts.values())
    else:
        pairs = list(length_counts)
        lengths, counts = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    # Fast path: plain ints in range (the usual dict from a scan) are checked in C.
    if (
        set(map(type, lengths)) <= {int}
        and set(map(type, counts)) <= {int}
        and (not lengths or (min(lengths) >= 1 and max(lengths) <= max_seq_len))
        and (not counts or min(counts) >= 0)
        and len(set(lengths)) == len(lengths)
    ):
        return sorted(((x, c) for x, c in zip(lengths, counts, strict=True) if c), reverse=True)
    merged: dict[int, int] = {}
    for length, count in zip(lengths, counts, strict=True):
        if not is_int(length) or not 1 <= int(length) <= max_seq_len:
            raise _length_error(length, "in the length histogram", max_seq_len)
        if not is_int(count) or int(count) < 0:
            raise InputError(
                f"count {count!r} for length {int(length)} in the length histogram is not a "
                "non-negative integer; counts are numbers of sequences"
            )
        if count:
            merged[int(length)] = merged.get(int(length), 0) + int(count)
    return sorted(merged.items(), reverse=True)

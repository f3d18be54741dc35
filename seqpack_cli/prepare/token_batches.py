"""One Arrow batch of the token store's columns, decoded and checked: `check_batch`.

This is the store's one batch kernel. Both engines run it on every batch they store: the local
one pass (`token_stream`, which raises `Fault` at the first batch with anything to report) and
the Dask store tasks (`engines/dask/store_tasks`, which record where each kind of fault is, for
the driver to word the one the local store reports first). What a batch is checked against, its
columns, each role's dtype and allowed values, is `StoreColumns`, built once per run by
`StoreColumns.of` from the footers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seqpack_cli.prepare.token_reading import TokenInput, store_dtype
from seqpack_cli.prepare.token_store import STORE_RULES

__all__ = ["BatchCheck", "StoreColumns", "TokenBatch", "check_batch", "within"]

_INT64_MAX = int(np.iinfo(np.int64).max)


@dataclass(frozen=True)
class StoreColumns:
    """What the store reads and how it checks it: `columns` ({role: column} for "tokens" and
    optionally "labels" or "loss_mask"), each role's `dtypes` and allowed value `ranges`
    ([low, high]), a `length_column` to compare with the lists' lengths (None when it is the
    token column itself) and the `id_column` (None for row-index ids)."""

    columns: Mapping[str, str]
    dtypes: Mapping[str, np.dtype[Any]]
    ranges: Mapping[str, tuple[int, int]]
    length_column: str | None
    id_column: str | None

    @classmethod
    def of(
        cls,
        columns: Mapping[str, str],
        inputs: Mapping[str, Sequence[TokenInput]],
        *,
        length_column: str | None,
        id_column: str | None,
    ) -> StoreColumns:
        """The store of `columns`, each role's dtype chosen from its footers (`inputs[role]`,
        `token_reading.store_dtype`), its range the store rule's or the dtype's."""
        dtypes = {role: store_dtype(role, inputs[role], column) for role, column in columns.items()}
        ranges = {}
        for role, dtype in dtypes.items():
            limits = np.iinfo(dtype)
            ranges[role] = STORE_RULES[role].allowed or (int(limits.min), int(limits.max))
        same = length_column == columns["tokens"]
        return cls(dict(columns), dtypes, ranges, None if same else length_column, id_column)

    def read_columns(self) -> list[str]:
        """The parquet columns a batch holds, each once."""
        names = [*self.columns.values(), self.length_column, self.id_column]
        return list(dict.fromkeys(name for name in names if name is not None))


@dataclass(frozen=True)
class TokenBatch:
    """One batch of rows: each row's number of tokens, each role's values (back to back, cast),
    and the rows' ids (int64) with an id column."""

    lengths: np.ndarray
    values: dict[str, np.ndarray]
    ids: np.ndarray | None

    @property
    def nbytes(self) -> int:
        extra = 0 if self.ids is None else self.ids.nbytes
        return self.lengths.nbytes + sum(v.nbytes for v in self.values.values()) + extra


@dataclass(frozen=True)
class BatchCheck:
    """A batch as the store checks it.

    `rows` is None when the token lists or the ids are refused (the batch cannot be stored);
    otherwise it holds the lengths, the ids and the values of every role not `refused`."""

    rows: TokenBatch | None
    refused: frozenset[str]
    """Roles whose lists or values the store refuses (a NULL list or value, a value outside the
    role's range); "tokens" also for a NULL id or an id over int64."""
    empty: bool
    """Whether a token list is empty (a sequence of no tokens)."""
    mismatch: tuple[int, int, int] | None
    """(row in the batch, its values, its tokens) of the first row whose labels or mask list is
    not as long as its tokens."""
    claimed: np.ndarray | None
    """The length column's lengths (None when it is the token column, or when it holds a NULL:
    then `lengths_null`)."""
    lengths_null: bool

    @property
    def lengths_differ(self) -> bool:
        """Whether a row's length column is not its list's length."""
        rows = self.rows
        if self.lengths_null:
            return True
        return (
            self.claimed is not None
            and rows is not None
            and (not np.array_equal(self.claimed, rows.lengths))
        )


def within(values: np.ndarray, low: int, high: int) -> bool:
    """Whether every value lies in [low, high], in one pass over them where the types allow."""
    if not values.size:
        return True
    if values.dtype == np.bool_:
        return low <= 0 and high >= 1
    info = np.iinfo(values.dtype)
    if low <= info.min and info.max <= high:
        return True  # the type holds nothing else
    if values.dtype.kind == "i" and low == 0:
        if high >= info.max:
            return int(values.min()) >= 0
        # Negative values read as unsigned are over the signed maximum, so over `high`.
        return int(values.view(f"u{values.dtype.itemsize}").max()) <= high
    if values.dtype.kind == "u" and low <= 0:
        return int(values.max()) <= high
    return int(values.min()) >= low and int(values.max()) <= high


def _lists(array: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """(each list's length as int64, the values back to back) of a list array; None for a NULL
    list or a NULL value."""
    if array.null_count:
        return None
    flat = pc.list_flatten(array)
    if flat.null_count:
        return None
    lengths = np.asarray(pc.list_value_length(array).to_numpy(zero_copy_only=False), np.int64)
    return lengths, flat.to_numpy(zero_copy_only=False)


def _ids(array: pa.Array) -> np.ndarray | None:
    """The ids as int64; None for a NULL id or one over int64."""
    if array.null_count:
        return None
    ids = array.to_numpy(zero_copy_only=False)
    if ids.dtype == np.uint64 and ids.size and int(ids.max()) > _INT64_MAX:
        return None
    return ids.astype(np.int64, copy=False)


def _claimed(array: pa.Array) -> np.ndarray | None:
    """The length column's lengths (an integer column, or list lengths); None for a NULL."""
    if array.null_count:
        return None
    if pa.types.is_integer(array.type):
        return np.asarray(array.to_numpy(zero_copy_only=False)).astype(np.int64)
    return np.asarray(pc.list_value_length(array).to_numpy(zero_copy_only=False), np.int64)


def check_batch(spec: StoreColumns, batch: pa.RecordBatch) -> BatchCheck:
    """Decode `batch` (its columns `spec.read_columns()`) and check it as the store does."""
    refused: set[str] = set()
    tokens = _lists(batch.column(spec.columns["tokens"]))
    ids = None if spec.id_column is None else _ids(batch.column(spec.id_column))
    if (
        tokens is None
        or not within(tokens[1], *spec.ranges["tokens"])
        or (spec.id_column is not None and ids is None)
    ):
        return BatchCheck(None, frozenset({"tokens"}), False, None, None, False)
    lengths, flat = tokens
    values = {"tokens": flat.astype(spec.dtypes["tokens"], copy=False)}
    mismatch = None
    for role, column in spec.columns.items():
        if role == "tokens":
            continue
        found = _lists(batch.column(column))
        if found is None or not within(found[1], *spec.ranges[role]):
            refused.add(role)
            continue
        values[role] = found[1].astype(spec.dtypes[role], copy=False)
        bad = np.flatnonzero(found[0] != lengths)
        if bad.size and mismatch is None:
            k = int(bad[0])
            mismatch = (k, int(found[0][k]), int(lengths[k]))
    claimed, lengths_null = None, False
    if spec.length_column is not None:
        claimed = _claimed(batch.column(spec.length_column))
        lengths_null = claimed is None
    empty = bool(lengths.size) and int(lengths.min()) <= 0
    rows = TokenBatch(lengths, values, ids)
    return BatchCheck(rows, frozenset(refused), empty, mismatch, claimed, lengths_null)

"""The token store written while the token column streams: `StreamedStore`.

`prepare.one_pass` hands every checked batch (`token_stream.TokenBatch`) to `StreamedStore.add`,
which appends each role's values to its `tokens.npy` and the sequences' ends to `offsets.npy`,
counts the lengths (the histogram), and with an id column (or split sequences) writes the ids in
row order to a scratch file for the id index. The `.npy` headers are written first, with the
counts the parquet footers give (a list column's leaf values are its tokens when no list is
empty or NULL, and such lists never get here), and the bytes are hashed as they go out, so no
file is read back; a count that turns out different has its header rewritten and is hashed
afterwards. The files are byte for byte those of the two-pass `prepare.token_store`.

With `split_at` (`--over-cap split`) a sequence longer than `split_at` is stored as pieces of
`split_at` tokens (the last one the remainder), each a row of its own: the tokens stay where
they are, `offsets.npy` gets the cuts. The pieces' ids and `pieces.npy` follow `prepare.pieces`.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from seqpack_cli.over_cap import cut_lengths
from seqpack_cli.prepare.length_counter import LengthCounter
from seqpack_cli.prepare.pieces import first_piece_id, piece_ids_error, pieces_of, split_figures
from seqpack_cli.prepare.store_files import StoreFile, Writes
from seqpack_cli.prepare.token_batches import StoreColumns, TokenBatch
from seqpack_cli.prepare.token_reading import IDS_BY_ROW_NAME
from seqpack_cli.token_sources import IDS_NAME, OFFSETS_NAME, PIECES_NAME, ROWS_NAME, TOKENS_NAME

__all__ = ["StreamedStore"]


class StreamedStore:
    """The store's files in `root` (the prepared temporary directory) for the roles of `spec`
    and `num_input_rows` rows, filled by `add` in row order; `close_files`, then
    `number_pieces` (with a split) and the id index (`token_files.write_id_index`, from the
    ids-by-row scratch file) complete them."""

    def __init__(
        self,
        root: Path,
        spec: StoreColumns,
        num_input_rows: int,
        predicted: Mapping[str, int],
        *,
        split_at: int | None,
    ) -> None:
        self.root, self.spec, self.split_at = root, spec, split_at
        self.num_input_rows = num_input_rows
        self.with_index = spec.id_column is not None or split_at is not None
        self.lengths = LengthCounter()
        self.num_rows = 0  # input rows added
        self.num_tokens = 0
        self.id_max: int | None = None
        self._split: list[np.ndarray] = []  # per batch: (first row, source id, pieces) rows
        self.split_sources = np.zeros(0, dtype=np.int64)  # the split ones' ids, ascending
        self._store_rows = 0
        self._files: dict[str, StoreFile] = {}
        self._ids_by_row = None
        for role in spec.columns:
            (root / role).mkdir()
        tokens_dir = root / "tokens"
        self._writes = Writes()
        try:
            for role in spec.columns:
                path = root / role / TOKENS_NAME
                self._files[role] = StoreFile(
                    path, spec.dtypes[role], predicted[role], self._writes
                )
            offsets = StoreFile(
                tokens_dir / OFFSETS_NAME, np.dtype("<i8"), self.num_input_rows + 1, self._writes
            )
            self._files["offsets"] = offsets
            offsets.write(np.zeros(1, dtype=np.int64))
            if self.with_index:
                self._ids_by_row = open(tokens_dir / IDS_BY_ROW_NAME, "wb")  # noqa: SIM115
        except BaseException:
            self.abort()
            raise

    def add(self, batch: TokenBatch) -> None:
        lengths = batch.lengths
        self.lengths.add(lengths)
        for role, values in batch.values.items():
            self._files[role].write(values)
        ids = batch.ids
        if ids is not None and ids.size:
            top = int(ids.max())
            self.id_max = top if self.id_max is None else max(self.id_max, top)
        if self.with_index and ids is None:
            ids = np.arange(self.num_rows, self.num_rows + lengths.size, dtype=np.int64)
        pieces = lengths
        if self.split_at is not None and lengths.size and int(lengths.max()) > self.split_at:
            assert ids is not None
            pieces, per_row = cut_lengths(lengths, self.split_at)
            first_rows = self._store_rows + np.cumsum(per_row) - per_row
            over = np.flatnonzero(per_row > 1)
            self._split.append(np.stack([first_rows[over], ids[over], per_row[over]], axis=1))
            ids = np.repeat(ids, per_row)
            ids[np.repeat(per_row > 1, per_row)] = -1  # the pieces' ids come at the end
        ends = np.cumsum(pieces)
        ends += self.num_tokens
        self._files["offsets"].write(ends)
        if self._ids_by_row is not None:
            assert ids is not None
            self._ids_by_row.write(np.ascontiguousarray(ids, dtype=np.int64).data.cast("B"))
        self.num_rows += lengths.size
        self._store_rows += pieces.size
        if ends.size:
            self.num_tokens = int(ends[-1])

    def abort(self) -> None:
        self._writes.close()
        for file in self._files.values():
            file.abort()
        if self._ids_by_row is not None:
            self._ids_by_row.close()

    # ---- the end: headers, piece ids, the id index -------------------------------------------

    def close_files(self) -> dict[str, str | None]:
        """Close the streamed files; {role or "offsets": sha256 or None}."""
        if self._ids_by_row is not None:
            self._ids_by_row.close()
        self._writes.drain()
        self._writes.close()
        return {key: file.close() for key, file in self._files.items()}

    def value_count(self, role: str) -> int:
        """The values written to `role`'s tokens.npy."""
        return self._files[role].count

    @property
    def num_store_rows(self) -> int:
        """Rows of the store: the input rows, each split one counted once per piece."""
        return self._store_rows

    def first_piece_id(self) -> int:
        """The first id a piece takes: one past the largest input id."""
        return first_piece_id(self.spec.id_column, self.id_max, self.num_input_rows)

    def number_pieces(self) -> dict[str, int] | None:
        """Give the pieces their ids (in the ids-by-row scratch file) and write the piece table;
        the split's figures, or None without a split. `InputError` when the ids run out."""
        if self.split_at is None:
            return None
        tokens_dir = self.root / "tokens"
        split = np.concatenate(self._split) if self._split else np.zeros((0, 3), np.int64)
        order = np.argsort(split[:, 1], kind="stable")  # by source id
        first_rows, sources, counts = (split[order, k] for k in range(3))
        self.split_sources = sources
        num_pieces = int(counts.sum())
        first = self.first_piece_id()
        error = piece_ids_error(self.spec.id_column, first, num_pieces)
        if error is not None:
            raise error
        within, table = pieces_of(sources, counts, first, self.split_at)
        if num_pieces:
            by_row = np.memmap(tokens_dir / IDS_BY_ROW_NAME, dtype=np.int64, mode="r+")
            by_row[np.repeat(first_rows, counts) + within] = table[:, 0]
            by_row.flush()
            del by_row
        np.save(tokens_dir / PIECES_NAME, np.ascontiguousarray(table, dtype="<i8"))
        return split_figures(self.split_at, int(sources.size), num_pieces, first)

    def split_ids_repeat(self) -> bool:
        """Whether a split sequence's id is another sequence's too (the id index, sorted, holds
        the others' ids and the pieces', not the split ones': those are checked here)."""
        sources = self.split_sources
        if self.spec.id_column is None or not sources.size:
            return False
        if np.any(sources[1:] == sources[:-1]):
            return True
        ids = np.load(self.root / "tokens" / IDS_NAME, mmap_mode="r")
        found = np.minimum(np.searchsorted(ids, sources), max(ids.shape[0] - 1, 0))
        return bool(ids.shape[0] and np.any(ids[found] == sources))

    def copy_shared(self, role: str) -> None:
        """The files every role shares with tokens/ (the offsets and the id index), copied into
        `role`/: labels and masks are cut and indexed like the tokens."""
        names = [OFFSETS_NAME] + ([IDS_NAME, ROWS_NAME] if self.with_index else [])
        for name in names:
            shutil.copyfile(self.root / "tokens" / name, self.root / role / name)

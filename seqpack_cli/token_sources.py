"""Per-sequence sources: sequence id -> a 1-D integer array (tokens, labels or a loss mask).

A *source* is anything indexable by a sequence id that returns that sequence's values as a 1-D
integer sequence: a list of lists, a 2-D or object numpy array, a list of (or a 2-D) CPU torch
tensor, a Hugging Face `datasets.Dataset` column (`dataset["input_ids"]`), or `FlatTokenSource`
over one memory-mapped array plus offsets. The collator reads tokens, labels and loss masks
through the same protocol, so any of these can hold any of the three.

A store that can fetch many sequences at once implements `take_sequences(seq_ids) -> (values,
lengths)` (the values of `seq_ids` back to back, int64, and each one's length, int64), as
`FlatTokenSource` does: the collator then fetches a whole batch with that one call instead of one
look-up per sequence. An on-disk token store only needs `__getitem__`, and `take_sequences` for
speed.

`fetch` never loops over tokens in Python: one call per sequence at most, then one concatenate.

A token source directory (written by `seqpack_cli.prepare.token_files.write_token_source` from
a parquet column of token lists) holds `tokens.npy` (all values back to back, the smallest
unsigned dtype that holds them), `offsets.npy` (int64), with an id column (or split sequences,
`has_id_index`) `ids.npy` and `rows.npy` (int64: the ids ascending, and the row holding each),
and `token_source.json` (written last). A loss mask or labels may hold `num_targets.npy` too,
each sequence's number of loss targets (`seqpack_cli.target_counts`), described in
`token_source.json` and opened as the source's `num_targets`. `FlatTokenSource.open(path)`
memory-maps it. The token
store of `seqpack prepare --over-cap split` adds `pieces.npy` to its `tokens/`: one row
(piece id, source id, start) per piece, for tracing pieces back (`open_store` does not need it).
`seqpack_cli.prepared.alignment.check_pool_lengths` checks that a source holds every id of a
prepared directory's pools with their lengths.
"""

from __future__ import annotations

import json
import operator
import os
import re
import tokenize
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli.errors import InputError
from seqpack_cli.target_counts import NUM_TARGETS_KEY, NUM_TARGETS_NAME, NumTargets, check_entry

__all__ = [
    "IDS_NAME",
    "INFO_NAME",
    "NPY_HEADER_ERRORS",
    "OFFSETS_NAME",
    "PIECES_NAME",
    "ROWS_NAME",
    "TOKENS_NAME",
    "TOKEN_SOURCE_FORMAT",
    "TOKEN_SOURCE_VERSION",
    "FlatTokenSource",
    "fetch",
    "has_id_index",
    "map_npy",
    "npy_header_problem",
    "opener_at",
    "read_npy_header",
    "shown",
    "write_info",
]

_MAX_IDS_SHOWN = 8
_MIN_SLICE_TOKENS = 16
"""`FlatTokenSource.take` copies sequences of this many tokens or more (on average) as slices."""

# ---- the token source directory ---------------------------------------------------------------

TOKENS_NAME = "tokens.npy"
OFFSETS_NAME = "offsets.npy"
IDS_NAME = "ids.npy"
ROWS_NAME = "rows.npy"
INFO_NAME = "token_source.json"
PIECES_NAME = "pieces.npy"
"""A split store's piece table (`prepare --over-cap split`): int64 rows (piece id, source id,
start), one per piece, by piece id: piece `p` holds the source's tokens from `start` on."""
TOKEN_SOURCE_FORMAT = "seqpack-tokens"
"""`token_source.json`'s `format`: what marks a directory as a seqpack token source."""
TOKEN_SOURCE_VERSION = 1


def write_info(folder: Path, info: Mapping[str, Any]) -> None:
    """`folder/token_source.json` holding `info`: written under a temporary name and renamed
    over any old one, so it is never half written, and a file linked from another directory (a
    store's roles may share files) is left as it was."""
    staged = folder / f".{INFO_NAME}.tmp"
    staged.write_text(json.dumps(info, indent=1) + "\n", "utf-8")
    os.replace(staged, folder / INFO_NAME)


INDEX_DTYPE = "<i8"
"""The exact dtype (little-endian int64) of `offsets.npy`, `ids.npy` and `rows.npy`."""

NPY_HEADER_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    SyntaxError,
    TypeError,
    tokenize.TokenError,
    MemoryError,
    OverflowError,
)
"""What numpy raises for a .npy header it cannot parse (a flipped byte in the header's Python
literal gives a `tokenize.TokenError`, a `SyntaxError`, ...)."""

_POOL_HEADER = re.compile(rb"\{'descr': '<i8', 'fortran_order': False, 'shape': \((\d+),\), \} *\n")


def npy_header_problem(error: Exception) -> str:
    """One line (at most 120 characters) naming what `read_npy_header` raised."""
    return " ".join(f"{type(error).__name__}: {error}".split())[:120]


def read_npy_header(handle: Any) -> tuple[np.dtype[Any], tuple[int, ...], int]:
    """(dtype, shape, data offset) of an open .npy file (C order, no Python objects); fast for
    the 1-d int64 headers seqpack writes. Raises one of `NPY_HEADER_ERRORS` for a header that
    does not parse, OSError where the file cannot be read."""
    start = handle.read(10)
    if start[:8] == b"\x93NUMPY\x01\x00":
        body = handle.read(int.from_bytes(start[8:10], "little"))
        match = _POOL_HEADER.fullmatch(body)
        if match:
            return np.dtype(INDEX_DTYPE), (int(match.group(1)),), 10 + len(body)
    handle.seek(0)
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
    else:
        raise ValueError(f".npy version {version[0]}.{version[1]} is not one seqpack writes")
    if dtype.hasobject or (fortran and len(shape) > 1):
        raise ValueError(f"it holds {'Python objects' if dtype.hasobject else 'Fortran order'}")
    return dtype, tuple(shape), handle.tell()


def opener_at(dir_fd: int | None) -> Any:
    """An `opener` for `open` that opens names relative to the directory descriptor `dir_fd`
    (None: the default opener)."""
    if dir_fd is None:
        return None
    return lambda name, flags: os.open(name, flags, dir_fd=dir_fd)


def map_npy(path: str | os.PathLike[str], *, dir_fd: int | None = None, fix: str) -> np.ndarray:
    """The array of a .npy file, memory-mapped read-only; `path` is opened relative to the
    directory descriptor `dir_fd` if given (its `os.path.basename` then). Raises `InputError`,
    one line naming the file, ending in `fix`, for a file that cannot be read, a header that
    does not parse, or fewer bytes than the header says."""
    name = os.path.basename(path) if dir_fd is not None else path
    try:
        with open(name, "rb", opener=opener_at(dir_fd)) as handle:
            try:
                dtype, shape, offset = read_npy_header(handle)
            except NPY_HEADER_ERRORS as error:
                detail = npy_header_problem(error)
                raise InputError(f"{path}: not a valid .npy file ({detail}); {fix}") from None
            num_bytes = dtype.itemsize * int(np.prod(shape, dtype=object))
            size = os.fstat(handle.fileno()).st_size
            if size != offset + num_bytes:  # what np.save writes, exactly
                raise InputError(
                    f"{path} has {size} bytes, but its header says {offset + num_bytes} "
                    f"({shape} {dtype.str} values); {fix}"
                )
            if num_bytes == 0:
                return np.empty(shape, dtype=dtype)
            return np.memmap(handle, dtype=dtype, mode="r", offset=offset, shape=shape)
    except OSError as error:
        raise InputError(f"{path} cannot be read ({error.strerror or error}); {fix}") from None


def has_id_index(info: Mapping[str, Any]) -> bool:
    """Whether the token source `info` (its `token_source.json`) describes has an id index
    (`ids.npy`, `rows.npy`): with an id column, and in a store of split sequences (`prepare
    --over-cap split`: the pieces take new ids, so a row is no longer its id)."""
    return bool(info.get("id_column") or info.get("split"))


class FlatTokenSource:
    """Sequences stored back to back in one flat token array, with `offsets` marking each start.

    Sequence i is `tokens[offsets[i]:offsets[i + 1]]`. `tokens` may be a read-only `np.memmap`
    (e.g. `np.load("tokens.npy", mmap_mode="r")`): a batch is fetched with one fancy-index
    gather, so only the pages holding its tokens are read. The same layout holds labels, or a
    loss mask as 0/1 integers (e.g. uint8), for `PackedCollator(labels_source=...)` or
    `loss_mask_source=...`.

    Sequence ids are the rows (0 .. len - 1) unless `ids` is given; then they are looked up by
    binary search. `FlatTokenSource.open(path)` memory-maps a token source directory
    (`seqpack_cli.prepare.token_files.write_token_source` writes one).

    Args:
        tokens: every sequence's values back to back, a 1-D integer array (np.memmap welcome).
        offsets: where each sequence starts, plus the end: a non-decreasing 1-D integer array
            within [0, len(tokens)], one entry more than there are sequences, e.g.
            `np.concatenate([[0], np.cumsum(lengths)])`.
        ids: the sequence ids, strictly increasing integers; None (the default): the rows are
            the ids.
        rows: with `ids`, `rows[k]` is the row holding `ids[k]` (default: the k-th row).

    Raises:
        InputError: for tokens or offsets of the wrong shape, dtype or order, ids that do not
            increase, rows outside the source, or `rows` without `ids`.
    """

    def __init__(self, tokens: Any, offsets: Any, *, ids: Any = None, rows: Any = None) -> None:
        self.tokens = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        if self.tokens.ndim != 1 or self.tokens.dtype.kind not in "iu":
            raise InputError(
                f"FlatTokenSource tokens has shape {self.tokens.shape} and dtype "
                f"{self.tokens.dtype}; expected a 1-D integer array of all tokens back to back"
            )
        # Neighbours compared, never subtracted: np.diff of int64 wraps around past 2**63.
        if (
            self.offsets.ndim != 1
            or self.offsets.size == 0
            or self.offsets[0] < 0
            or self.offsets[-1] > self.tokens.shape[0]
            or bool(np.any(self.offsets[1:] < self.offsets[:-1]))
        ):
            raise InputError(
                f"FlatTokenSource offsets (shape {self.offsets.shape}) must be a non-decreasing "
                f"1-D array within [0, {self.tokens.shape[0]}] with one more entry than there "
                "are sequences: build it as np.concatenate([[0], np.cumsum(lengths)])"
            )
        # A plain view for reading: indexing a np.memmap wraps every result in a memmap.
        self._flat = self.tokens.view(np.ndarray)
        self.ids: np.ndarray | None = None
        self.rows: np.ndarray | None = None
        if ids is not None:
            self.ids, self.rows = self._id_index(ids, rows)
        elif rows is not None:
            raise InputError("FlatTokenSource rows is given without ids; pass both or neither")
        self.path: Path | None = None
        """The directory `open` read, or None (then pickling copies the arrays)."""
        self.info: dict[str, Any] = {}
        """`token_source.json` of that directory (column, id column, inputs), or empty."""
        self.num_targets: NumTargets | None = None
        """Each sequence's number of loss targets (`seqpack_cli.target_counts`), when this is
        a loss mask or labels written with them (`num_targets.npy`); else None."""

    def _id_index(self, ids: Any, rows: Any) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ids)
        rows = np.arange(len(self), dtype=np.int64) if rows is None else np.asarray(rows)
        if ids.dtype.kind not in "iu" or rows.dtype.kind not in "iu":
            raise InputError(
                f"FlatTokenSource ids ({ids.dtype}) and rows ({rows.dtype}) must be integers"
            )
        ids = np.asarray(ids, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.int64)
        if ids.ndim != 1 or ids.shape != rows.shape:
            raise InputError(
                f"FlatTokenSource ids (shape {ids.shape}) and rows (shape {rows.shape}) must be "
                "1-D and as long as each other: rows[k] is the row holding sequence ids[k]"
            )
        if ids.size and (
            bool(np.any(ids[1:] <= ids[:-1])) or rows.min() < 0 or rows.max() >= len(self)
        ):
            raise InputError(
                f"FlatTokenSource ids must be strictly increasing and rows within [0, "
                f"{len(self)}); sort the ids (np.argsort) and take the rows in the same order"
            )
        return ids, rows

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        dir_fd: int | None = None,
        fix: str = "write it again (write_token_source(..., overwrite=True))",
    ) -> FlatTokenSource:
        """Memory-map the token source directory at `path` (see the module docstring).

        The source pickles as its path: DataLoader workers map the files themselves instead of
        receiving copies.

        Args:
            path: the token source directory.
            dir_fd: a descriptor of that directory, or None (the default); given, its files are
                opened through it, so they all come from the directory it was opened on even if
                `path` is replaced meanwhile.
            fix: how to mend a broken directory, the end of every error message (default: write
                it again with `write_token_source(..., overwrite=True)`).

        Returns:
            The `FlatTokenSource`, its arrays memory-mapped read-only, `path` and `info` set.

        Raises:
            InputError: one line ending in `fix`, when the directory is missing, incomplete or
                inconsistent: a file that does not parse, `offsets.npy`, `ids.npy` or
                `rows.npy` not exactly little-endian int64 (`<i8`), tokens of another byte
                order, offsets that do not start at 0, decrease or do not end at the token
                count, ids not strictly increasing.
        """
        root = Path(path)
        try:
            with open(
                INFO_NAME if dir_fd is not None else root / INFO_NAME,
                encoding="utf-8",
                opener=opener_at(dir_fd),
            ) as handle:
                info = json.loads(handle.read())
        except (OSError, ValueError) as error:
            raise InputError(
                f"{root} is not a token source directory: {INFO_NAME} cannot be read ({error}); "
                "pass the output of write_token_source"
            ) from None
        if not isinstance(info, dict) or info.get("format") != TOKEN_SOURCE_FORMAT:
            raise InputError(f"{root / INFO_NAME} is not a seqpack token source's; {fix}")
        if info.get("format_version") != TOKEN_SOURCE_VERSION:
            raise InputError(
                f"{root} is a token source of format_version {info.get('format_version')!r}; "
                f"this seqpack reads {TOKEN_SOURCE_VERSION}: {fix}"
            )
        names = [TOKENS_NAME, OFFSETS_NAME] + ([IDS_NAME, ROWS_NAME] if has_id_index(info) else [])
        arrays = [map_npy(root / name, dir_fd=dir_fd, fix=fix) for name in names]
        for name, array in zip(names, arrays, strict=True):
            # The exact dtype: a header flipped to another byte order reads as other numbers.
            wrong_index = name != TOKENS_NAME and array.dtype.str != INDEX_DTYPE
            if wrong_index or array.dtype.str[0] == ">" or array.dtype.kind not in "iu":
                expected = "little-endian integers" if name == TOKENS_NAME else INDEX_DTYPE
                raise InputError(
                    f"{root / name} holds {array.dtype.str} values; expected {expected}: {fix}"
                )
        tokens, offsets = arrays[:2]
        num_sequences, num_tokens = info.get("num_sequences"), info.get("num_tokens")
        if (
            not (isinstance(num_sequences, int) and isinstance(num_tokens, int))
            or offsets.shape != (num_sequences + 1,)
            or tokens.shape != (num_tokens,)
        ):
            raise InputError(
                f"{root} holds {tokens.shape} tokens and {offsets.shape} offsets, but "
                f"{INFO_NAME} records {info.get('num_tokens')} tokens and "
                f"{info.get('num_sequences')} sequences; {fix}"
            )
        if offsets[0] != 0 or offsets[-1] != num_tokens:
            raise InputError(
                f"{root / OFFSETS_NAME} runs from {offsets[0]} to {offsets[-1]}; expected 0 to "
                f"the {num_tokens} tokens of {TOKENS_NAME}: {fix}"
            )
        try:
            source = cls(
                tokens,
                offsets,
                ids=arrays[2] if len(arrays) > 2 else None,
                rows=arrays[3] if len(arrays) > 2 else None,
            )
        except InputError as error:
            raise InputError(f"{root}: {error}; {fix}") from None
        source.path = root
        source.info = info
        if NUM_TARGETS_KEY in info:
            source.num_targets = _open_num_targets(source, dir_fd, fix)
        return source

    def __reduce__(self) -> tuple[Any, ...]:
        if self.path is not None:
            return (type(self).open, (self.path,))
        return (_rebuild, (type(self), self.tokens, self.offsets, self.ids, self.rows))

    def __repr__(self) -> str:
        where = f"{os.fspath(self.path)!r}, " if self.path is not None else ""
        ids = "row index" if self.ids is None else f"{self.ids.shape[0]} ids"
        return (
            f"FlatTokenSource({where}{len(self)} sequences, {self.tokens.shape[0]} "
            f"{self.tokens.dtype} values, ids: {ids})"
        )

    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def __getitem__(self, seq_id: int) -> np.ndarray:
        row = int(self.find_rows(np.array([operator.index(seq_id)]), missing="raise")[0])
        return self.tokens[self.offsets[row] : self.offsets[row + 1]]

    def find_rows(self, seq_ids: np.ndarray, *, missing: str = "raise") -> np.ndarray:
        """The row holding each of `seq_ids` (the id itself without an id index).

        Args:
            seq_ids: the sequence ids (integers).
            missing: what an id the source lacks gets: "raise" (the default) raises
                `InputError`, "mark" gives it row -1.

        Returns:
            The rows, int64, one per id.

        Raises:
            InputError: for an id the source lacks, with missing="raise".
        """
        seq_ids = np.asarray(seq_ids, dtype=np.int64)
        if self.ids is None:
            absent = (seq_ids < 0) | (seq_ids >= len(self))
            rows = seq_ids
        else:
            assert self.rows is not None
            if self.ids.size == 0:
                absent, rows = np.ones(seq_ids.shape, dtype=bool), seq_ids
            else:
                position = np.searchsorted(self.ids, seq_ids)
                np.minimum(position, self.ids.shape[0] - 1, out=position)
                absent = np.asarray(self.ids[position] != seq_ids)
                rows = np.asarray(self.rows[position], dtype=np.int64)
        if not absent.any():
            return rows
        if missing == "mark":
            return np.where(absent, -1, rows)
        bad = int(seq_ids[absent][0])
        if self.ids is None:
            raise InputError(
                f"sequence id {bad} is outside FlatTokenSource's {len(self)} sequences; "
                "expected ids in [0, len(source))"
            )
        raise InputError(
            f"sequence id {bad} is not among FlatTokenSource's {self.ids.shape[0]} ids; "
            "expected every id to be one of its id column's values"
        )

    def sequence_lengths(self, seq_ids: np.ndarray, *, missing: str = "raise") -> np.ndarray:
        """The length of each of `seq_ids`, without reading tokens.

        Args:
            seq_ids: the sequence ids (integers).
            missing: "raise" (the default) or "mark", as for `find_rows`.

        Returns:
            The lengths, int64, one per id (-1 for an id the source lacks, with "mark").

        Raises:
            InputError: for an id the source lacks, with missing="raise".
        """
        rows = self.find_rows(seq_ids, missing=missing)
        found = rows >= 0
        safe = np.where(found, rows, 0)
        lengths = np.asarray(self.offsets[safe + 1] - self.offsets[safe], dtype=np.int64)
        return np.where(found, lengths, -1)

    def take(self, seq_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tokens of `seq_ids` concatenated in order (int64), and their lengths.

        Each sequence is one contiguous slice: copying the slices is 3-5x faster than one
        gather of every token's index (which builds and reads an int64 index per token), unless
        the sequences are so short that the per-slice cost dominates; then one gather.

        Args:
            seq_ids: the sequence ids (integers), in the order wanted.

        Returns:
            `(values, lengths)`: the values, int64, back to back, and each sequence's length.

        Raises:
            InputError: for an id the source lacks.
        """
        rows = self.find_rows(seq_ids)
        starts = self.offsets[rows]
        ends = self.offsets[rows + 1]
        lengths = ends - starts
        flat = self._flat
        if rows.shape[0] and int(lengths.sum()) >= _MIN_SLICE_TOKENS * rows.shape[0]:
            slices = [flat[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
            return np.concatenate(slices).astype(np.int64, copy=False), lengths
        # index[t] = start of t's sequence + t's offset within it, via one repeat.
        shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        index = shift + np.arange(shift.shape[0], dtype=np.int64)
        return flat[index].astype(np.int64, copy=False), lengths

    take_sequences = take  # the batch-fetch protocol `fetch` looks for


def _open_num_targets(source: FlatTokenSource, dir_fd: int | None, fix: str) -> NumTargets:
    """The `num_targets.npy` that `source.info` describes, memory-mapped and checked: as many
    counts as sequences, of the recorded dtype."""
    assert source.path is not None
    entry = source.info[NUM_TARGETS_KEY]
    problem = check_entry(entry)
    if problem is not None:
        raise InputError(f"{source.path / INFO_NAME}: {problem}; {fix}")
    path = source.path / NUM_TARGETS_NAME
    counts = map_npy(path, dir_fd=dir_fd, fix=fix)
    expected = np.dtype(entry["dtype"]).newbyteorder("<").str
    if counts.dtype.str != expected or counts.shape != (len(source),):
        raise InputError(
            f"{path} holds {counts.shape} {counts.dtype.str} values; expected one {expected} "
            f"count per sequence ({len(source)}): {fix}"
        )
    return NumTargets(
        counts,
        source,
        role=entry["role"],
        truncated_to=entry["truncated_to"],
        label_pad_id=entry["label_pad_id"],
    )


def _rebuild(
    cls: type[FlatTokenSource], tokens: Any, offsets: Any, ids: Any, rows: Any
) -> FlatTokenSource:
    return cls(tokens, offsets, ids=ids, rows=rows)


def shown(values: Sequence[int] | np.ndarray) -> str:
    """A short rendering of an id or length list for error messages."""
    head = [int(v) for v in values[: _MAX_IDS_SHOWN + 1]]
    if len(head) <= _MAX_IDS_SHOWN:
        return str(head)
    return f"{head[:_MAX_IDS_SHOWN]} + {len(values) - _MAX_IDS_SHOWN} more"


def _kinds(allow_bool: bool) -> str:
    return "iub" if allow_bool else "iu"


def _as_array(item: Any, seq_id: int, name: str, allow_bool: bool) -> np.ndarray:
    """One sequence's values as a 1-D integer numpy array, or an `InputError` saying why not."""
    if isinstance(item, Mapping):
        raise InputError(
            f"{name}[{seq_id}] is a mapping with keys {sorted(map(str, item))[:5]}; "
            "expected a 1-D sequence: pass one column, e.g. dataset['input_ids']"
        )
    try:
        values = np.asarray(item)
    except (TypeError, RuntimeError) as error:
        raise InputError(
            f"{name}[{seq_id}] ({type(item).__name__}) cannot be read as an array "
            f"({error}); keep sources on the CPU"
        ) from error
    if values.ndim != 1 or values.shape[0] == 0:
        raise InputError(
            f"{name}[{seq_id}] has shape {values.shape}; expected a non-empty 1-D "
            "sequence: drop empty sequences before packing"
        )
    if values.dtype.kind not in _kinds(allow_bool):
        raise InputError(
            f"{name}[{seq_id}] has dtype {values.dtype}; expected integer "
            + ("values (0/1 or bool)" if allow_bool else "token ids")
        )
    return values


def _missing_sequence_error(name: str, seq_ids: np.ndarray, error: Exception) -> InputError:
    return InputError(
        f"{name} has no sequence for one of the ids {shown(seq_ids)} ({error}); "
        f"expected every id in a bin to index {name}: pack and collate the same dataset"
    )


def fetch(
    source: Any, seq_ids: np.ndarray, *, name: str = "token_source", allow_bool: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The values of `seq_ids` concatenated in order (int64), and each sequence's length.

    `name` is how error messages call the source; `allow_bool` admits bool values (a loss mask).
    """
    take_sequences = getattr(type(source), "take_sequences", None)
    if take_sequences is not None:
        try:
            values, lengths = take_sequences(source, seq_ids)
        except InputError as error:
            raise InputError(f"{name}: {error}") from error
        return np.asarray(values, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    if getattr(source, "ndim", None) == 2:
        # A 2-D array or tensor: every row is one sequence; gather all rows at once.
        try:
            rows = np.asarray(source[seq_ids])
        except IndexError as error:
            raise _missing_sequence_error(name, seq_ids, error) from error
        if rows.dtype.kind not in _kinds(allow_bool) or rows.shape[1] == 0:
            raise InputError(
                f"{name} has dtype {rows.dtype} and rows of {rows.shape[1]} values; "
                "expected integer values and non-empty rows"
            )
        lengths = np.full(seq_ids.shape[0], rows.shape[1], dtype=np.int64)
        return rows.reshape(-1).astype(np.int64, copy=False), lengths
    # Anything else: one look-up per sequence (never per token), then one concatenate.
    try:
        chunks = [_as_array(source[i], i, name, allow_bool) for i in seq_ids.tolist()]
    except (IndexError, KeyError) as error:
        raise _missing_sequence_error(name, seq_ids, error) from error
    lengths = np.fromiter((c.shape[0] for c in chunks), dtype=np.int64, count=len(chunks))
    return np.concatenate(chunks).astype(np.int64, copy=False), lengths

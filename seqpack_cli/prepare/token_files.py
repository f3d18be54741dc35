"""Parquet token lists -> a token source directory: `write_token_source`, `check_token_source`.

For data whose tokens are kept beside the prepared directory rather than in it: a column of token
lists (list / large_list / fixed_size_list of integers, e.g. TRL's `input_ids`) is read from the
inputs exactly as `seqpack prepare` resolves them (`resolve_inputs`: files, globs, directories,
sorted by path), so row-index ids are the same global row indexes. The reading (footers, the
dtype, the streamed pass) is in `prepare.token_reading`; this module checks the arguments and
the output, writes the id index, checks against a prepared directory, and moves the result into
place atomically (a hidden temporary sibling, `prepared.staging`, then one rename).

What is written is read back by `FlatTokenSource.open` (layout: `seqpack_cli.token_sources`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli import __version__
from seqpack_cli.errors import ConfigError, InputError, option
from seqpack_cli.prepare.inputs import resolve_inputs
from seqpack_cli.prepare.memory_inputs import check_inputs, is_table, named, stage_tables
from seqpack_cli.prepare.num_targets import write_num_targets
from seqpack_cli.prepare.token_reading import (
    IDS_BY_ROW_NAME,
    TokenInput,
    inspect_token_inputs,
    role_rule,
    store_dtype,
    stream_token_lists,
)
from seqpack_cli.prepared import Prepared, load_prepared, recover_siblings
from seqpack_cli.prepared import siblings as _siblings
from seqpack_cli.prepared.alignment import check_pool_lengths
from seqpack_cli.prepared.format import STORE_ROLES
from seqpack_cli.prepared.mounts import check_no_mounts_inside, remove_tree
from seqpack_cli.prepared.staging import Staging
from seqpack_cli.target_counts import COUNTED_ROLES, NUM_TARGETS_NAME
from seqpack_cli.token_sources import (
    IDS_NAME,
    INFO_NAME,
    OFFSETS_NAME,
    ROWS_NAME,
    TOKEN_SOURCE_FORMAT,
    TOKEN_SOURCE_VERSION,
    TOKENS_NAME,
    FlatTokenSource,
    write_info,
)

__all__ = [
    "check_token_source",
    "repeated_id_error",
    "row_locator",
    "source_info",
    "store_entry",
    "write_id_index",
    "write_token_source",
]

logger = logging.getLogger(__name__)

_OWN_NAMES = frozenset(
    {TOKENS_NAME, OFFSETS_NAME, IDS_NAME, ROWS_NAME, INFO_NAME, NUM_TARGETS_NAME}
)
_OVERWRITE = option("overwrite", python="overwrite=True")
_ROLE_RULES = {
    role: role_rule(role, mask_fix="fix the column, or write labels (role='labels') instead")
    for role in STORE_ROLES
}
"""What each `role` of `write_token_source` admits, and how messages name its column."""


# ---- the output: what may be replaced, and the move into place ---------------------------------


def _is_token_source(directory: Path) -> bool:
    try:
        info = json.loads((directory / INFO_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and info.get("format") == TOKEN_SOURCE_FORMAT


def _check_output(output: Path, *, overwrite: bool) -> None:
    """Refuse an output that is a file, exists (without overwrite), or is a non-empty directory
    other than a token source holding only its own files."""
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise ConfigError(
            f"output path {output} exists and is not a directory; {option('output')} names the "
            "token source directory to create: choose another path or remove that file"
        )
    if not output.is_dir():
        return
    if not overwrite:
        raise ConfigError(
            f"output directory {output} already exists; pass {_OVERWRITE} to replace it, or "
            f"choose another {option('output')}"
        )
    check_no_mounts_inside(output)
    entries = sorted(os.listdir(output))
    foreign = [name for name in entries if name not in _OWN_NAMES]
    if entries and (foreign or not _is_token_source(output)):
        raise ConfigError(
            f"output directory {output} is not empty and is not a seqpack token source (it "
            f"holds {(foreign or entries)[0]!r}), so {_OVERWRITE} will not replace it; remove "
            f"it yourself or choose another {option('output')}"
        )


def _move_into_place(staging: Staging, output: Path, *, overwrite: bool) -> Path | None:
    """Rename the finished directory to `output`; return where the replaced copy now is."""
    new = staging.path
    try:
        if not os.path.lexists(output):
            try:
                if _siblings.rename2(new, output, _siblings.RENAME_NOREPLACE):
                    return None
            except OSError as error:
                if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
            if not os.path.lexists(output):  # no renameat2 here
                os.rename(new, output)
                return None
        _check_output(output, overwrite=overwrite)  # created or changed meanwhile?
        if _siblings.rename2(new, output, _siblings.RENAME_EXCHANGE):
            return new  # the old copy now has the new one's former name
        os.rename(output, staging.old_path)
        try:
            os.rename(new, output)
        except BaseException:
            os.rename(staging.old_path, output)
            raise
        return staging.old_path
    except OSError as error:
        raise ConfigError(
            f"cannot move the new token source into place at {output}: "
            f"{error.strerror or error}; nothing was changed"
        ) from None


# ---- the id index ------------------------------------------------------------------------------


def row_locator(files: Sequence[dict[str, Any]]) -> Callable[[int], str]:
    """Global row -> "FILE at row R (0-based)"."""
    ends = np.cumsum([file["num_rows"] for file in files])

    def locate(row: int) -> str:
        index = int(np.searchsorted(ends, row, side="right"))
        start = int(ends[index - 1]) if index else 0
        return f"{files[index]['path']} at row {row - start} (0-based)"

    return locate


def repeated_id_error(id_column: str | None, value: int, first: str, second: str) -> InputError:
    """The error for the id `value` held by the rows at `first` and `second` (`write_id_index`'s,
    and the Dask store's)."""
    return InputError(
        f"id column {id_column!r} ({option('id_column')}) holds the id {value} more than once "
        f"({first} and {second}); ids must be unique (prepare refuses them too): fix the column, "
        "or leave id_column unset for row-index ids"
    )


def write_id_index(directory: Path, id_column: str | None, locate: Callable[[int], str]) -> None:
    """ids.npy (the ids ascending) and rows.npy (the row of each) from the ids in row order;
    `InputError` for an id held twice. Sorted in memory: at most 32 bytes a row (the ids, the
    order, the sorted ids and the sort's scratch), 3.2 GB at 1e8 rows."""
    by_row = directory / IDS_BY_ROW_NAME
    ids = np.fromfile(by_row, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    same = np.flatnonzero(ids[1:] == ids[:-1])
    if same.size:
        k = int(same[0])
        first, second = locate(int(order[k])), locate(int(order[k + 1]))
        raise repeated_id_error(id_column, int(ids[k]), first, second)
    # Little-endian int64 whatever the machine: the loader accepts exactly "<i8".
    np.save(directory / IDS_NAME, ids.astype("<i8", copy=False))
    np.save(directory / ROWS_NAME, order.astype("<i8", copy=False))
    by_row.unlink()


# ---- checking against a prepared directory ----------------------------------------------------


def _ids_from(id_column: Any) -> str:
    return f"id column {id_column!r}" if id_column else "the row index"


def _check_ids_from(prepared: Prepared, id_column: str | None, shown: Path | None) -> None:
    """`InputError` unless the token source takes its ids where `prepared` does."""
    expected = prepared.manifest.get("config", {}).get("id_column")
    if id_column != expected:
        raise InputError(
            f"prepared directory {prepared.path} takes its sequence ids from "
            f"{_ids_from(expected)}, but token source {shown} from {_ids_from(id_column)}; "
            f"write the token source with id_column={expected!r}"
        )


def check_token_source(source: FlatTokenSource, prepared: Prepared | str | os.PathLike[str]) -> int:
    """Check that `source` holds every id of `prepared`'s pools with exactly the pool's length
    (at least `max_seq_len` for the longest pool of a `--over-cap truncate` prepare). Reads only
    the offsets (and the id index), not the tokens.

    Args:
        source: the token source to check (`FlatTokenSource.open(...)`, or what
            `write_token_source` returned).
        prepared: `load_prepared(...)`'s result, or the path of a prepared directory.

    Returns:
        The number of ids checked.

    Raises:
        InputError: an id missing from `source` or stored with another length, naming the id,
            where its row comes from, both lengths and the fix; and up front when the two take
            their ids from different columns.
    """
    return _check_against(source, prepared, getattr(source, "path", None))


def _check_against(
    source: FlatTokenSource, prepared: Prepared | str | os.PathLike[str], shown: Path | None
) -> int:
    """`check_token_source`, naming the source `shown` (the output, while it is written)."""
    if isinstance(prepared, (str, os.PathLike)):
        prepared = load_prepared(prepared)
    info = getattr(source, "info", None) or {}
    if "id_column" in info:
        _check_ids_from(prepared, info["id_column"], shown)
    locate: Callable[[int], str] | None = None
    files = info.get("inputs", {}).get("files")
    if files and hasattr(source, "find_rows"):
        locate_row = row_locator(files)
        locate = lambda seq_id: locate_row(int(source.find_rows(np.array([seq_id]))[0]))  # noqa: E731

    return check_pool_lengths(
        source,
        prepared.pools,
        truncated_at=prepared.over_cap.cut_to,
        name=f"token source {shown}" if shown is not None else "token source",
        locate=locate,
    )


# ---- the builder --------------------------------------------------------------------------------


def _check_arguments(column: Any, id_column: Any, dtype: Any, role: Any) -> np.dtype[Any] | None:
    if role not in _ROLE_RULES:
        raise ConfigError(
            f"{option('role')} is {role!r}; expected one of {list(_ROLE_RULES)}: 'tokens' for "
            "token ids, 'labels' for per-token labels (-100: no target), 'loss_mask' for 0/1"
        )
    for name, value in (("column", column), ("id_column", id_column)):
        if (value is not None or name == "column") and not (isinstance(value, str) and value):
            raise ConfigError(f"{option(name)} is {value!r}; expected a column name")
    if id_column == column:
        raise ConfigError(
            f"{option('id_column')} {id_column!r} is also the token column; name the column "
            "of unique integer ids, or leave it unset for row-index ids"
        )
    if dtype is None:
        return None
    try:
        chosen = np.dtype(dtype)
    except TypeError:
        chosen = None
    if chosen is None or chosen.kind not in "iu":
        raise ConfigError(
            f"{option('dtype')} is {dtype!r}; expected an integer dtype (e.g. 'uint32', or "
            "'int32' for labels with -100), or None for the smallest unsigned one"
        )
    return chosen.newbyteorder("<") if chosen.itemsize > 1 else chosen


def store_entry(info: Mapping[str, Any]) -> dict[str, Any]:
    """A role's entry in the manifest's `token_store` section, from its `token_source.json`."""
    return {key: info[key] for key in ("column", "dtype", "num_sequences", "num_tokens")}


def source_info(
    column: str,
    id_column: str | None,
    dtype: np.dtype[Any],
    files: Sequence[TokenInput],
    n: int,
    *,
    split: dict[str, int] | None = None,
) -> dict[str, Any]:
    """`token_source.json` of a source of `n` values of `column` read from `files`. With `split`
    (`prepare --over-cap split`: {"max_seq_len", "num_split", "num_pieces", "first_piece_id"})
    each sequence longer than max_seq_len is stored as its pieces, one sequence each, so the
    source holds `num_pieces - num_split` more sequences than the inputs have rows, and an id
    index (`ids.npy`, `rows.npy`) whatever the ids."""
    num_rows = sum(file.num_rows for file in files)
    extra = {} if split is None else {"split": dict(split)}
    return {
        "format": TOKEN_SOURCE_FORMAT,
        "format_version": TOKEN_SOURCE_VERSION,
        "seqpack_version": __version__,
        "column": column,
        "id_column": id_column,
        "ids": "id_column" if id_column else "row_index",
        "dtype": dtype.name,
        **extra,
        "num_sequences": num_rows
        + (0 if split is None else split["num_pieces"] - split["num_split"]),
        "num_tokens": n,
        "inputs": {
            "num_files": len(files),
            "num_rows": sum(file.num_rows for file in files),
            "files": [
                {"path": file.path.as_posix(), "bytes": file.num_bytes, "num_rows": file.num_rows}
                for file in files
            ],
        },
    }


_TABLES = ".tables"
"""Where `write_token_source` writes in-memory tables, inside its temporary directory."""


def _tables(inputs: Any) -> list[Any]:
    """The in-memory tables among `inputs` (all of them, or none: `memory_inputs`)."""
    if isinstance(inputs, (str, os.PathLike)):
        return []
    items = [inputs] if is_table(inputs) else list(inputs)
    check_inputs(items)
    return [item for item in items if is_table(item)]


def _named_errors(staged: dict[Path, str], call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)`, its `InputError` naming tables rather than their copies."""
    try:
        return call(*args)
    except InputError as error:
        if not staged:
            raise
        raise named(error, staged) from None


def write_token_source(
    inputs: Sequence[str | os.PathLike[str] | Any] | str | os.PathLike[str] | Any,
    column: str,
    *,
    output: str | os.PathLike[str],
    prepared: Prepared | str | os.PathLike[str] | None = None,
    id_column: str | None = None,
    dtype: Any = None,
    role: str = "tokens",
    overwrite: bool = False,
) -> FlatTokenSource:
    """Write the token lists of parquet column `column` to the directory `output`; return it
    opened (`FlatTokenSource.open(output)`: memory-mapped).

    Args:
        inputs: parquet files, globs or directories, resolved as `seqpack prepare` does (sorted
            by path), or in-memory tables as `PrepareConfig.inputs` takes them (written once
            into the temporary directory, named `<memory:N TYPE>`): pass the same inputs as to
            prepare.
        column: a list / large_list / fixed_size_list column of integer token ids.
        output: the directory to create: `tokens.npy`, `offsets.npy` (int64), with an id column
            `ids.npy` and `rows.npy`, and `token_source.json`.
        prepared: a prepared directory (`load_prepared(...)` or its path) to check the result
            against (`check_token_source`) before anything is put in place.
        id_column: a column of unique integer ids (prepare's `--id-column`); without it a
            sequence's id is its global row index. Sequences are stored in row order either way;
            the id index (ids ascending and their rows) is sorted in memory
            (at most 32 bytes a row, `write_id_index`).
        dtype: the tokens' dtype; by default the smallest unsigned one that holds the largest
            token id (from the footers' statistics, else a first pass over the column), int32
            for labels (int64 if a value needs it), uint8 for a loss mask. A signed dtype admits
            negative values that fit it (labels with -100).
        role: what the column holds: "tokens" (token ids), "labels" (per-token labels, -100
            where nothing is predicted) or "loss_mask" (0/1, or booleans). With labels or a loss
            mask, each sequence's number of loss targets is written too (`num_targets.npy`,
            see `seqpack_cli.target_counts`): the returned source's `num_targets`, which the
            datasets read for `num_items_in_batch` when it is passed as `labels_source` or
            `loss_mask_source`. Counted for label pad id -100, over whole sequences, or over
            their first max_seq_len tokens when `prepared` was made with
            `--over-cap truncate`.
        overwrite: replace `output` if it is a token source (or an empty directory).

    Returns:
        The token source written, opened from `output` (memory-mapped).

    Raises:
        InputError: bad data (a missing or non-list column, a NULL list or id, a value negative
            or over the dtype, a duplicate id: one line naming the file, the row and the value;
            a mismatch with `prepared`).
        ConfigError: bad arguments, or an output it may not replace (an existing one without
            `overwrite`, a file, a non-empty directory that is not a token source).

    Nothing is written unless every check passes: the directory is built in a hidden temporary
    sibling and renamed into place. Memory: one Arrow batch (about
    `token_reading.TARGET_VALUES_PER_BATCH` values) at a time, plus the id index.
    """
    started = time.perf_counter()
    chosen = _check_arguments(column, id_column, dtype, role)
    rule = _ROLE_RULES[role]
    output = Path(os.path.abspath(output))
    if isinstance(prepared, (str, os.PathLike)):
        prepared = load_prepared(prepared)
    if prepared is not None:
        _check_ids_from(prepared, id_column, output)  # before any work
    tables = _tables(inputs)
    files = []
    if not tables:
        paths = resolve_inputs(inputs, exclude=[output])
        files = inspect_token_inputs(paths, column, id_column, rule)
    recover_siblings(output)  # what killed runs left beside it
    _check_output(output, overwrite=overwrite)
    staging = Staging(output)
    staged: dict[Path, str] = {}
    try:
        try:
            staging.create()
        except OSError as error:
            raise ConfigError(
                f"cannot create output directory {output}: {error.strerror or error}; choose "
                f"a writable {option('output')}"
            ) from None
        if tables:  # written into the temporary directory, removed before it is put in place
            columns = {column: None, **({id_column: "id_column"} if id_column else {})}
            staged = stage_tables(tables, columns, staging.path / _TABLES)
            files = _named_errors(
                staged, inspect_token_inputs, list(staged), column, id_column, rule
            )
        if chosen is None:  # the store's own rule for the role
            chosen = _named_errors(staged, store_dtype, role, files, column)
        num_tokens = _named_errors(
            staged, stream_token_lists, staging.path, files, column, id_column, chosen, rule
        )
        remove_tree(staging.path / _TABLES)
        info = source_info(column, id_column, chosen, files, num_tokens)
        for entry in info["inputs"]["files"]:  # an in-memory table by its name
            entry["path"] = staged.get(Path(entry["path"]), entry["path"])
        if id_column is not None:
            write_id_index(staging.path, id_column, row_locator(info["inputs"]["files"]))
        write_info(staging.path, info)
        if role in COUNTED_ROLES:
            truncated_to = None if prepared is None else prepared.over_cap.cut_to
            write_num_targets(staging.path, role, truncated_to=truncated_to)
        if prepared is not None:
            _check_against(FlatTokenSource.open(staging.path), prepared, output)
        replaced = _move_into_place(staging, output, overwrite=overwrite)
    except BaseException:
        staging.discard()
        raise
    finally:
        staging.release()
    if replaced is not None:
        remove_tree(replaced)
    logger.info(
        "wrote %s: %d sequences, %d %s tokens (%.2fs)",
        output,
        info["num_sequences"],
        num_tokens,
        chosen.name,
        time.perf_counter() - started,
    )
    return FlatTokenSource.open(output)

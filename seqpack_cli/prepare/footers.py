"""Inputs' footers: read them and check them before DuckDB reads a row.

`read_footer` reads one input's footer (pyarrow metadata: row count, schema; for a JSON Lines
input, `input_batches.describe_input`: the row count from a streaming pass, the columns typed
from its first lines); `check_footers`
checks footers read already, in the inputs' order (columns exist, their types can be read, names
DuckDB could confuse, schemas agree up to integer widths), so the Dask engine can read footers on
its workers and still report the first problem in the inputs' order; `inspect_inputs` does both,
locally. The checked result is one `InputFile` per input, which the histogram and pools passes
read.

JSON Lines inputs are checked on the columns read only (each line's other keys may differ), and
their sampled types are read leniently: a key null in every sampled line is taken as integers
(the pass then finds any NULL length, or a value of another type by its line).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from seqpack_cli.errors import InputError, option
from seqpack_cli.prepare.input_batches import (
    InputKind,
    describe_input,
    input_kind,
    missing_column_error,
)
from seqpack_cli.prepare.inputs import not_regular
from seqpack_cli.prepare.text_inputs import is_text

__all__ = [
    "Footer",
    "InputFile",
    "arrow_type",
    "check_footers",
    "inspect_inputs",
    "read_footer",
    "widened_type",
]


@dataclass(frozen=True)
class InputFile:
    """One input (parquet, or JSON Lines: `input_batches.input_kind`), as its footer describes it.

    `column_types` are the DuckDB types of the columns `inspect_inputs` checked (the length
    column, and the id column if any), as `read_params` binds them: a length column of token
    lists has a list type such as `INTEGER[]`.
    """

    path: Path
    num_bytes: int
    num_rows: int
    column_types: tuple[tuple[str, str], ...] = ()


_DUCKDB_INTEGERS = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.uint8(): "UTINYINT",
    pa.uint16(): "USMALLINT",
    pa.uint32(): "UINTEGER",
    pa.uint64(): "UBIGINT",
}
_ARROW_INTEGERS = {name: arrow for arrow, name in _DUCKDB_INTEGERS.items()}


def _ascii_lower(name: str) -> str:
    # DuckDB matches column names ignoring ASCII case only ("Ä" and "ä" stay apart).
    return "".join(char.lower() if char.isascii() else char for char in name)


def _list_element(column_type: pa.DataType) -> pa.DataType | None:
    """The element type of a (large, fixed-size) list type; None for any other type."""
    if (
        pa.types.is_list(column_type)
        or pa.types.is_large_list(column_type)
        or pa.types.is_fixed_size_list(column_type)
    ):
        return column_type.value_type
    return None


def _duckdb_type(column_type: pa.DataType, role: str) -> str | None:
    """How `bound_schema` binds a column read in `role`; None for a type prepare cannot read.

    Integers, and for the length column lists of integers (read as DuckDB lists, whose `len`
    is the length).
    """
    if column_type in _DUCKDB_INTEGERS:
        return _DUCKDB_INTEGERS[column_type]
    element = _list_element(column_type) if role == "length" else None
    if element is not None and element in _DUCKDB_INTEGERS:
        return f"{_DUCKDB_INTEGERS[element]}[]"
    return None


def arrow_type(duckdb_type: str) -> pa.DataType:
    """The Arrow type of a column `check_footers` binds as `duckdb_type` (an integer type, or a
    list of one such as `BIGINT[]`: the inverse of `_duckdb_type`)."""
    if duckdb_type.endswith("[]"):
        return pa.list_(_ARROW_INTEGERS[duckdb_type[:-2]])
    return _ARROW_INTEGERS[duckdb_type]


def _check_column(
    path: Path, names: Sequence[str], types: Mapping[str, pa.DataType], column: str, role: str
) -> str:
    """The column's DuckDB type (see `_duckdb_type`), or `InputError` saying why it cannot be
    read."""
    flag = option(f"{role}_column")
    if column not in types:
        raise missing_column_error(column, path, names, option_name=f"{role}_column", role=role)
    same = [name for name in names if _ascii_lower(name) == _ascii_lower(column)]
    if len(same) > 1:
        shown = " and ".join(repr(name) for name in same)
        reason = "the same name" if len(set(same)) == 1 else "names that differ only in case"
        raise InputError(
            f"input file {path} has {len(same)} columns with {reason} ({shown}), and {flag} "
            f"names {column!r}; DuckDB cannot tell them apart: rename all but one of them when "
            "writing the parquet"
        )
    column_type = types[column]
    duckdb_type = _duckdb_type(column_type, role)
    if duckdb_type is not None:
        return duckdb_type
    if role == "length" and _list_element(column_type) is not None:
        raise InputError(
            f"length column {column!r} ({flag}) in {path} holds {column_type} values; expected "
            "integer token counts, or lists of integer token ids (each list's length is the "
            f"sequence's): name the token-id or length column with {flag}"
        )
    if role == "length" and is_text(column_type):
        raise InputError(
            f"length column {column!r} ({flag}) in {path} holds {column_type} values; expected "
            "integer token counts, and this column holds text: to tokenize it inside prepare, "
            f"pass {option('tokenizer')} PATH {option('text_column')} {column} instead of {flag}"
        )
    expected = "integer token counts" if role == "length" else "unique integer ids"
    fix = (
        "write them as JSON integers"
        if input_kind(path) == "jsonl"
        else "cast the column to an integer type when writing the parquet"
    )
    raise InputError(
        f"{role} column {column!r} ({flag}) in {path} holds {column_type} values; expected "
        f"{expected}; {fix}, or name the right column with {flag}"
    )


_SIGNED_BY_WIDTH = {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}


def _wider_integer(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The narrowest integer type that holds every value of integer types `a` and `b` (None
    for uint64 next to a signed type: no 64-bit type holds both)."""
    if pa.types.is_signed_integer(a) == pa.types.is_signed_integer(b):
        return a if a.bit_width >= b.bit_width else b
    signed, unsigned = (a, b) if pa.types.is_signed_integer(a) else (b, a)
    return _SIGNED_BY_WIDTH.get(max(signed.bit_width, 2 * unsigned.bit_width))


def widened_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The one type that columns of types `a` and `b` both convert to without loss, or None.

    Tokenised datasets written by different tools differ in integer widths (`int32` or `int64`,
    `uint16` ids) and in list kinds (`list` or `large_list`): such columns agree, as the widest
    integer (a list of it, a `large_list` if either is one). Any other difference (a list of
    floats next to a list of integers) does not.
    """
    if a == b:
        return a
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return _wider_integer(a, b)
    a_element, b_element = _list_element(a), _list_element(b)
    if a_element is None or b_element is None:
        return None
    if not (pa.types.is_integer(a_element) and pa.types.is_integer(b_element)):
        return None
    element = _wider_integer(a_element, b_element)
    if element is None:
        return None
    large = pa.types.is_large_list(a) or pa.types.is_large_list(b)
    return pa.large_list(element) if large else pa.list_(element)


@dataclass
class _AgreedSchema:
    """The columns every input so far has, each with the type they all widen to and the file
    that brought that type (named when a later file's column disagrees)."""

    types: dict[str, pa.DataType]
    origins: dict[str, Path]

    def add(self, path: Path, types: Mapping[str, pa.DataType]) -> str | None:
        """Widen the agreed types by one more file's; how that file differs, if it does."""
        first = next(iter(self.origins.values()))
        missing = next((name for name in self.types if name not in types), None)
        if missing is not None:
            return f"it has no column {missing!r}, which {first} has"
        extra = next((name for name in types if name not in self.types), None)
        if extra is not None:
            return f"it has a column {extra!r} that {first} lacks"
        for name, column_type in types.items():
            agreed = self.types[name]
            widened = widened_type(column_type, agreed)
            if widened is None:
                # Integers that do not widen: uint64 next to a signed type.
                why = " (no integer type holds both)" if _integers(column_type, agreed) else ""
                return (
                    f"column {name!r} is {column_type} there but {agreed} in "
                    f"{self.origins[name]}{why}"
                )
            if widened != agreed:
                self.types[name] = widened
                self.origins[name] = path
        return None


def _integers(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether `a` and `b` are both integers, or both lists of integers."""
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return True
    a_element, b_element = _list_element(a), _list_element(b)
    return (
        a_element is not None
        and b_element is not None
        and pa.types.is_integer(a_element)
        and pa.types.is_integer(b_element)
    )


@dataclass(frozen=True)
class Footer:
    """One input's footer as `read_footer` read it: what `check_footers` compares."""

    path: Path
    num_bytes: int
    num_rows: int
    names: tuple[str, ...]
    types: dict[str, pa.DataType]
    kind: InputKind = "parquet"


def _lenient(column_type: pa.DataType) -> pa.DataType:
    """A JSON Lines column's sampled type, nulls read as integers (see the module docstring)."""
    if pa.types.is_null(column_type):
        return pa.int64()
    element = _list_element(column_type)
    if element is not None and pa.types.is_null(element):
        return pa.list_(pa.int64())
    return column_type


def read_footer(path: Path) -> Footer:
    """The footer of one input (`input_batches.describe_input`; a JSON Lines file's sampled
    types read leniently, `_lenient`); `InputError` for a path that is not a regular file, a
    file that is not parquet (or is truncated), or a JSON Lines file that is empty or has a
    malformed line (named by number)."""
    why = not_regular(path)
    if why == "missing":
        raise InputError(f"input file {path} does not exist; check the path")
    if why is not None:
        raise InputError(
            f"input {path} is {why}; inputs are parquet or JSON Lines files: leave it out"
        )
    described = describe_input(path)
    schema = described.schema
    types = {field.name: field.type for field in schema}
    if described.kind == "jsonl":
        types = {name: _lenient(column_type) for name, column_type in types.items()}
    return Footer(
        path, described.num_bytes, described.num_rows, tuple(schema.names), types, described.kind
    )


def _check_columns(length_column: str, id_column: str | None) -> list[str]:
    """The columns read (length, then id), as names `inspect_inputs` can look for."""
    for role, column in (("length", length_column), ("id", id_column)):
        if column is not None and (not isinstance(column, str) or not column):
            raise InputError(
                f"{role} column is {column!r} ({option(f'{role}_column')}); expected a column name"
            )
    if id_column is not None and id_column == length_column:
        raise InputError(
            f"id column {id_column!r} ({option('id_column')}) is also the length column; ids "
            f"must be unique per sequence: name another column, or leave {option('id_column')} "
            "unset to use row indexes as ids"
        )
    return [length_column] if id_column is None else [length_column, id_column]


def check_footers(
    footers: Iterable[Footer | InputError], length_column: str, id_column: str | None = None
) -> list[InputFile]:
    """The checks of `inspect_inputs` over footers read already (in the inputs' order): an
    `InputError` in place of a footer is raised when its turn comes, so the first problem in
    the inputs' order is the one reported, whoever read the footers."""
    read = _check_columns(length_column, id_column)
    roles = list(zip(read, ("length", "id"), strict=False))
    checked: list[Footer] = []
    whole: _AgreedSchema | None = None  # the parquet inputs' whole schemas
    columns_read: _AgreedSchema | None = None  # every input's columns read
    for footer in footers:
        if isinstance(footer, InputError):
            raise footer
        path, names, types = footer.path, list(footer.names), footer.types
        difference = None
        if footer.kind == "jsonl" or whole is None or len(names) != len(types):
            for column, role in roles:  # (a repeated name: the same names, one maybe twice)
                _check_column(path, names, types, column, role)
        if footer.kind == "parquet":
            if whole is None:
                whole = _AgreedSchema(dict(types), dict.fromkeys(types, path))
            else:
                difference = whole.add(path, types)
        read_types = {column: types[column] for column in read}
        if columns_read is None:
            columns_read = _AgreedSchema(read_types, dict.fromkeys(read_types, path))
        elif difference is None:
            difference = columns_read.add(path, read_types)
        if difference is not None:
            raise InputError(
                f"input file {path} has a different schema from the other inputs: "
                f"{difference}; all inputs need the same columns (in any order), of the same "
                "types up to integer widths: rewrite it or leave it out"
            )
        checked.append(footer)
    if columns_read is None:
        return []
    # DuckDB reads every file's columns as the type they all widen to (`bound_schema` casts).
    first = checked[0]
    column_types = tuple(
        (column, _check_column(first.path, list(first.names), columns_read.types, column, role))
        for column, role in roles
    )
    return [
        InputFile(footer.path, footer.num_bytes, footer.num_rows, column_types)
        for footer in checked
    ]


def inspect_inputs(
    paths: Sequence[Path], length_column: str, id_column: str | None = None
) -> list[InputFile]:
    """Read every footer: row counts and sizes, and the checks that need no data.

    Raises `InputError` for a path that is not a regular file, a file that is not parquet (or is
    truncated), a missing length/id column (names match exactly), an id column that is not of
    integers, a length column that is neither integers nor lists of integers, a column read
    that another column's name equals ignoring case (DuckDB could read either), and files whose
    schemas disagree: other column names, or types that do not widen to one (`widened_type`:
    integers of other widths agree, and are read as the widest).
    """
    return check_footers((read_footer(path) for path in paths), length_column, id_column)

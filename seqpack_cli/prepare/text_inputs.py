"""The inputs of `prepare --tokenizer`: each file's text columns checked before a row is read.

`inspect_text_inputs` describes each input (`input_batches.describe_input`: a parquet footer, or
a JSON Lines file's first block and row count), checks that the columns the tokenizer reads are
there and hold what it takes (strings; for messages, lists of `{role, content}` structs; integer
ids), and returns the files as the token store describes its inputs (`token_reading.TokenInput`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from seqpack_cli.errors import InputError, option
from seqpack_cli.prepare.input_batches import describe_input, missing_column_error
from seqpack_cli.prepare.token_reading import TokenInput
from seqpack_cli.prepare.tokenize_options import TokenizeOptions

__all__ = ["inspect_text_inputs", "is_text"]


def is_text(kind: pa.DataType) -> bool:
    """A string column (any of Arrow's string types)."""
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
    )


def _is_messages(kind: pa.DataType) -> bool:
    """A list of structs with string `role` and `content` fields."""
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return False
    item = kind.value_type
    if not pa.types.is_struct(item):
        return False
    names = {item.field(i).name: item.field(i).type for i in range(item.num_fields)}
    return all(
        name in names and (is_text(names[name]) or pa.types.is_null(names[name]))
        for name in ("role", "content")
    )


def _check_column(path: Path, schema: pa.Schema, name: str, option_name: str) -> None:
    if name not in schema.names:
        raise missing_column_error(name, path, schema.names, option_name=option_name)
    kind = schema.field(name).type
    if pa.types.is_null(kind):  # a JSON Lines key null in every line of the first block
        return
    if option_name == "messages_column":
        if not _is_messages(kind):
            raise InputError(
                f"messages column {name!r} in {path} holds {kind} values; expected lists of "
                "{role, content} structs with string fields (the chat format of the datasets "
                f"hub): pass the right column, or {option('text_column')} for plain text"
            )
    elif option_name == "id_column":
        if not pa.types.is_integer(kind):
            raise InputError(
                f"id column {name!r} ({option('id_column')}) in {path} holds {kind} values; "
                "expected unique integer ids: pass the right column"
            )
    elif not is_text(kind):
        raise InputError(
            f"column {name!r} ({option(option_name)}) in {path} holds {kind} values, not text; "
            "pass a string column (a column of token ids goes to --tokens-column, without "
            "--tokenizer)"
        )


def inspect_text_input(path: Path, tokenize: TokenizeOptions, id_column: str | None) -> TokenInput:
    """One input's text (and id) columns checked, from its footer or first block."""
    described = describe_input(path)
    schema = described.schema
    named = {
        "text_column": tokenize.text_column,
        "messages_column": tokenize.messages_column,
        "prompt_column": tokenize.prompt_column,
        "completion_column": tokenize.completion_column,
        "id_column": id_column,
    }
    for option_name, column in named.items():
        if column is not None:
            _check_column(path, schema, column, option_name)
    return TokenInput(path, described.num_bytes, described.num_rows, 0, None)


def inspect_text_inputs(
    paths: Sequence[Path], tokenize: TokenizeOptions, id_column: str | None
) -> list[TokenInput]:
    """Every input's footer, checked, in the inputs' order (see the module docstring)."""
    return [inspect_text_input(path, tokenize, id_column) for path in paths]

"""`seqpack prepare --tokenizer`: the text read once, tokenized, and stored as it streams.

The same one pass as `--tokens-column` (`one_pass`), with the token lists coming from the
tokenizer instead of a column: each input file is read in batches of rows (worker threads,
`ordered.ordered_parallel`, handed over in file and row order), each batch is tokenized
(`seqpack_cli.tokenize`: the `tokenizers` library's batch encoding, which runs on every core
itself), and `StreamedStore` writes the tokens, the loss mask, the offsets and the ids, and
counts the lengths. No fallback to the two passes: the text has no token column for them to
read, so every fault is worded here, with the file and the row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from seqpack_cli.errors import InputError, first_line, option
from seqpack_cli.prepare.config import PrepareConfig
from seqpack_cli.prepare.input_batches import input_kind, line_of_row, read_batches
from seqpack_cli.prepare.one_pass import OnePass, aborted_on_error, close_store, write_error
from seqpack_cli.prepare.ordered import ordered_parallel
from seqpack_cli.prepare.pools.offsets import num_workers
from seqpack_cli.prepare.streamed_store import StreamedStore
from seqpack_cli.prepare.token_batches import StoreColumns, TokenBatch
from seqpack_cli.prepare.token_reading import MASK_DTYPE, TokenInput
from seqpack_cli.prepare.token_stream import Fault
from seqpack_cli.prepare.tokenize_options import TokenizeOptions
from seqpack_cli.prepared import PreparedWriter
from seqpack_cli.progress import ProgressCallback
from seqpack_cli.tokenize.rows import TokenizeError

__all__ = ["read_tokenized"]

logger = logging.getLogger(__name__)

_BATCH_ROWS = 1024
"""Rows tokenized at a time: enough for the tokenizer's threads, little memory."""
_BUDGET_BYTES = 1 << 27
"""Tokenized batches waiting for the writer, at most (besides those of the file it is on)."""


class Tokenizing:
    """One tokenizer and the options, turning a batch of rows into a `TokenBatch`."""

    def __init__(self, tokenize: TokenizeOptions, id_column: str | None) -> None:
        from seqpack_cli.tokenize import chat_template, load_tokenizer

        self.options = tokenize
        self.id_column = id_column
        self.spec = load_tokenizer(tokenize.tokenizer)
        if tokenize.messages_column is not None:  # no usable template: refused before any row
            chat_template(self.spec, tokenize.messages_column)

    def columns(self) -> list[str]:
        """The input columns read."""
        return [*self.options.columns, *([self.id_column] if self.id_column else [])]

    def encode(self, batch: pa.RecordBatch, first_row: int) -> TokenBatch:
        """The batch's rows tokenized (`TokenizeError` names the row, counted from
        `first_row`)."""
        from seqpack_cli.tokenize import encode_messages, encode_prompt_completion, encode_text

        options = self.options
        if options.text_column is not None:
            encoded = encode_text(
                self.spec,
                batch.column(options.text_column),
                add_special_tokens=options.add_special_tokens,
                column=options.text_column,
                first_row=first_row,
            )
        elif options.messages_column is not None:
            encoded = encode_messages(
                self.spec,
                batch.column(options.messages_column),
                train_on=options.train_on,
                column=options.messages_column,
                first_row=first_row,
            )
        else:
            assert options.prompt_column is not None and options.completion_column is not None
            encoded = encode_prompt_completion(
                self.spec,
                batch.column(options.prompt_column),
                batch.column(options.completion_column),
                add_special_tokens=options.add_special_tokens,
                prompt_column=options.prompt_column,
                completion_column=options.completion_column,
                first_row=first_row,
            )
        values = {"tokens": encoded.tokens}
        if options.masked:
            assert encoded.loss_mask is not None
            values["loss_mask"] = encoded.loss_mask
        return TokenBatch(encoded.lengths, values, self._ids(batch, first_row))

    def _ids(self, batch: pa.RecordBatch, first_row: int) -> np.ndarray | None:
        if self.id_column is None:
            return None
        ids = batch.column(self.id_column)
        if ids.null_count:
            row = first_row + int(np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False))[0])
            raise TokenizeError(
                row,
                f"id column {self.id_column!r} ({option('id_column')}) is NULL; every "
                "sequence needs an id: fill it, or leave the id column out for row-index ids",
            )
        values = ids.to_numpy(zero_copy_only=False)
        if values.dtype == np.uint64 and values.size and int(values.max()) > np.iinfo(np.int64).max:
            raise InputError(
                f"id column {self.id_column!r} ({option('id_column')}) holds the id "
                f"{int(values.max())}, past int64; renumber the ids"
            )
        return values.astype(np.int64, copy=False)

    def dtypes(self) -> dict[str, np.dtype[Any]]:
        from seqpack_cli.tokenize.encoded import token_dtype

        dtypes = {"tokens": token_dtype(self.spec.vocab_size)}
        if self.options.masked:
            dtypes["loss_mask"] = MASK_DTYPE
        return dtypes


def _located(file: TokenInput, error: InputError) -> InputError:
    """`error` (about a row of `file`) with the file named, and in a JSON Lines file the line."""
    text = error.args[0]  # its raw text: the options marked, for the CLI to spell
    if isinstance(error, TokenizeError) and input_kind(file.path) == "jsonl":
        line = line_of_row(file.path, error.row)
        text = f"line {line} (row {error.row}): {error.problem}" if line else text
    if str(file.path) in text:
        return InputError(text)
    return InputError(f"{file.path}: {text}")


def _file_batches(
    file: TokenInput, tokenizing: Tokenizing, columns: list[str]
) -> Iterator[TokenBatch]:
    """One file's rows tokenized, batch by batch, in row order; the file named in an error."""
    first_row = 0
    try:
        for batch in read_batches(file.path, columns, batch_rows=_BATCH_ROWS):
            yield tokenizing.encode(batch, first_row)
            first_row += batch.num_rows
    except InputError as error:
        raise _located(file, error) from None
    except (OSError, pa.ArrowException) as error:
        raise InputError(f"cannot read {file.path} ({first_line(error)}); check the file") from None


def read_tokenized(
    writer: PreparedWriter,
    files: Sequence[TokenInput],
    config: PrepareConfig,
    *,
    progress: ProgressCallback | None = None,
) -> OnePass:
    """Tokenize the rows of `files` into the store in `writer.tmp_path` (see the module
    docstring); what `one_pass.read_in_one_pass` returns for a token column.

    Raises:
        InputError: a row the tokenizer cannot take (named by file and row), a NULL or repeated
            id.
        ConfigError: the tokenizer cannot be loaded, or the store cannot be written.
    """
    assert config.tokenize is not None
    started = time.perf_counter()
    tokenizing = Tokenizing(config.tokenize, config.id_column)
    columns = config.store_columns
    dtypes = tokenizing.dtypes()
    spec = StoreColumns(
        columns=columns,
        dtypes=dtypes,
        ranges={role: (0, int(np.iinfo(dtype).max)) for role, dtype in dtypes.items()},
        length_column=None,
        id_column=config.id_column,
    )
    # The token counts are known only once tokenized: the headers are rewritten at the end.
    predicted = dict.fromkeys(columns, 0)
    split_at = config.max_seq_len if config.over_cap_rule.splits else None
    root = writer.tmp_path
    num_rows = sum(file.num_rows for file in files)
    try:
        store = StreamedStore(root, spec, num_rows, predicted, split_at=split_at)
    except OSError as error:
        raise write_error(config, error) from None
    read = tokenizing.columns()
    batches = ordered_parallel(
        files,
        lambda file: _file_batches(file, tokenizing, read),
        workers=num_workers(config.threads, config.tuning),
        budget_bytes=_BUDGET_BYTES,
    )
    with aborted_on_error(store, config):
        try:
            for batch in batches:
                store.add(batch)
                if progress is not None:
                    progress("tokenize", store.num_rows, store.num_input_rows)
        finally:
            batches.close()
        try:
            digests, split = close_store(store, root, files, config.id_column)
        except Fault:  # no two passes to word it here: the one fault it stands for
            raise InputError(
                f"id column {config.id_column!r} ({option('id_column')}) holds an id more than "
                "once (a sequence split into pieces shares its id with another); ids must be "
                "unique: fix the column, or leave the id column out for row-index ids"
            ) from None
    logger.info(
        "tokenized %d rows into %d tokens, store written (%.2fs)",
        store.num_rows,
        store.num_tokens,
        time.perf_counter() - started,
    )
    inputs = {role: list(files) for role in columns}
    return OnePass(root, config, inputs, store, digests, split, store.lengths.histogram())

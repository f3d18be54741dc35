"""Command-line options shared by the `seqpack` commands (Annotated aliases).

An option's name is its config field in kebab case (`--max-seq-len` <-> `max_seq_len`).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

__all__ = [
    "JsonOption",
    "LengthMultipleOption",
    "MaxSeqLenOption",
    "MaxSeqsPerBinOption",
    "MemoryLimitOption",
    "Packer",
    "PackerOption",
    "QuietOption",
    "TempDirOption",
    "ThreadsOption",
    "TokenStoreColumns",
]

MaxSeqLenOption = Annotated[
    int,
    typer.Option(
        "--max-seq-len",
        help="Bin capacity in tokens (the training context), at most 2147483647 (2**31 - 1).",
    ),
]
MaxSeqsPerBinOption = Annotated[
    int | None,
    typer.Option(
        "--max-seqs-per-bin", help="At most this many sequences per bin (default: no cap)."
    ),
]

LengthMultipleOption = Annotated[
    int | None,
    typer.Option(
        "--length-multiple",
        help="Pack each sequence into a slot of its length rounded up to this multiple (2 * "
        "context-parallel size for THD batches); must divide --max-seq-len (default: 1).",
        show_default=False,
    ),
]


class Packer(str, Enum):
    """The histogram packers `--packer` chooses from."""

    batched = "batched"
    per_item = "per-item"


PackerOption = Annotated[
    Packer,
    typer.Option(
        "--packer",
        help="Histogram packer: batched (the engine) or per-item (the reference, for parity).",
    ),
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars, no summary.")]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print a machine-readable JSON summary on stdout.")
]

# DuckDB's resources, for the commands that scan parquet.
ThreadsOption = Annotated[
    int | None, typer.Option("--threads", help="DuckDB threads (default: every core).")
]
MemoryLimitOption = Annotated[
    str | None,
    typer.Option(
        "--memory-limit",
        help="DuckDB memory limit: a size such as 4GB or 512MiB, or a share of RAM such as 50%; "
        "at least 16MiB (default: DuckDB's, 80% of RAM).",
    ),
]
TempDirOption = Annotated[
    Path | None,
    typer.Option("--temp-dir", help="Where DuckDB spills when over --memory-limit."),
]

# The token store `seqpack prepare` writes into the prepared directory (opt-in).
TokenStoreColumns = {
    "tokens_column": typer.Option(
        "--tokens-column",
        help="List column of token ids (e.g. input_ids) to store in the prepared directory too "
        "(tokens/, memory-mapped at training time: no token source to pass).",
    ),
    "labels_column": typer.Option(
        "--labels-column",
        help="With --tokens-column: per-token labels to store beside them (-100 allowed).",
    ),
    "loss_mask_column": typer.Option(
        "--loss-mask-column",
        help="With --tokens-column: a per-token 0/1 loss mask to store (e.g. assistant_masks).",
    ),
}
"""The `--tokens-column`, `--labels-column` and `--loss-mask-column` options, by field."""

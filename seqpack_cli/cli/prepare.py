"""`seqpack prepare`: parse the options, run `prepare_dataset`, render the summary."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from seqpack_cli.cli.options import (
    JsonOption,
    LengthColumnOption,
    MaxSeqLenOption,
    MaxSeqsPerBinOption,
    MemoryLimitOption,
    Packer,
    PackerOption,
    QuietOption,
    TempDirOption,
    ThreadsOption,
)

__all__ = ["prepare"]


def _render_prepare(summary: dict[str, Any], manifest: dict[str, Any], seconds: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['output']}  ({seconds:.1f} s)", show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    inputs = manifest["inputs"]
    numbers = manifest["summary"]
    table.add_row("inputs", f"{inputs['num_files']:,} files, {inputs['num_rows']:,} rows")
    dropped = numbers["num_dropped"]
    table.add_row(
        "sequences",
        f"{numbers['num_sequences']:,}"
        + (f" ({dropped:,} over --max-seq-len dropped)" if dropped else ""),
    )
    table.add_row("tokens", f"{numbers['num_tokens']:,}")
    table.add_row(
        "lengths",
        f"{numbers['num_distinct_lengths']:,} distinct, "
        f"{numbers['min_length']:,}..{numbers['max_length']:,}",
    )
    table.add_row("bins", f"{numbers['num_bins']:,} from {numbers['num_templates']:,} templates")
    table.add_row(
        "efficiency",
        # Truncated, not rounded: 99.996% is not shown as a perfect 100.00%.
        f"{int(numbers['efficiency'] * 10_000) / 100:.2f}% "
        f"(lower bound {numbers['lower_bound_bins']:,} bins)",
    )
    Console().print(table)


def prepare(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Parquet files, globs (quote them: 'data/**/*.parquet') or directories.",
            show_default=False,
        ),
    ],
    length_column: LengthColumnOption,
    max_seq_len: MaxSeqLenOption,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The prepared directory to create.")
    ],
    id_column: Annotated[
        str | None,
        typer.Option(
            "--id-column",
            help="Integer column of unique sequence ids (default: the global row index).",
        ),
    ] = None,
    filter_over_cap: Annotated[
        bool,
        typer.Option(
            "--filter-over-cap",
            help="Drop sequences longer than --max-seq-len (counted in the manifest) instead "
            "of failing.",
        ),
    ] = False,
    packer: PackerOption = Packer.batched,
    max_seqs_per_bin: MaxSeqsPerBinOption = None,
    threads: ThreadsOption = None,
    memory_limit: MemoryLimitOption = None,
    temp_dir: TempDirOption = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing prepared directory.")
    ] = False,
    quiet: QuietOption = False,
    json_output: JsonOption = False,
) -> None:
    """Scan parquet files into a prepared/ directory: length histogram, templates, id pools."""
    from seqpack_cli.prepare import PrepareConfig, prepare_dataset
    from seqpack_cli.progress import rich_progress

    config = PrepareConfig(
        inputs=inputs,
        length_column=length_column,
        max_seq_len=max_seq_len,
        output=output,
        id_column=id_column,
        filter_over_cap=filter_over_cap,
        packer=packer.value,
        max_seqs_per_bin=max_seqs_per_bin,
        threads=threads,
        memory_limit=memory_limit,
        temp_dir=temp_dir,
        overwrite=overwrite,
    )
    started = time.perf_counter()
    with rich_progress(enabled=not (quiet or json_output)) as progress:
        prepared = prepare_dataset(config, progress=progress)
    seconds = time.perf_counter() - started
    manifest = prepared.manifest
    summary = {"output": str(prepared.path), "seconds": round(seconds, 3), **manifest["summary"]}
    if json_output:
        document = {
            **summary,
            "config": manifest["config"],
            "inputs": {k: v for k, v in manifest["inputs"].items() if k != "files"},
        }
        typer.echo(json.dumps(document, indent=2))
    elif not quiet:
        _render_prepare(summary, manifest, seconds)

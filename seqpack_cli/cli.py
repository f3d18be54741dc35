"""The `seqpack` command line: a thin skin over the library.

Each command parses its options, makes one library call and renders the result. Every
`SeqpackError` becomes one red line on stderr and exit code 1, here and nowhere else; usage errors
keep click's exit code 2; `SEQPACK_DEBUG=1` shows the full traceback instead.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click
import typer
from typer.core import TyperGroup

from seqpack_cli import __version__
from seqpack_cli.errors import SeqpackError

__all__ = ["app"]


class _SeqpackGroup(TyperGroup):
    """Turns library errors into one readable line; works under CliRunner and the console script."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SeqpackError as error:
            if os.environ.get("SEQPACK_DEBUG") == "1":
                raise
            click.secho(f"error: {error}", fg="red", err=True)
            ctx.exit(1)


app = typer.Typer(
    cls=_SeqpackGroup,
    name="seqpack",
    help="Pack variable-length sequences into fixed-size training contexts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"seqpack {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Pack variable-length sequences into fixed-size training contexts."""
    logging.basicConfig(
        level=os.environ.get("LOGLEVEL", "WARNING").upper(),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


# ---- prepare command (issue 3, owned by the prepare work) ------------------------------------
# Imports here rather than at the top keep this section self-contained; the heavy modules
# (duckdb, the job itself) are imported inside the command so `seqpack --help` stays fast.
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Annotated  # noqa: E402

# Reusable option types (the stats command shares them).
LengthColumnOption = Annotated[
    str,
    typer.Option(
        "--length-column", help="Parquet column holding each sequence's length in tokens."
    ),
]
MaxSeqLenOption = Annotated[
    int, typer.Option("--max-seq-len", help="Bin capacity in tokens (the training context).")
]
MaxSeqsPerBinOption = Annotated[
    int | None,
    typer.Option(
        "--max-seqs-per-bin", help="At most this many sequences per bin [default: no cap]."
    ),
]
PackerOption = Annotated[
    str,
    typer.Option(
        "--packer",
        click_type=click.Choice(["batched", "per-item"]),
        help="Histogram packer: batched (the engine) or per-item (the reference, for parity).",
    ),
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars, no summary.")]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print a machine-readable JSON summary on stdout.")
]


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
        f"{numbers['efficiency']:.2%} (lower bound {numbers['lower_bound_bins']:,} bins)",
    )
    Console().print(table)


@app.command()
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
            help="Integer column of unique sequence ids [default: global row index].",
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
    packer: PackerOption = "batched",
    max_seqs_per_bin: MaxSeqsPerBinOption = None,
    threads: Annotated[
        int | None, typer.Option("--threads", help="DuckDB threads [default: every core].")
    ] = None,
    memory_limit: Annotated[
        str | None,
        typer.Option("--memory-limit", help="DuckDB memory limit, e.g. 4GB [default: DuckDB's]."),
    ] = None,
    temp_dir: Annotated[
        Path | None,
        typer.Option("--temp-dir", help="Where DuckDB spills when over --memory-limit."),
    ] = None,
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
        packer=packer,
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


# ---- stats command (issue 3, owned by the stats work) ----------------------------------------

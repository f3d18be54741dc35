"""`seqpack stats`: parse the options, call `stats.describe.describe`, render the report.

The figures and the `--json` document come from `seqpack_cli.stats.describe` (its docstring
gives the document's keys and their meaning); the terminal report from `stats.report`, the HTML
page from `stats.html`. Those (numpy, rich) are imported inside the command so
`seqpack --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from seqpack_cli.cli.options import (
    MaxSeqsPerBinOption,
    MemoryLimitOption,
    TempDirOption,
    ThreadsOption,
)
from seqpack_cli.progress import rich_progress
from seqpack_cli.stats.describe import (
    DEFAULT_SAMPLE_SIZE,
    JSON_SCHEMA,
    StatsReport,
    StatsRequest,
    describe,
)

__all__ = ["STATS_EPILOG", "stats"]


STATS_EPILOG = (
    "Baselines, what you get without seqpack, on the same sequences (those over the cap "
    "dropped): no packing = one sequence per row, padded to max_seq_len (exact); sequential = "
    "the dataset shuffled, then sequences concatenated in that order, a new row whenever the "
    "next one does not fit, none split (next-fit). Sequential is simulated on a seeded random "
    "sample of --sample-size sequences drawn from the length histogram and scaled to the "
    "dataset: an estimate, marked *, costing ~0.1 s per max_seq_len at any size (exact for a "
    "dataset no larger than the sample). The order of your files is not used: the histogram "
    "does not keep it; seqpack_cli.stats.sweep.next_fit_num_bins(lengths, max_seq_len) gives the "
    "file-order figure from Python."
    "\n\n"
    "--json prints the document seqpack_cli.stats.describe.describe(request).to_dict() returns; "
    "that "
    "module documents each key. Prepared directory: "
    + ", ".join(JSON_SCHEMA["prepared"])
    + ". Sweep: "
    + ", ".join(JSON_SCHEMA["sweep"])
    + " (one per max_seq_len, ascending: "
    + ", ".join(JSON_SCHEMA["sweep row"])
    + ")."
)


def _parse_max_seq_lens(values: list[str]) -> list[int]:
    """`--max-seq-len 1024 --max-seq-len 2048,4096` -> [1024, 2048, 4096].

    Every value is checked before any input is read: one over seqpack's limit is a `ConfigError`.
    """
    from seqpack_cli.checks import check_max_seq_len

    parsed: list[int] = []
    for value in values:
        for piece in value.split(","):
            text = piece.strip().replace("_", "")
            # ASCII digits only: int() refuses some characters str.isdigit() accepts ("²").
            if not (text.isascii() and text.isdigit()) or int(text) <= 0:
                raise typer.BadParameter(
                    f"{piece.strip()!r} is not a positive integer; give token counts, repeated "
                    "(--max-seq-len 1024 --max-seq-len 2048) or comma-separated "
                    "(--max-seq-len 1024,2048)",
                    param_hint="'--max-seq-len'",
                )
            parsed.append(check_max_seq_len(int(text)))
    return parsed


def _check_stray_numbers(inputs: list[str]) -> None:
    # `--max-seq-len 1024 2048` leaves 2048 as an input: say how to give several values.
    for text in inputs:
        if text.replace(",", "").isdigit() and not Path(text).exists():
            raise typer.BadParameter(
                f"input {text!r} looks like a --max-seq-len value; the option takes one value "
                f"each time: repeat it (--max-seq-len 1024 --max-seq-len {text}) or give a "
                f"comma list (--max-seq-len 1024,{text})",
                param_hint="'INPUT...'",
            )


def _title(report: StatsReport) -> str:
    if report.kind == "prepared":
        return f"seqpack stats: {report.inputs[0]}"
    if report.source == "prepared":
        return f"seqpack stats: {report.inputs[0]} (lengths from counts.json)"
    num_files = len(report.inputs)
    return (
        f"seqpack stats: {num_files:,} parquet file{'s' * (num_files != 1)}, "
        f"length column {report.request.length_column!r}"
    )


def _prepared_details(manifest: dict[str, Any], verified: bool) -> list[tuple[str, str]]:
    config = manifest.get("config", {})
    inputs = manifest.get("inputs", {})
    summary = manifest.get("summary", {})
    return [
        ("inputs", f"{inputs.get('num_files', 0):,} files, {inputs.get('num_rows', 0):,} rows"),
        ("length column", str(config.get("length_column"))),
        ("packer", str(config.get("packer"))),
        ("dropped by prepare", f"{summary.get('num_dropped', 0):,} sequences over max_seq_len"),
        ("checked", "sha256 of every file" if verified else "file sizes (--verify: sha256)"),
    ]


def _render(report: StatsReport, *, html: Path | None, quiet: bool, json_output: bool) -> None:
    """The HTML page (`--html`), then the JSON document (`--json`) or the terminal report."""
    from rich.console import Console

    from seqpack_cli.stats.html import render_profile_html, render_sweep_html, write_html_report
    from seqpack_cli.stats.report import render_profile, render_sweep

    title = _title(report)
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 120)  # piped or captured: room for wide tables
    if report.profile is not None:
        profile = report.profile
        shown: dict[str, Any] = {
            "title": title,
            "details": _prepared_details(dict(report.manifest or {}), report.request.verify),
            "sample_size": report.request.sample_size,
        }
        page, terminal = (
            lambda: render_profile_html(profile, **shown),
            lambda: render_profile(console, profile, **shown),
        )
    elif report.sweep is not None:  # a report holds one of the two
        sweep = report.sweep
        page, terminal = (
            lambda: render_sweep_html(sweep, title=title),
            lambda: render_sweep(console, sweep, title=title),
        )
    if html is not None:
        written = write_html_report(html, page())
        if not quiet:
            typer.echo(f"HTML report written to {written}", err=True)
    if json_output:
        typer.echo(report.to_json())
    else:
        terminal()


def stats(
    inputs: Annotated[
        list[str],
        typer.Argument(
            metavar="PREPARED_DIR | INPUT...",
            help="A prepared directory (it has a manifest.json) to describe, or parquet files, "
            "globs or directories to analyse with --length-column and --max-seq-len.",
            show_default=False,
        ),
    ],
    max_seq_len: Annotated[
        list[str] | None,
        typer.Option(
            "--max-seq-len",
            metavar="N[,N...]",
            help="Context length(s) to compare: repeat the option (--max-seq-len 1024 "
            "--max-seq-len 2048) or give a comma list (--max-seq-len 1024,2048,4096), or both. "
            "Nothing is written.",
            show_default=False,
        ),
    ] = None,
    length_column: Annotated[
        str | None,
        typer.Option(
            "--length-column",
            help="Parquet column holding each sequence's length in tokens (parquet inputs).",
            show_default=False,
        ),
    ] = None,
    max_seqs_per_bin: MaxSeqsPerBinOption = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Check the sha256 of every prepared file.")
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help="Also write a self-contained HTML report (inline SVG charts, no network).",
            show_default=False,
        ),
    ] = None,
    top: Annotated[
        int, typer.Option("--top", min=0, help="Most common templates listed (prepared dir).")
    ] = 10,
    sample_size: Annotated[
        int,
        typer.Option(
            "--sample-size", min=1, help="Sequences simulated for the sequential baseline."
        ),
    ] = DEFAULT_SAMPLE_SIZE,
    seed: Annotated[
        int, typer.Option("--seed", min=0, help="Seed of the sequential baseline's sample.")
    ] = 0,
    threads: ThreadsOption = None,
    memory_limit: MemoryLimitOption = None,
    temp_dir: TempDirOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the figures as JSON on stdout (keys below).")
    ] = False,
) -> None:
    """Packing efficiency: describe a prepared directory, or compare max_seq_len values.

    `seqpack stats PREPARED_DIR` shows its PackingStats against packing without seqpack, the
    length histogram, bin fullness, sequences per bin and the most common templates.
    `seqpack stats INPUT... --length-column NAME --max-seq-len 1024,2048,4096` reads only the
    length column and shows, per max_seq_len, the sequences over the cap (dropped; the rest are
    packed), seqpack's bins and efficiency, and the same for packing without seqpack.
    """
    candidates = _parse_max_seq_lens(max_seq_len or [])
    _check_stray_numbers(inputs)
    request = StatsRequest(
        inputs,
        max_seq_lens=candidates,
        length_column=length_column,
        max_seqs_per_bin=max_seqs_per_bin,
        verify=verify,
        top=top,
        sample_size=sample_size,
        seed=seed,
        threads=threads,
        memory_limit=memory_limit,
        temp_dir=temp_dir,
    )
    with rich_progress(enabled=not (quiet or json_output)) as progress:
        report = describe(request, progress=progress)
    _render(report, html=html, quiet=quiet, json_output=json_output)

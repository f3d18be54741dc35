"""`seqpack stats`: describe a prepared directory, or compare max_seq_len values on parquet.

The figures come from `seqpack_cli.sweep` and the rendering from `seqpack_cli.report` /
`seqpack_cli.html_report`; those (numpy, rich) are imported inside the command so
`seqpack --help` stays fast.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from seqpack_cli.cli_options import (
    MaxSeqsPerBinOption,
    MemoryLimitOption,
    TempDirOption,
    ThreadsOption,
)
from seqpack_cli.errors import ConfigError, option

__all__ = ["STATS_EPILOG", "stats"]


STATS_EPILOG = (
    "Baselines, what you get without seqpack, on the same sequences (those over the cap "
    "dropped): no packing = one sequence per row, padded to max_seq_len (exact); sequential = "
    "the dataset shuffled, then sequences concatenated in that order, a new row whenever the "
    "next one does not fit, none split (next-fit). Sequential is simulated on a seeded random "
    "sample of --sample-size sequences drawn from the length histogram and scaled to the "
    "dataset: an estimate, marked *, costing ~0.1 s per max_seq_len at any size (exact for a "
    "dataset no larger than the sample). The order of your files is not used: the histogram "
    "does not keep it; seqpack_cli.sweep.next_fit_num_bins(lengths, max_seq_len) gives the "
    "file-order figure from Python."
    "\n\n"
    '--json keys. Prepared directory: kind ("prepared"), path, verified, sample_size, seed, '
    "max_seq_len, stats (PackingStats.to_dict()), lower_bound_by (volume, size, number: the "
    "bounds whose largest is stats.lower_bound_bins), lengths (num_sequences, num_tokens, "
    "num_distinct_lengths, min_length, max_length, mean_length, p50_length, p90_length, "
    "p99_length), no_packing and sequential (method, num_bins, num_sequences, num_tokens, "
    "capacity, efficiency, padding, padding_ratio, avg_seqs_per_bin, num_simulated, "
    "estimated), length_histogram, bin_fullness and seqs_per_bin (lists of {label, low, high, "
    "count}), num_templates, top_templates (list of {template, num_bins}), prepare (the "
    "manifest's config, inputs and summary)."
    "\n\n"
    'Sweep: kind ("sweep"), source ("parquet" or "prepared"), inputs, length_column, '
    "lengths, length_histogram, sample_size, seed, max_seqs_per_bin, rows (one per "
    "max_seq_len, ascending: max_seq_len, num_over_cap, num_tokens_over_cap, seqpack "
    "(PackingStats.to_dict()), lower_bound_by, no_packing, sequential, "
    "bins_saved_vs_sequential)."
)

# What a stats run produces: the --json document, the terminal report, the HTML page.
_StatsOutput = tuple[dict[str, Any], Callable[[Any], None], Callable[[], str]]


def _parse_max_seq_lens(values: list[str]) -> list[int]:
    """`--max-seq-len 1024 --max-seq-len 2048,4096` -> [1024, 2048, 4096].

    Every value is checked before any input is read: one over seqpack's limit is a `ConfigError`.
    """
    from seqpack_cli.lengths import check_max_seq_len

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


def _prepared_source(inputs: list[str], sweep: bool) -> str | None:
    """The prepared directory `inputs` names, or None for parquet inputs (then a sweep)."""
    if len(inputs) == 1 and (Path(inputs[0]) / "manifest.json").is_file():
        return inputs[0]
    if sweep:
        return None
    seq_len, column = option("max_seq_len"), option("length_column")
    if len(inputs) > 1:
        raise ConfigError(
            f"{len(inputs)} inputs but no {seq_len}: `seqpack stats PREPARED_DIR` takes one "
            f"prepared directory; to analyse parquet inputs give {column} NAME "
            f"{seq_len} N[,N...]"
        )
    if Path(inputs[0]).exists():
        raise ConfigError(
            f"{inputs[0]} is not a prepared directory (it has no manifest.json); to analyse "
            f"parquet inputs give {column} NAME {seq_len} N[,N...], or give a "
            "directory written by `seqpack prepare`"
        )
    return inputs[0]  # missing: load_prepared says so, with the command that creates it


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


def _describe_prepared(
    prepared: Any, *, verified: bool, top: int, sample_size: int, seed: int
) -> _StatsOutput:
    from seqpack_cli.html_report import render_profile_html
    from seqpack_cli.report import render_profile
    from seqpack_cli.sweep import profile_packing

    manifest = prepared.manifest
    profile = profile_packing(
        prepared.counts,
        prepared.templates,
        prepared.max_seq_len,
        top=top,
        sample_size=sample_size,
        seed=seed,
        max_seqs_per_bin=manifest.get("config", {}).get("max_seqs_per_bin"),
    )
    title = f"seqpack stats: {prepared.path}"
    details = _prepared_details(manifest, verified)
    document = {
        "kind": "prepared",
        "path": str(prepared.path),
        "verified": verified,
        "sample_size": sample_size,
        "seed": seed,
        **profile.to_dict(),
        "prepare": {
            "config": manifest.get("config", {}),
            "inputs": {k: v for k, v in manifest.get("inputs", {}).items() if k != "files"},
            "summary": manifest.get("summary", {}),
        },
    }
    return (
        document,
        lambda console: render_profile(
            console, profile, title=title, details=details, sample_size=sample_size
        ),
        lambda: render_profile_html(profile, title=title, details=details, sample_size=sample_size),
    )


def _describe_sweep(
    counts: dict[int, int],
    candidates: list[int],
    source: dict[str, Any],
    title: str,
    **options: Any,
) -> _StatsOutput:
    from seqpack_cli.html_report import render_sweep_html
    from seqpack_cli.report import render_sweep
    from seqpack_cli.sweep import sweep_max_seq_len

    result = sweep_max_seq_len(counts, candidates, **options)
    document = {"kind": "sweep", **source, **result.to_dict()}
    return (
        document,
        lambda console: render_sweep(console, result, title=title),
        lambda: render_sweep_html(result, title=title),
    )


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
    ] = 1_000_000,  # == sweep.DEFAULT_SAMPLE_SIZE (a literal: importing sweep here pulls numpy)
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
    from rich.console import Console

    from seqpack_cli.html_report import write_html_report
    from seqpack_cli.interrupts import signals_held
    from seqpack_cli.prepared import load_prepared
    from seqpack_cli.progress import rich_progress

    with signals_held():  # a signal must not land inside DuckDB's initialisation (it aborts)
        from seqpack_cli.scan import resolve_inputs, scan_length_histogram

    candidates = _parse_max_seq_lens(max_seq_len or [])
    sweep = bool(candidates) or length_column is not None
    _check_stray_numbers(inputs)
    prepared_dir = _prepared_source(inputs, sweep)
    seq_len, column = option("max_seq_len"), option("length_column")
    if sweep and not candidates:
        raise ConfigError(
            f"{column} without {seq_len}: name the context length(s) to compare, "
            f"e.g. {seq_len} 2048 or {seq_len} 1024,2048,4096"
        )
    if prepared_dir is None and length_column is None:
        raise ConfigError(
            f"{column} is required with parquet inputs: name the column holding each "
            "sequence's length in tokens"
        )
    if prepared_dir is None and verify:
        raise ConfigError(
            f"{option('verify')} checks a prepared directory's files; it does not apply to "
            "parquet inputs"
        )
    if prepared_dir is not None and length_column is not None:
        raise ConfigError(
            f"{column} does not apply to the prepared directory {prepared_dir} (its "
            "lengths are in counts.json); leave it out"
        )
    sweep_options = {"max_seqs_per_bin": max_seqs_per_bin, "sample_size": sample_size, "seed": seed}
    with rich_progress(enabled=not (quiet or json_output)) as progress:
        if prepared_dir is not None:
            prepared = load_prepared(prepared_dir, verify=verify)
            if not sweep:
                output = _describe_prepared(
                    prepared, verified=verify, top=top, sample_size=sample_size, seed=seed
                )
            else:
                output = _describe_sweep(
                    prepared.counts,
                    candidates,
                    {"source": "prepared", "inputs": [str(prepared.path)], "length_column": None},
                    f"seqpack stats: {prepared.path} (lengths from counts.json)",
                    progress=progress,
                    **sweep_options,
                )
        else:
            files = resolve_inputs(inputs)
            counts = scan_length_histogram(
                files,
                str(length_column),
                threads=threads,
                memory_limit=memory_limit,
                temp_dir=temp_dir,
                progress=progress,
            )
            output = _describe_sweep(
                counts,
                candidates,
                {
                    "source": "parquet",
                    "inputs": [str(path) for path in files],
                    "length_column": length_column,
                },
                f"seqpack stats: {len(files):,} parquet file{'s' * (len(files) != 1)}, "
                f"length column {length_column!r}",
                progress=progress,
                **sweep_options,
            )
    document, render_terminal, render_html = output
    if html is not None:
        written = write_html_report(html, render_html())
        if not quiet:
            typer.echo(f"HTML report written to {written}", err=True)
    if json_output:
        typer.echo(json.dumps(document, indent=2))
    else:
        console = Console()
        if not console.is_terminal:
            console.width = max(console.width, 120)  # piped or captured: room for wide tables
        render_terminal(console)

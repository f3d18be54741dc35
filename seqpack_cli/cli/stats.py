"""`seqpack stats`: parse the options, call `seqpack_cli.stats.describe.describe`, render.

The figures and the `--json` document come from `seqpack_cli.stats.describe` (its docstring
gives the document's keys and their meaning); the terminal report and the HTML page from
`seqpack_cli.stats.render`. Those (numpy, rich) are imported inside the command so
`seqpack --help` stays fast. Which mode, which options go together and what the report says are
the library's: this module only turns the command line into a `StatsRequest` and prints.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from seqpack_cli.cli.options import (
    LengthMultipleOption,
    MemoryLimitOption,
    TempDirOption,
    ThreadsOption,
)
from seqpack_cli.epoch.dealing import DEFAULT_BALANCE_WINDOW
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
    "Baselines, what you get without seqpack, on the same sequences (those longer than "
    "max_seq_len dropped): no packing = one sequence per row, padded to max_seq_len (exact); "
    "sequential = the dataset shuffled, then sequences concatenated in that order, a new row "
    "whenever the next one does not fit (or the row holds --max-seqs-per-bin sequences: both "
    "baselines obey seqpack's cap), none split (next-fit). Sequential is simulated on a "
    "seeded random sample of --sample-size sequences drawn from the length histogram and "
    "scaled to the dataset: an estimate, marked *, costing ~0.1 s per max_seq_len at any size"
    " (exact for a dataset no larger than the sample). The order of your files is not used: "
    "the histogram does not keep it; seqpack_cli.stats.baselines.next_fit_num_bins(lengths, "
    "max_seq_len) gives the file-order figure from Python."
    "\n\n"
    "--json prints the document seqpack_cli.stats.describe.describe(request).to_dict() returns; "
    "that module documents each key. Prepared directory: "
    + ", ".join(JSON_SCHEMA["prepared"])
    + ". Sweep: "
    + ", ".join(JSON_SCHEMA["sweep"])
    + " (one per max_seq_len and cap, ascending: "
    + ", ".join(JSON_SCHEMA["sweep row"])
    + "). With --world-size, either ends with rank_balance: "
    + ", ".join(JSON_SCHEMA["rank_balance"])
    + " (one per packing, world size and rows per rank, without then with balancing: "
    + ", ".join(JSON_SCHEMA["rank_balance plan"])
    + ")."
)


def _parse_positive_list(
    values: list[str], option: str, example: tuple[str, str], *, none: bool = False
) -> list[int | None]:
    """`--option 1024 --option 2048,4096` -> [1024, 2048, 4096]; with `none`, "none" is None.

    Text that is no positive integer is a usage error (exit code 2); the values themselves (one
    over seqpack's limit, say) are checked by `StatsRequest`, before any input is read.
    """
    parsed: list[int | None] = []
    first, second = example
    for value in values:
        for piece in value.split(","):
            text = piece.strip().replace("_", "")
            if none and text.lower() == "none":
                parsed.append(None)
                continue
            # ASCII digits only: int() refuses some characters str.isdigit() accepts ("²").
            if not (text.isascii() and text.isdigit()) or int(text) <= 0:
                what = "a positive integer" + (" or none (no cap)" if none else "")
                raise typer.BadParameter(
                    f"{piece.strip()!r} is not {what}; give values repeated ({option} {first} "
                    f"{option} {second}) or comma-separated ({option} {first},{second})",
                    param_hint=f"'{option}'",
                )
            parsed.append(int(text))
    return parsed


def _parse_max_seq_lens(values: list[str]) -> list[int]:
    """`--max-seq-len 1024 --max-seq-len 2048,4096` -> [1024, 2048, 4096]."""
    parsed = _parse_positive_list(values, "--max-seq-len", ("1024", "2048"))
    return [value for value in parsed if value is not None]


def _parse_caps(values: list[str] | None) -> int | list[int | None] | None:
    """`--max-seqs-per-bin 8,16,none` -> [8, 16, None] (caps to compare); one value as is."""
    if not values:
        return None
    parsed = _parse_positive_list(values, "--max-seqs-per-bin", ("8", "16"), none=True)
    return parsed[0] if len(parsed) == 1 else parsed


def _parse_steps(
    world_sizes: list[str] | None,
    rows_per_rank: list[str] | None,
    cost_per_token: float | None,
    balance_window: int | None,
) -> tuple[list[int], list[int] | None]:
    """The world sizes and rows per rank to weigh plans at; usage errors (exit code 2) for text
    that is no positive integer, a bad --cost-per-token or --balance-window, and --world-size
    without --cost-per-token."""
    parsed = _parse_positive_list(world_sizes or [], "--world-size", ("8", "64"))
    sizes = [value for value in parsed if value is not None]
    parsed = _parse_positive_list(rows_per_rank or [], "--rows-per-rank", ("1", "4"))
    rows = [value for value in parsed if value is not None] or None  # None: the default, 1
    if sizes and cost_per_token is None:
        raise typer.BadParameter(
            "required with --world-size: c in a bin's cost (the sum over its sequences of "
            "c*l + l**2), the linear layers' work per token over attention's per token pair; "
            "derive it with seqpack_cli.hf.cost_per_token(model.config), e.g. --cost-per-token "
            "24576 (12 x hidden_size 2048)",
            param_hint="'--cost-per-token'",
        )
    if cost_per_token is not None and not (math.isfinite(cost_per_token) and cost_per_token >= 0):
        raise typer.BadParameter(
            f"{cost_per_token:g} is not a finite number >= 0; give c of a bin's cost, e.g. "
            "--cost-per-token 24576, or derive it with seqpack_cli.hf.cost_per_token("
            "model.config)",
            param_hint="'--cost-per-token'",
        )
    if balance_window is not None and balance_window < 1:
        raise typer.BadParameter(
            f"{balance_window} is not a positive integer; give the steps per balancing window, "
            f"e.g. --balance-window {DEFAULT_BALANCE_WINDOW}",
            param_hint="'--balance-window'",
        )
    return sizes, rows


def _check_stray_numbers(inputs: list[str]) -> None:
    # `--max-seq-len 1024 2048` leaves 2048 as an input: say how to give several values. This is
    # about how the shell line was split, so it is a usage error here, not a library check.
    for text in inputs:
        if text.replace(",", "").isdigit() and not Path(text).exists():
            raise typer.BadParameter(
                f"input {text!r} looks like a --max-seq-len value; the option takes one value "
                f"each time: repeat it (--max-seq-len 1024 --max-seq-len {text}) or give a "
                f"comma list (--max-seq-len 1024,{text})",
                param_hint="'INPUT...'",
            )


def _render(report: StatsReport, *, html: Path | None, quiet: bool, json_output: bool) -> None:
    """The HTML page (`--html`), then the JSON document (`--json`) or the terminal report."""
    from rich.console import Console

    from seqpack_cli.stats.render import render_report, render_report_html
    from seqpack_cli.stats.render.html import write_html_report

    if html is not None:
        written = write_html_report(html, render_report_html(report))
        if not quiet:
            typer.echo(f"HTML report written to {written}", err=True)
    if json_output:
        typer.echo(report.to_json())
        return
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 120)  # piped or captured: room for wide tables
    render_report(console, report)


def stats(
    inputs: Annotated[
        list[str],
        typer.Argument(
            metavar="PREPARED_DIR | INPUT...",
            help="A prepared directory (it has a manifest.json) to describe, or parquet or JSON "
            "Lines files, globs or directories to analyse with --length-column and "
            "--max-seq-len.",
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
            help="Column holding each sequence's length in tokens, or its token ids (a list "
            "column: the length is the number of elements); for file inputs.",
            show_default=False,
        ),
    ] = None,
    max_seqs_per_bin: Annotated[
        list[str] | None,
        typer.Option(
            "--max-seqs-per-bin",
            metavar="K[,K...]",
            help="At most K sequences per bin, for seqpack and both baselines (default: no "
            "cap). Several caps are compared like --max-seq-len values (--max-seqs-per-bin "
            "8,16,none: none is no cap), each at every max_seq_len.",
            show_default=False,
        ),
    ] = None,
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
        int,
        typer.Option(
            "--seed",
            help="Seed of the sequential baseline's sample, and of the training run whose plan "
            "--world-size weighs (its epoch 0, as PackedDataset(seed=...) plans it).",
        ),
    ] = 0,
    length_multiple: LengthMultipleOption = None,
    world_size: Annotated[
        list[str] | None,
        typer.Option(
            "--world-size",
            metavar="W[,W...]",
            help="Show the rank imbalance a training run's plan would have at these "
            "data-parallel world sizes, without and with balancing by cost (--cost-per-token "
            "required): per step, the most expensive rank's cost over the mean rank's, its "
            "mean and worst over the epoch. A comma list (8,64) or repeated, like "
            "--max-seq-len.",
            show_default=False,
        ),
    ] = None,
    rows_per_rank: Annotated[
        list[str] | None,
        typer.Option(
            "--rows-per-rank",
            metavar="B[,B...]",
            help="Packed rows each rank trains on per step (the datasets' rows_per_rank), "
            "compared like --world-size (default 1).",
            show_default=False,
        ),
    ] = None,
    cost_per_token: Annotated[
        float | None,
        typer.Option(
            "--cost-per-token",
            metavar="C",
            help="c of a bin's cost, the sum over its sequences of c*l + l**2: the linear "
            "layers' work per token over attention's per token pair. "
            "seqpack_cli.hf.cost_per_token(model.config) derives it from a transformers "
            "config (12 * hidden_size for a standard transformer: 24576 at hidden 2048).",
            show_default=False,
        ),
    ] = None,
    balance_window: Annotated[
        int | None,
        typer.Option(
            "--balance-window",
            metavar="N",
            help="Steps per balancing window of the balanced plans (default "
            f"{DEFAULT_BALANCE_WINDOW}, the datasets' balance_window).",
            show_default=False,
        ),
    ] = None,
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
    length column and shows, per max_seq_len, what it costs (the sequences over it, the
    tokens lost if they are dropped or cut if they are truncated, and the attention FLOPs of
    packed rows against padded ones), then seqpack's bins and efficiency on the sequences that
    fit, next to packing without seqpack. `--max-seqs-per-bin 8,16,none` compares caps too:
    bins against no cap, sequences and attention per bin, each at every max_seq_len.
    `--world-size 8,64 --rows-per-rank 1,4 --cost-per-token 24576` adds, in either mode, how
    unequal the ranks' costs would be in each step of a training run's plan, without and with
    balancing (balance='cost').
    """
    candidates = _parse_max_seq_lens(max_seq_len or [])
    _check_stray_numbers(inputs)
    world_sizes, rows = _parse_steps(world_size, rows_per_rank, cost_per_token, balance_window)
    request = StatsRequest(
        inputs,
        max_seq_lens=candidates,
        length_column=length_column,
        max_seqs_per_bin=_parse_caps(max_seqs_per_bin),
        verify=verify,
        top=top,
        sample_size=sample_size,
        seed=seed,
        threads=threads,
        memory_limit=memory_limit,
        temp_dir=temp_dir,
        world_sizes=world_sizes,
        rows_per_rank=rows,
        cost_per_token=cost_per_token,
        balance_window=balance_window,
        length_multiple=length_multiple,
    )
    with rich_progress(enabled=not (quiet or json_output)) as progress:
        report = describe(request, progress=progress)
    _render(report, html=html, quiet=quiet, json_output=json_output)

"""A `StatsReport` drawn for a person: the terminal report and the HTML page of `seqpack stats`.

`seqpack_cli.stats.describe` computes the report; this package draws it. Here: the drawing
picked for the report's mode (a prepared directory's `PackingProfile`, or a `SweepResult`), its
title and the prepared directory's details worded from the manifest. The CLI
(`seqpack_cli.cli.stats`) only calls `render_report` or `render_report_html`, so both outputs are
available from Python too.

- `terminal`: a packing's report in the terminal (rich), and the wording both outputs share;
- `terminal_sweep`: a `max_seq_len` (and cap) sweep in the terminal;
- `rank_balance`: the rank balance of `--world-size`, for the terminal and the page;
- `html`: the self-contained `--html` page; `svg`: its inline charts.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from rich.console import Console

from seqpack_cli.stats.describe import StatsReport
from seqpack_cli.stats.left_out import LeftOut, left_out_of_summary
from seqpack_cli.stats.render.html import rank_balance_html, render_profile_html, render_sweep_html
from seqpack_cli.stats.render.rank_balance import render_rank_balance
from seqpack_cli.stats.render.terminal import format_percent, plural, render_profile
from seqpack_cli.stats.render.terminal_sweep import render_sweep

__all__ = [
    "left_out_rows",
    "prepared_details",
    "render_report",
    "render_report_html",
    "report_title",
]


def report_title(report: StatsReport) -> str:
    """The report's heading: the prepared directory, or the parquet files and length column."""
    if report.kind == "prepared":
        return f"seqpack stats: {report.inputs[0]}"
    if report.source == "prepared":
        return f"seqpack stats: {report.inputs[0]} (lengths from counts.json)"
    num_files = len(report.inputs)
    return (
        f"seqpack stats: {num_files:,} parquet file{'s' * (num_files != 1)}, "
        f"length column {report.request.length_column!r}"
    )


def left_out_rows(left_out: LeftOut) -> list[tuple[str, str]]:
    """What prepare dropped and truncated, as (name, value) rows: sequences and tokens, each
    with its share of the inputs'."""

    def what(sequences: int, share: float, tokens: int, token_share: float, verb: str) -> str:
        return (
            f"{plural(sequences, 'sequence')} ({format_percent(share, 2)}) over max_seq_len; "
            f"{plural(tokens, 'token')} {verb} ({format_percent(token_share, 2)} of the inputs')"
        )

    return [
        (
            "dropped by prepare",
            what(
                left_out.num_dropped,
                left_out.share_dropped,
                left_out.num_tokens_dropped,
                left_out.share_tokens_dropped,
                "lost",
            ),
        ),
        (
            "truncated by prepare",
            what(
                left_out.num_truncated,
                left_out.share_truncated,
                left_out.num_tokens_truncated,
                left_out.share_tokens_truncated,
                "cut",
            ),
        ),
    ]


def prepared_details(manifest: Mapping[str, Any], *, verified: bool) -> list[tuple[str, str]]:
    """What the manifest says about how a prepared directory was made, as (name, value) rows."""
    config = manifest.get("config", {})
    inputs = manifest.get("inputs", {})
    num_files, num_rows = inputs.get("num_files", 0), inputs.get("num_rows", 0)
    return [
        ("inputs", f"{plural(num_files, 'file')}, {plural(num_rows, 'row')}"),
        ("length column", str(config.get("length_column"))),
        ("packer", str(config.get("packer"))),
        *left_out_rows(left_out_of_summary(manifest.get("summary", {}))),
        ("checked", "sha256 of every file" if verified else "file sizes (--verify: sha256)"),
    ]


def _profile_options(report: StatsReport) -> dict[str, Any]:
    return {
        "title": report_title(report),
        "details": prepared_details(report.manifest or {}, verified=report.request.verify),
        "sample_size": report.request.sample_size,
    }


def render_report(console: Console, report: StatsReport) -> None:
    """Print the terminal report of either mode on `console`."""
    if report.profile is not None:
        render_profile(console, report.profile, **_profile_options(report))
    else:
        assert report.sweep is not None  # a StatsReport holds one of the two
        left_out = report.left_out
        render_sweep(
            console,
            report.sweep,
            title=report_title(report),
            details=left_out_rows(left_out) if left_out is not None else (),
        )
    options = report.request.rank_balance
    if options is not None:
        console.print()
        console.print(render_rank_balance(report.rank_balance, options))
    for cost in report.multiple_costs:
        console.print(f"length multiple at max_seq_len {cost.max_seq_len:,}: {cost.text()}")


def render_report_html(report: StatsReport) -> str:
    """The self-contained HTML page of either mode; `html.write_html_report` writes it."""
    options = report.request.rank_balance
    sections = [] if options is None else rank_balance_html(report.rank_balance, options)
    if report.profile is not None:
        return render_profile_html(report.profile, **_profile_options(report), sections=sections)
    assert report.sweep is not None  # a StatsReport holds one of the two
    left_out = report.left_out
    paragraph = (
        ""
        if left_out is None
        else "".join(
            f"<p>{escape(name)}: {escape(value)}.</p>" for name, value in left_out_rows(left_out)
        )
    )
    return render_sweep_html(
        report.sweep, title=report_title(report), left_out=paragraph, sections=sections
    )

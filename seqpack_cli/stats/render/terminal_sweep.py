"""Terminal rendering of a `max_seq_len` (and cap) sweep: `seqpack stats INPUT... --max-seq-len`.

What each max_seq_len costs, the sequences that fit packed three ways (seqpack and both
baselines, under the same cap), what each cap costs and buys where caps are compared, an
efficiency chart and the length histogram; every table fits 80 columns. The number formats,
colours and shared wording come from `seqpack_cli.stats.render.terminal`, the figures from
`seqpack_cli.stats.sweep`.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from seqpack_cli.stats.render.terminal import (
    BINS_SAVED,
    baseline_footnotes,
    cap_text,
    chart_table,
    efficiency_style,
    efficiency_text,
    format_efficiency,
    format_percent,
    lengths_text,
    spark_line,
    text_bar,
)
from seqpack_cli.stats.sweep import SWEEP_PACKER, SweepResult, SweepRow

__all__ = ["PACKER_NOTE", "one_per_max_seq_len", "render_sweep"]

PACKER_NOTE = (
    f"{SWEEP_PACKER}, half the LP budget `seqpack prepare` spends, so a few bins may be "
    "above what prepare packs"
)
"""Which packer a sweep's figures come from, as both reports say it."""


def _count_and_share(count: int, share: float, digits: int = 1) -> Text:
    """A count over its share of the total (dim), as two lines: narrow enough for 80 columns."""
    return Text.assemble(f"{count:,}\n", (format_percent(share, digits), "dim"))


def one_per_max_seq_len(result: SweepResult) -> list[SweepRow]:
    """The first row of each max_seq_len: what a max_seq_len costs is the same at every cap."""
    seen: set[int] = set()
    rows = []
    for row in result.rows:
        if row.max_seq_len not in seen:
            seen.add(row.max_seq_len)
            rows.append(row)
    return rows


def _cap_cost_table(result: SweepResult) -> Table:
    """Per max_seq_len: the sequences over it, the tokens that costs, attention vs padding."""
    table = Table(
        title="What each max_seq_len costs (sequences longer than it)",
        title_justify="left",
        box=None,
        pad_edge=False,
        leading=1,
    )
    for header in (
        "max_seq_len",
        "sequences\nlonger",
        "tokens lost\nif dropped",
        "tokens cut\nif truncated",
        "attention\nvs padded",
    ):
        table.add_column(header, justify="right", overflow="fold")
    for row in one_per_max_seq_len(result):
        cost = row.cost
        table.add_row(
            Text(f"{row.max_seq_len:,}", style="bold"),
            _count_and_share(cost.num_over_cap, cost.share_over_cap, 2),
            _count_and_share(cost.num_tokens_over_cap, cost.share_tokens_over_cap),
            _count_and_share(cost.num_tokens_truncated, cost.share_tokens_truncated),
            format_percent(cost.attention_vs_padded, 2),
        )
    return table


def _row_key(row: SweepRow, capped: bool) -> list[str]:
    """The cells that name a sweep row: its max_seq_len, and its cap where caps are compared."""
    return (
        [f"{row.max_seq_len:,}", cap_text(row.max_seqs_per_bin)]
        if capped
        else [f"{row.max_seq_len:,}"]
    )


def _key_columns(table: Table, capped: bool) -> None:
    table.add_column("max_seq_len", justify="right", style="bold", overflow="fold")
    if capped:
        table.add_column("cap", justify="right", style="bold", overflow="fold")


def _packing_table(result: SweepResult) -> Table:
    """Per max_seq_len (and cap), the sequences that fit packed three ways, under the same cap:
    seqpack and both baselines."""
    capped = result.is_capped
    table = Table(
        title="Per max_seq_len"
        + (" and cap (seqpack and both baselines obey it)" if capped else "")
        + ": the sequences that fit, packed three ways",
        title_justify="left",
        box=None,
        pad_edge=False,
    )
    _key_columns(table, capped)
    table.add_column("method", overflow="fold")
    for header in ("bins", "seqs/bin", "efficiency", BINS_SAVED):
        table.add_column(header, justify="right", overflow="fold")
    blank = [""] * (2 if capped else 1)
    for number, row in enumerate(result.rows):
        packed = row.packed
        if number:
            table.add_row()  # a blank line between rows of the sweep
        table.add_row(
            *_row_key(row, capped),
            "seqpack",
            f"{packed.num_bins:,}",
            f"{packed.avg_seqs_per_bin:.2f}",
            efficiency_text(packed.efficiency),
            "",
        )
        for baseline in (row.sequential, row.no_packing):
            table.add_row(
                *blank,
                "sequential" if baseline.method != "no_packing" else "no packing",
                f"{baseline.num_bins:,}" + ("*" if baseline.estimated else ""),
                f"{baseline.avg_seqs_per_bin:.2f}",
                efficiency_text(baseline.efficiency),
                format_percent(baseline.bins_saved_by(packed.num_bins)),
            )
    return table


def _per_bin_table(result: SweepResult) -> Table:
    """Per max_seq_len (and cap): seqpack's bins (against no cap where caps are compared), the
    largest number of sequences in a bin and their spread, and the attention per bin."""
    capped = result.is_capped
    table = Table(
        title=(
            "Per cap (max sequences per bin): seqpack's bins, sequences and attention per bin"
            if capped
            else "Per max_seq_len: seqpack's bins, sequences and attention per bin"
        ),
        title_justify="left",
        box=None,
        pad_edge=False,
        leading=1,
    )
    _key_columns(table, capped)
    for header in (
        "bins\nvs no cap" if capped else "bins",
        "efficiency",
        "seqs per bin\nmax, spread",
        "attention per\nbin, of L²",
    ):
        table.add_column(header, justify="right", overflow="fold")
    for row in result.rows:
        bins = Text(f"{row.packed.num_bins:,}")
        if capped:
            bins.append(f"\n{row.bins_vs_uncapped:+.2%}", style="dim")
        table.add_row(
            *_row_key(row, capped),
            bins,
            efficiency_text(row.packed.efficiency),
            Text.assemble(
                f"{row.packed.max_seqs_in_bin:,}\n",
                (spark_line(row.seqs_per_bin), "cyan"),
            ),
            Text.assemble(
                f"mean {format_percent(row.attention_per_bin_vs_dense)}\n",
                (f"max {format_percent(row.attention_max_bin_vs_dense)}", "dim"),
            ),
        )
    return table


def _sweep_notes(result: SweepResult) -> list[Text]:
    cap_note = (
        "Cap: at most that many sequences per bin (none: no cap), for seqpack and both "
        "baselines alike. bins vs no cap: seqpack's bins over its bins with no cap at the "
        "same max_seq_len. "
        if result.is_capped
        else ""
    )
    per_bin_note = Text(
        cap_note + "seqs per bin: the largest number in one bin, and how the bins spread over "
        "even-width ranges from 1 to it (--json: seqs_per_bin). attention per bin: the sum of "
        "length² in a bin over max_seq_len² (a dense row), the mean and the largest; the total "
        "is the same at every cap, so a cap spreads it over more bins.",
        style="dim",
    )
    notes = [
        Text(
            "Sequences longer than max_seq_len are dropped from every packing; the tokens lost "
            "if they are "
            "dropped, or cut if they are truncated to max_seq_len, are counted and shown as a "
            "share of all tokens. attention vs padded: the attention FLOPs of the packed rows, "
            "each sequence attending only within itself (the sum of length², as a varlen "
            "kernel computes it; the same for any packing), over those of one sequence per row "
            "padded to max_seq_len with dense attention (rows × max_seq_len²).",
            style="dim",
        ),
        per_bin_note,
        Text(f"seqpack's packings: {PACKER_NOTE}.", style="dim"),
        baseline_footnotes(
            result.sample_size,
            result.max_seqs_per_bin[0],
            several_caps=len(result.max_seqs_per_bin) > 1,
        ),
    ]
    if any(row.sequential.estimated for row in result.rows):
        notes.insert(0, Text("* estimated on a sample (see below)", style="dim"))
    return notes


def render_sweep(
    console: Console,
    result: SweepResult,
    *,
    title: str,
    details: Sequence[tuple[str, str]] = (),
) -> None:
    """Print a sweep: what each max_seq_len costs, the packings, an efficiency chart, and the
    length histogram. Every table fits 80 columns (counts are never cut short)."""
    header = Text.assemble(
        (title, "bold"),
        "\n",
        lengths_text(result.lengths),
    )
    for name, value in details:  # e.g. what prepare left out of a prepared directory
        header.append(f"\n{name}: {value}")
    capped = result.is_capped
    if capped:
        header.append(
            "\ncap (max sequences per bin): "
            + ", ".join(cap_text(cap) for cap in result.max_seqs_per_bin)
            + ", for seqpack and both baselines"
        )

    chart = Table(title="Efficiency (tokens / capacity)", title_justify="left", box=None)
    _key_columns(chart, capped)
    chart.add_column("method", overflow="fold")
    chart.add_column("efficiency", no_wrap=True, overflow="crop")
    chart.add_column("", justify="right", overflow="fold")
    for row in result.rows:
        key = _row_key(row, capped)
        for index, (name, fraction) in enumerate(
            (
                ("seqpack", row.packed.efficiency),
                ("sequential", row.sequential.efficiency),
                ("no packing", row.no_packing.efficiency),
            )
        ):
            chart.add_row(
                *(key if index == 0 else [""] * len(key)),
                name,
                Text(text_bar(fraction), style=efficiency_style(fraction)),
                format_efficiency(fraction),
                end_section=index == 2,
            )

    console.print(
        Group(
            header,
            Text(),
            _cap_cost_table(result),
            Text(),
            _packing_table(result),
            Text(),
            _per_bin_table(result),
            Text(),
            chart,
            Text(),
            chart_table(
                "Sequence lengths", result.length_buckets, "sequences", label_header="length"
            ),
            Text(),
            *_sweep_notes(result),
        )
    )

"""Terminal rendering of `seqpack stats`: rich tables and text bar charts, and the formats,
colours and wording every report shares.

Pure presentation: every figure comes from `seqpack_cli.stats.profile` (a `PackingProfile` for a
prepared directory, drawn here) or `seqpack_cli.stats.sweep` (a `SweepResult`, drawn by
`terminal_sweep`); nothing is computed here except shares and bar widths. No
cell is ever cut short with an ellipsis: the tables fit 80 columns, and a figure too wide for
the terminal folds instead. The
helpers `format_template`, `format_percent`, `efficiency_style`, `profile_figures` and
`template_cells` are shared with the HTML report (`seqpack_cli.stats.render.html`) so both read the
same; `seqpack_cli.stats.render` picks the drawing for a `StatsReport`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from seqpack_cli.packing.efficiency import PackingStats
from seqpack_cli.stats.baselines import (
    NO_PACKING_DESCRIPTION,
    BaselineStats,
    sequential_description,
)
from seqpack_cli.stats.distribution import Bucket, LengthSummary
from seqpack_cli.stats.profile import PackingProfile

__all__ = [
    "BINS_SAVED",
    "BINS_SAVED_NOTE",
    "baseline_footnotes",
    "bound_name",
    "cap_text",
    "chart_table",
    "efficiency_style",
    "efficiency_text",
    "format_efficiency",
    "format_padding",
    "format_percent",
    "format_template",
    "lengths_text",
    "plural",
    "profile_figures",
    "render_profile",
    "spark_line",
    "template_cells",
    "text_bar",
]

_BAR_WIDTH = 32
_EIGHTHS = " ▏▎▍▌▋▊▉█"  # partial blocks: a bar's length resolves to 1/8 of a character
_SPARKS = "▁▂▃▄▅▆▇█"

BINS_SAVED = "bins saved"
"""The one name, in every report, of the share of a baseline's bins seqpack does without."""
BINS_SAVED_NOTE = (
    f"{BINS_SAVED}: the share of that method's bins (so of its compute) seqpack does without."
)
"""What `BINS_SAVED` means, as every report's note says it."""


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """`1 bin`, `2 bins`, `1,000 sequences`: the count with its noun in the right number."""
    word = noun if count == 1 else plural_form or f"{noun}s"
    return f"{count:,} {word}"


def lengths_text(lengths: LengthSummary) -> str:
    """The sequences and tokens, and the length percentiles, in one line (both sweep reports)."""
    return (
        f"{lengths.num_sequences:,} sequences, {lengths.num_tokens:,} tokens; length min "
        f"{lengths.min_length:,}, p50 {lengths.p50_length:,}, p90 {lengths.p90_length:,}, "
        f"p99 {lengths.p99_length:,}, max {lengths.max_length:,}, mean {lengths.mean_length:,.1f}"
    )


def cap_text(max_seqs_per_bin: int | None) -> str:
    """A per-bin sequence cap for a person: `16` or `none`."""
    return "none" if max_seqs_per_bin is None else f"{max_seqs_per_bin:,}"


def format_percent(fraction: float, digits: int = 1, *, rounding: str = "nearest") -> str:
    """`0.98765` -> `98.8%`; `rounding` "down" or "up" keeps 100.00% / 0.00% for exact values."""
    if rounding == "nearest":
        return f"{fraction * 100:.{digits}f}%"
    scale = 10**digits
    # round the scaled value first so float noise (99.99999999 for 100) does not floor a step down
    value = round(fraction * 100 * scale, 6)
    steps = math.floor(value) if rounding == "down" else math.ceil(value)
    return f"{steps / scale:.{digits}f}%"


def format_efficiency(fraction: float) -> str:
    """An efficiency with 2 decimals, rounded down: `100.00%` only when nothing is wasted."""
    return format_percent(fraction, 2, rounding="down")


def format_padding(fraction: float) -> str:
    """A padding ratio with 2 decimals, rounded up: `0.00%` only when nothing is wasted."""
    return format_percent(fraction, 2, rounding="up")


def format_template(template: Sequence[int], max_parts: int = 8) -> str:
    """A template as runs of equal lengths: (512, 512, 256, 7) -> `512×2 + 256 + 7`."""
    runs: list[tuple[int, int]] = []
    for length in template:
        if runs and runs[-1][0] == length:
            runs[-1] = (length, runs[-1][1] + 1)
        else:
            runs.append((length, 1))
    parts = [f"{length}×{count}" if count > 1 else str(length) for length, count in runs]
    if len(parts) > max_parts:
        rest = sum(count for _, count in runs[max_parts:])
        parts = [*parts[:max_parts], f"… ({rest} more)"]
    return " + ".join(parts)


# The colour scale of an efficiency: (efficiency, RGB) stops, linearly blended in between, so
# two close efficiencies always get close colours (thresholds made 84.84% red and 85.17%
# yellow). Red up to 50%, through amber at 85%, to green from 95%.
_EFFICIENCY_COLOURS: tuple[tuple[float, tuple[int, int, int]], ...] = (
    (0.50, (0xC6, 0x28, 0x28)),
    (0.85, (0xB7, 0x79, 0x1F)),
    (0.95, (0x2E, 0x7D, 0x32)),
)


def efficiency_style(fraction: float) -> str:
    """The colour (`#rrggbb`, for rich and CSS alike) of an efficiency on a continuous scale:
    red to 50%, amber at 85%, green from 95%, blended in between."""
    stops = _EFFICIENCY_COLOURS
    if fraction <= stops[0][0]:
        rgb = stops[0][1]
    elif fraction >= stops[-1][0]:
        rgb = stops[-1][1]
    else:
        (low, low_rgb), (high, high_rgb) = next(
            (a, b) for a, b in itertools.pairwise(stops) if fraction <= b[0]
        )
        weight = (fraction - low) / (high - low)
        rgb = tuple(round(a + (b - a) * weight) for a, b in zip(low_rgb, high_rgb, strict=True))  # type: ignore[assignment]
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def spark_line(buckets: Sequence[Bucket]) -> str:
    """One character per bucket, its height the bucket's count over the largest (an empty
    bucket shows as a space): a distribution in a table cell."""
    largest = max((bucket.count for bucket in buckets), default=0)
    if not largest:
        return ""
    top = len(_SPARKS) - 1
    return "".join(
        _SPARKS[min(top, int(bucket.count / largest * top + 0.5))] if bucket.count else " "
        for bucket in buckets
    )


def text_bar(fraction: float, width: int = _BAR_WIDTH) -> str:
    """A horizontal bar `width` characters at fraction 1, in eighth-character steps."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[part] if part else "")).ljust(width)


def chart_table(title: str, buckets: Sequence[Bucket], unit: str, *, label_header: str) -> Table:
    """A bar per bucket, scaled to the largest, with the count and its share of the total."""
    total = sum(bucket.count for bucket in buckets)
    largest = max((bucket.count for bucket in buckets), default=0)
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    table.add_column(label_header, justify="right", style="bold", overflow="fold")
    table.add_column("", no_wrap=True, overflow="crop", style="cyan")
    table.add_column(unit, justify="right", overflow="fold")
    table.add_column("share", justify="right", overflow="fold")
    for bucket in buckets:
        share = bucket.count / total if total else 0.0
        table.add_row(
            bucket.label,
            # a non-empty bucket shows at least a sliver, however small its share
            text_bar(max(bucket.count / largest, 1 / (8 * _BAR_WIDTH)) if bucket.count else 0.0),
            f"{bucket.count:,}",
            format_percent(share),
        )
    return table


def bound_name(profile: PackingProfile) -> str:
    """ "LP lower bound" where the bound shown is the LP relaxation's, else "lower bound"."""
    return "LP lower bound" if profile.lower_bound.is_lp else "lower bound"


def profile_figures(profile: PackingProfile, *, separator: str) -> dict[str, str]:
    """The summary both reports give of a prepared directory: {figure: value}, in display order.

    `separator` goes between the fullness percentiles.
    """
    stats = profile.stats
    return {
        "max_seq_len": f"{profile.max_seq_len:,}",
        "sequences": f"{stats.num_sequences:,} (avg {stats.avg_seqs_per_bin:.2f} per bin)",
        "tokens": f"{stats.num_tokens:,} / {stats.capacity:,} capacity",
        "bins": f"{stats.num_bins:,} ({bound_name(profile)} {stats.lower_bound_bins:,})",
        "efficiency": format_efficiency(stats.efficiency),
        "padding": f"{stats.padding:,} tokens ({format_padding(stats.padding_ratio)})",
        "fullness": separator.join(
            f"{name} {format_percent(value)}"
            for name, value in (
                ("p50", stats.bin_fullness_p50),
                ("p90", stats.bin_fullness_p90),
                ("p99", stats.bin_fullness_p99),
            )
        ),
        "max seqs in a bin": f"{stats.max_seqs_in_bin:,}",
        "cap (max seqs per bin)": (
            "none"
            if profile.max_seqs_per_bin is None
            else f"{profile.max_seqs_per_bin:,}, for seqpack and both baselines"
        ),
        "templates": f"{profile.num_templates:,} distinct",
    }


def template_cells(
    profile: PackingProfile, template: Sequence[int], count: int, *, max_parts: int = 8
) -> list[str]:
    """One row of the most-common-templates table: bins, share of bins, fill, the template."""
    num_bins = profile.stats.num_bins
    return [
        f"{count:,}",
        format_percent(count / num_bins if num_bins else 0.0),
        format_percent(sum(template) / profile.max_seq_len),
        format_template(template, max_parts=max_parts),
    ]


def efficiency_text(fraction: float) -> Text:
    return Text(format_efficiency(fraction), style=efficiency_style(fraction))


def _comparison_table(stats: PackingStats, baselines: Sequence[BaselineStats]) -> Table:
    packed_bins, packed_eff = stats.num_bins, stats.efficiency
    packed_seqs_per_bin = stats.avg_seqs_per_bin
    table = Table(title="Against packing without seqpack", title_justify="left", box=None)
    table.add_column("method", style="bold", overflow="fold")
    table.add_column("bins", justify="right", overflow="fold")
    table.add_column("efficiency", justify="right", overflow="fold")
    table.add_column("seqs/bin", justify="right", overflow="fold")
    table.add_column(BINS_SAVED, justify="right", overflow="fold")
    table.add_row(
        "seqpack", f"{packed_bins:,}", efficiency_text(packed_eff), f"{packed_seqs_per_bin:.2f}", ""
    )
    for baseline in baselines:
        name = _baseline_name(baseline)
        table.add_row(
            name,
            f"{baseline.num_bins:,}",
            efficiency_text(baseline.efficiency),
            f"{baseline.avg_seqs_per_bin:.2f}",
            format_percent(baseline.bins_saved_by(packed_bins)),
        )
    return table


def _baseline_name(baseline: BaselineStats) -> str:
    if baseline.method == "no_packing":
        return "no packing"
    return "sequential (est.)" if baseline.estimated else "sequential"


def baseline_footnotes(
    sample_size: int, max_seqs_per_bin: int | None = None, *, several_caps: bool = False
) -> Text:
    sequential = sequential_description(sample_size, max_seqs_per_bin, several_caps=several_caps)
    return Text.assemble(
        ("Baselines on the same sequences: ", "dim"),
        (NO_PACKING_DESCRIPTION + "; ", "dim"),
        (sequential + ". ", "dim"),
        (BINS_SAVED_NOTE, "dim"),
    )


def render_profile(
    console: Console,
    profile: PackingProfile,
    *,
    title: str,
    details: Sequence[tuple[str, str]] = (),
    sample_size: int,
) -> None:
    """Print a prepared directory's report: summary, comparison, three charts, top templates."""
    stats = profile.stats
    summary = Table(title=title, title_justify="left", box=None, show_header=False)
    summary.add_column(style="bold", overflow="fold")
    summary.add_column(overflow="fold")
    above_bound = stats.num_bins / stats.lower_bound_bins - 1.0 if stats.lower_bound_bins else 0.0
    figures: dict[str, str | Text] = dict(profile_figures(profile, separator="  "))
    figures["bins"] = (
        f"{stats.num_bins:,} ({bound_name(profile)} {stats.lower_bound_bins:,}, "
        f"+{format_percent(above_bound, 2)})"
    )
    figures["efficiency"] = efficiency_text(stats.efficiency)
    for name, value in [*figures.items(), *details]:
        summary.add_row(name, value)

    templates = Table(
        title=f"Most common templates (top {len(profile.top_templates)} of "
        f"{profile.num_templates:,})",
        title_justify="left",
        box=None,
    )
    templates.add_column("bins", justify="right", overflow="fold")
    templates.add_column("share", justify="right", overflow="fold")
    templates.add_column("fill", justify="right", overflow="fold")
    templates.add_column("template (lengths)", overflow="fold")
    for template, count in profile.top_templates:
        templates.add_row(*template_cells(profile, template, count))

    parts: list[RenderableType] = [
        summary,
        Text(),
        _comparison_table(stats, [profile.sequential, profile.no_packing]),
        Text(),
        chart_table("Sequence lengths", profile.length_buckets, "sequences", label_header="length"),
        Text(),
        chart_table("Bin fullness", profile.fullness_buckets, "bins", label_header="filled"),
        Text(),
        chart_table("Sequences per bin", profile.seqs_per_bin_buckets, "bins", label_header="seqs"),
        Text(),
        templates,
        Text(),
        baseline_footnotes(sample_size, profile.max_seqs_per_bin),
    ]
    console.print(Group(*parts))

"""The inline SVG charts of the `seqpack stats --html` page (`seqpack_cli.stats.render.html`).

Plain SVG text, no script or font fetched. Every chart sizes its margins, bars and legend from
the width of the text it writes (`text_width`, an upper estimate for common sans-serif faces)
and sets its viewBox to hold all of it, so a long label or legend entry is never cut off.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence

from seqpack_cli.stats.distribution import Bucket
from seqpack_cli.stats.render.terminal import format_percent, plural

__all__ = ["FONT_SIZE", "axis_top", "bar_chart", "grouped_chart", "text_width"]


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


# Text widths in em, rounded up from DejaVu Sans (wider than Arial, Helvetica, Segoe UI or SF:
# digits 0.636 em, `m` 0.974, `%` 0.95, `,` 0.318; tests/test_report.py holds the table):
# the charts size their margins from them, so a label is never cut off at the viewBox edge.
_NARROW_EM = frozenset(" ,.:;!|'()[]ijlIft-")
_WIDE_EM = frozenset("mwMW%@…—×")
FONT_SIZE = 12  # px, the `svg text` size in seqpack_cli.stats.render.html's _CSS
_SMALL_FONT = 10  # px, the values above a grouped chart's bars (a style: it beats _CSS's rule)


def text_width(text: str, font_size: float = FONT_SIZE) -> float:
    """An upper estimate of `text`'s width in px at `font_size` px (see _NARROW_EM, _WIDE_EM)."""
    ems = sum(
        0.42 if char in _NARROW_EM else 1.0 if char in _WIDE_EM or char.isupper() else 0.66
        for char in text
    )
    return ems * font_size


def _heading(title: str, width: float) -> str:
    """The chart's visible title, centred on its first line (also its accessible name)."""
    return (
        f"<title>{_e(title)}</title>"
        f'<text x="{width / 2:.1f}" y="16" text-anchor="middle">{_e(title)}'
        "</text>"
    )


def bar_chart(buckets: Sequence[Bucket], unit: str, title: str, *, label_axis: str) -> str:
    """Horizontal bar chart: one bar per bucket, scaled to the largest, labelled with its count.

    Titled, its label axis named `label_axis` and its value axis `unit` (one unit: counts, with
    their share of the total). The label and value columns are as wide as their longest text,
    so nothing is cut off.
    """
    row_height, bar_width, gap, head = 22, 520, 8, 44
    total = sum(bucket.count for bucket in buckets)
    largest = max((bucket.count for bucket in buckets), default=0)
    values = [
        f"{plural(bucket.count, unit.removesuffix('s'), unit)} "
        f"({format_percent(bucket.count / total if total else 0.0)})"
        for bucket in buckets
    ]
    label_texts = [bucket.label for bucket in buckets] + [label_axis]
    label_width = math.ceil(max(text_width(text) for text in label_texts)) + 2 * gap
    value_width = math.ceil(max((text_width(value) for value in values), default=0.0)) + 2 * gap
    width = label_width + bar_width + value_width
    title_width = math.ceil(text_width(title)) + 2 * gap
    width = max(width, title_width)
    height = head + row_height * max(1, len(buckets)) + 8
    parts = [
        f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        _heading(title, width),
        # the axes' names: the bucket labels' on the left, the bars' (a count) above them
        f'<text x="{label_width - gap}" y="{head - 6}" text-anchor="end">'
        f"{_e(label_axis)}</text>"
        f'<text x="{label_width}" y="{head - 6}">'
        f"{_e(unit)} (share of all {_e(unit)})</text>",
    ]
    for i, (bucket, value) in enumerate(zip(buckets, values, strict=True)):
        y = head + i * row_height
        length = bar_width * bucket.count / largest if largest else 0.0
        length = max(length, 1.0) if bucket.count else 0.0  # a non-empty bucket stays visible
        parts.append(
            f'<text x="{label_width - gap}" y="{y + 15}" text-anchor="end">{_e(bucket.label)}'
            f'</text><rect x="{label_width}" y="{y + 3}" width="{length:.1f}" '
            f'height="{row_height - 6}" fill="#1f6feb"/>'
            f'<text x="{label_width + bar_width + gap}" y="{y + 15}">{_e(value)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


_AXIS_TOPS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0)


def axis_top(largest: float) -> float:
    """The smallest of 1%, 2%, 5%, 10%, 20%, 25%, 50%, 100% at or above `largest` (a share)."""
    return next((top for top in _AXIS_TOPS if largest <= top), 1.0)


def grouped_chart(
    title: str,
    groups: Sequence[tuple[str, Sequence[float]]],
    series: Sequence[tuple[str, str]],
    value_text: Callable[[float], str],
    *,
    x_label: str,
    y_label: str,
    top: float = 1.0,
) -> str:
    """Grouped vertical bars of shares (one unit, named by `y_label`): one group per (label,
    values), one bar per series, its value written above it; a y axis from 0 to `top`, the
    groups along x (named by `x_label`), a visible title and a legend.

    Bars, group labels and legend entries are spaced by the width of their text, and the
    viewBox is as wide as the widest of them: nothing is cut off however long the labels.
    """
    texts = [value_text(value) for _, values in groups for value in values]
    bar = max(40, math.ceil(max((text_width(t, _SMALL_FONT) for t in texts), default=0.0)) + 4)
    ticks = [top * k / 4 for k in range(5)]
    tick_texts = [f"{tick * 100:g}%" for tick in ticks]
    # the y axis's name runs up its left edge, rotated: one line of text height
    left = math.ceil(max(text_width(t) for t in tick_texts)) + 14 + FONT_SIZE + 8
    group_width = max(
        len(series) * (bar + 4) + 24,
        math.ceil(max((text_width(label) for label, _ in groups), default=0.0)) + 24,
    )
    head, plot_height = 44, 220
    legend = [(name, colour, math.ceil(text_width(name))) for name, colour in series]
    legend_width = sum(width + 18 + 24 for _, _, width in legend)
    width = left + max(
        group_width * len(groups),
        legend_width,
        math.ceil(text_width(x_label)),
        math.ceil(text_width(title)) - left,
    )
    width += 12
    height = head + plot_height + 84
    middle_y = head + plot_height / 2
    parts = [
        f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        _heading(title, width),
        f'<text x="{FONT_SIZE}" y="{middle_y:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 {FONT_SIZE} {middle_y:.1f})">{_e(y_label)}</text>',
        f'<text x="{left + (width - left) / 2:.1f}" y="{head + plot_height + 38}" '
        f'text-anchor="middle">{_e(x_label)}</text>',
    ]
    for tick, tick_text in zip(ticks, tick_texts, strict=True):
        y = head + plot_height * (1 - tick / top)
        parts.append(
            f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick_text}</text>'
        )
    for g, (label, values) in enumerate(groups):
        middle = left + g * group_width + group_width / 2
        bars_left = middle - (len(series) * (bar + 4) - 4) / 2
        for s, (value, (_name, colour)) in enumerate(zip(values, series, strict=True)):
            bar_height = plot_height * max(0.0, min(1.0, value / top))
            x = bars_left + s * (bar + 4)
            y = head + plot_height - bar_height
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar}" height="{bar_height:.1f}" '
                f'fill="{colour}"/>'
                f'<text x="{x + bar / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle" '
                f'style="font-size:{_SMALL_FONT}px">{_e(value_text(value))}</text>'
            )
        parts.append(
            f'<text x="{middle:.1f}" y="{head + plot_height + 18}" text-anchor="middle">'
            f"{_e(label)}</text>"
        )
    legend_y, x = head + plot_height + 66, left
    for name, colour, text_px in legend:
        parts.append(
            f'<rect x="{x}" y="{legend_y - 10}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{x + 18}" y="{legend_y}">{_e(name)}</text>'
        )
        x += text_px + 18 + 24
    parts.append("</svg>")
    return "".join(parts)

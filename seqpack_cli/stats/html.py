"""`seqpack stats --html`: one self-contained HTML file a person can open anywhere.

Inline CSS and inline SVG charts only: no script, no web font, no image or stylesheet fetched from
anywhere, so the file works offline and in mail attachments. Every string that comes from the
data (paths, column names) is escaped. The figures come from `seqpack_cli.stats.profile` (a
prepared directory) and `seqpack_cli.stats.sweep` (a `max_seq_len` sweep), the wording and number
formats from `seqpack_cli.stats.report`, so the page reads like the terminal report;
`seqpack_cli.stats.render` picks the page for a `StatsReport`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from seqpack_cli.errors import ConfigError
from seqpack_cli.stats.baselines import (
    NO_PACKING_DESCRIPTION,
    SEQUENTIAL_DESCRIPTION,
    BaselineStats,
)
from seqpack_cli.stats.distribution import Bucket
from seqpack_cli.stats.profile import PackingProfile
from seqpack_cli.stats.report import (
    efficiency_style,
    format_efficiency,
    format_percent,
    profile_figures,
    template_cells,
)
from seqpack_cli.stats.sweep import SweepResult

__all__ = ["render_profile_html", "render_sweep_html", "write_html_report"]

_SERIES = (("seqpack", "#1f6feb"), ("sequential", "#8c959f"), ("no packing", "#d0d7de"))

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #1f2328;
       padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { padding: .25em .8em; text-align: right; border-bottom: 1px solid #d0d7de; }
th { background: #f6f8fa; } td.l, th.l { text-align: left; }
.note { color: #57606a; font-size: .9em; max-width: 60em; }
.green { color: #2e7d32; font-weight: 600; } .yellow { color: #b7791f; font-weight: 600; }
.red { color: #c62828; font-weight: 600; }
svg { max-width: 100%; height: auto; }
svg text { font: 12px system-ui, sans-serif; fill: #1f2328; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _efficiency_cell(fraction: float) -> str:
    return f'<td class="{efficiency_style(fraction)}">{_e(format_efficiency(fraction))}</td>'


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 1) -> str:
    """Rows are pre-rendered cells (`<td>…</td>`); the first `left` columns align left."""
    head = "".join(
        f'<th class="l">{_e(h)}</th>' if i < left else f"<th>{_e(h)}</th>"
        for i, h in enumerate(headers)
    )
    body = "".join(f"<tr>{''.join(row)}</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _td(value: object, *, left: bool = False) -> str:
    return f'<td class="l">{_e(value)}</td>' if left else f"<td>{_e(value)}</td>"


def _svg_bars(buckets: Sequence[Bucket], unit: str, title: str) -> str:
    """Horizontal bar chart: one bar per bucket, scaled to the largest, labelled with its count."""
    row_height, label_width, bar_width, value_width = 22, 120, 520, 190
    width = label_width + bar_width + value_width
    height = row_height * max(1, len(buckets)) + 8
    total = sum(bucket.count for bucket in buckets)
    largest = max((bucket.count for bucket in buckets), default=0)
    parts = [
        f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f"<title>{_e(title)}</title>",
    ]
    for i, bucket in enumerate(buckets):
        y = 4 + i * row_height
        length = bar_width * bucket.count / largest if largest else 0.0
        length = max(length, 1.0) if bucket.count else 0.0  # a non-empty bucket stays visible
        share = bucket.count / total if total else 0.0
        parts.append(
            f'<text x="{label_width - 8}" y="{y + 15}" text-anchor="end">{_e(bucket.label)}</text>'
            f'<rect x="{label_width}" y="{y + 3}" width="{length:.1f}" height="{row_height - 6}" '
            f'fill="#1f6feb"/>'
            f'<text x="{label_width + bar_width + 8}" y="{y + 15}">'
            f"{_e(f'{bucket.count:,} {unit} ({format_percent(share)})')}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _svg_efficiency(rows: Sequence[tuple[int, float, float, float]]) -> str:
    """Grouped vertical bars: seqpack / sequential / no packing efficiency per max_seq_len."""
    group_width, bar, top, plot_height, left = 156, 40, 24, 220, 48
    width = left + group_width * len(rows) + 20
    height = top + plot_height + 60
    parts = [
        f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        "<title>Efficiency per max_seq_len</title>",
    ]
    for tick in (0, 25, 50, 75, 100):
        y = top + plot_height * (1 - tick / 100)
        parts.append(
            f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick}%</text>'
        )
    for g, (max_seq_len, *values) in enumerate(rows):
        x0 = left + g * group_width + 12
        for s, (fraction, (_name, colour)) in enumerate(zip(values, _SERIES, strict=True)):
            bar_height = plot_height * max(0.0, min(1.0, fraction))
            x = x0 + s * (bar + 4)
            y = top + plot_height - bar_height
            parts.append(
                f'<rect x="{x}" y="{y:.1f}" width="{bar}" height="{bar_height:.1f}" '
                f'fill="{colour}"/>'
                f'<text x="{x + bar / 2}" y="{y - 4:.1f}" text-anchor="middle" font-size="10">'
                f"{_e(format_efficiency(fraction))}</text>"
            )
        parts.append(
            f'<text x="{x0 + (3 * bar + 8) / 2}" y="{top + plot_height + 18}" '
            f'text-anchor="middle">{max_seq_len:,}</text>'
        )
    legend_y = top + plot_height + 42
    for s, (name, colour) in enumerate(_SERIES):
        x = left + s * 130
        parts.append(
            f'<rect x="{x}" y="{legend_y - 10}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{x + 18}" y="{legend_y}">{_e(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _page(title: str, body: Sequence[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _baselines_note(sample_size: int) -> str:
    return (
        '<p class="note">Baselines, on the same sequences seqpack packs: '
        f"{_e(NO_PACKING_DESCRIPTION)}; "
        f"{_e(SEQUENTIAL_DESCRIPTION.format(sample_size=sample_size))}.</p>"
    )


def _baseline_row(baseline: BaselineStats, packed_bins: int) -> list[str]:
    saved = 1.0 - packed_bins / baseline.num_bins if baseline.num_bins else 0.0
    if baseline.method == "no_packing":
        name = "no packing"
    else:
        name = "sequential (estimate)" if baseline.estimated else "sequential"
    return [
        _td(name, left=True),
        _td(f"{baseline.num_bins:,}"),
        _efficiency_cell(baseline.efficiency),
        _td(f"{baseline.padding:,}"),
        _td(f"{baseline.avg_seqs_per_bin:.2f}"),
        _td(format_percent(saved)),
    ]


def render_profile_html(
    profile: PackingProfile,
    *,
    title: str,
    details: Sequence[tuple[str, str]] = (),
    sample_size: int,
) -> str:
    """The HTML report of one packing (a prepared directory)."""
    stats = profile.stats
    summary = [*profile_figures(profile, separator=", ").items(), *details]
    comparison = [
        [
            _td("seqpack", left=True),
            _td(f"{stats.num_bins:,}"),
            _efficiency_cell(stats.efficiency),
            _td(f"{stats.padding:,}"),
            _td(f"{stats.avg_seqs_per_bin:.2f}"),
            _td(""),
        ],
        _baseline_row(profile.sequential, stats.num_bins),
        _baseline_row(profile.no_packing, stats.num_bins),
    ]
    templates = []
    for template, count in profile.top_templates:
        *numbers, lengths = template_cells(profile, template, count, max_parts=16)
        templates.append([*map(_td, numbers), _td(lengths, left=True)])
    body = [
        f"<h1>{_e(title)}</h1>",
        _table(
            ["figure", "value"],
            [[_td(k, left=True), _td(v, left=True)] for k, v in summary],
            left=2,
        ),
        "<h2>Against packing without seqpack</h2>",
        _table(
            ["method", "bins", "efficiency", "padding tokens", "seqs/bin", "seqpack saves"],
            comparison,
        ),
        _baselines_note(sample_size),
        "<h2>Sequence lengths</h2>",
        _svg_bars(profile.length_buckets, "sequences", "Sequences per length range"),
        "<h2>Bin fullness</h2>",
        _svg_bars(profile.fullness_buckets, "bins", "Bins per fullness range"),
        "<h2>Sequences per bin</h2>",
        _svg_bars(profile.seqs_per_bin_buckets, "bins", "Bins per number of sequences"),
        f"<h2>Most common templates (top {len(profile.top_templates)} of "
        f"{profile.num_templates:,})</h2>",
        _table(["bins", "share", "fill", "template (lengths)"], templates, left=0),
    ]
    return _page(title, body)


def render_sweep_html(result: SweepResult, *, title: str) -> str:
    """The HTML report of a `max_seq_len` sweep."""
    lengths = result.lengths
    rows = []
    for row in result.rows:
        over_share = row.num_over_cap / lengths.num_sequences
        rows.append(
            [
                _td(f"{row.max_seq_len:,}", left=True),
                _td(f"{row.num_over_cap:,} ({format_percent(over_share, 2)})"),
                _td(f"{row.packed.num_bins:,}"),
                _efficiency_cell(row.packed.efficiency),
                _td(f"{row.packed.avg_seqs_per_bin:.2f}"),
                _td(format_percent(row.packed.bin_fullness_p50)),
                _td(f"{row.sequential.num_bins:,}" + (" *" if row.sequential.estimated else "")),
                _efficiency_cell(row.sequential.efficiency),
                _efficiency_cell(row.no_packing.efficiency),
                _td(format_percent(row.bins_saved_vs_sequential)),
            ]
        )
    body = [
        f"<h1>{_e(title)}</h1>",
        f"<p>{lengths.num_sequences:,} sequences, {lengths.num_tokens:,} tokens; length min "
        f"{lengths.min_length:,}, p50 {lengths.p50_length:,}, p90 {lengths.p90_length:,}, "
        f"p99 {lengths.p99_length:,}, max {lengths.max_length:,}, "
        f"mean {lengths.mean_length:,.1f}.</p>",
        "<h2>Per max_seq_len</h2>",
        _table(
            [
                "max_seq_len",
                "over cap (dropped)",
                "seqpack bins",
                "seqpack efficiency",
                "seqs/bin",
                "fullness p50",
                "sequential bins",
                "sequential efficiency",
                "no packing efficiency",
                "rows saved vs sequential",
            ],
            rows,
        ),
        _baselines_note(result.sample_size)
        + (
            '<p class="note">* estimated on a sample.</p>'
            if any(row.sequential.estimated for row in result.rows)
            else ""
        ),
        "<h2>Efficiency (tokens / capacity)</h2>",
        _svg_efficiency(
            [
                (
                    row.max_seq_len,
                    row.packed.efficiency,
                    row.sequential.efficiency,
                    row.no_packing.efficiency,
                )
                for row in result.rows
            ]
        ),
        "<h2>Sequence lengths</h2>",
        _svg_bars(result.length_buckets, "sequences", "Sequences per length range"),
    ]
    return _page(title, body)


def write_html_report(path: str | Path, document: str) -> Path:
    """Write the report; an unwritable path is a `ConfigError` naming `--html`."""
    target = Path(path)
    try:
        target.write_text(document, encoding="utf-8")
    except OSError as error:
        raise ConfigError(
            f"--html {str(path)!r}: cannot write the report ({error.strerror or error}); "
            "give a path in an existing, writable directory"
        ) from error
    return target

"""`seqpack stats --html`: one self-contained HTML file a person can open anywhere.

Inline CSS and inline SVG charts only: no script, no web font, no image or stylesheet fetched from
anywhere, so the file works offline and in mail attachments. Every string that comes from the
data (paths, column names) is escaped. The figures come from `seqpack_cli.stats.profile` (a
prepared directory) and `seqpack_cli.stats.sweep` (a `max_seq_len` sweep), the wording and number
formats from `seqpack_cli.stats.render.terminal`, so the page reads like the terminal report;
`seqpack_cli.stats.render` picks the page for a `StatsReport`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from seqpack_cli.errors import ConfigError
from seqpack_cli.stats.baselines import (
    NO_PACKING_DESCRIPTION,
    BaselineStats,
    sequential_description,
)
from seqpack_cli.stats.profile import PackingProfile
from seqpack_cli.stats.rank_balance import PlanBalance, RankBalanceOptions
from seqpack_cli.stats.render.rank_balance import (
    RANK_BALANCE_HEADERS,
    RANK_BALANCE_TITLE,
    rank_balance_keys,
    rank_balance_note,
    rank_balance_rows,
)
from seqpack_cli.stats.render.svg import axis_top, bar_chart, grouped_chart
from seqpack_cli.stats.render.terminal import (
    BINS_SAVED,
    BINS_SAVED_NOTE,
    cap_text,
    efficiency_style,
    format_efficiency,
    format_percent,
    lengths_text,
    profile_figures,
    template_cells,
)
from seqpack_cli.stats.render.terminal_sweep import PACKER_NOTE, one_per_max_seq_len
from seqpack_cli.stats.sweep import SweepResult, SweepRow

__all__ = [
    "rank_balance_html",
    "render_profile_html",
    "render_sweep_html",
    "write_html_report",
]

_SERIES = (("seqpack", "#1f6feb"), ("sequential", "#8c959f"), ("no packing", "#d0d7de"))
_COST_SERIES = (("tokens lost if dropped", "#c62828"), ("tokens cut if truncated", "#f0883e"))

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #1f2328;
       padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { padding: .25em .8em; text-align: right; border-bottom: 1px solid #d0d7de; }
th { background: #f6f8fa; } td.l, th.l { text-align: left; }
.note { color: #57606a; font-size: .9em; max-width: 60em; }
td.eff { font-weight: 600; }
.wide { overflow-x: auto; }
svg { max-width: 100%; height: auto; }
svg text { font: 12px system-ui, sans-serif; fill: #1f2328; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _efficiency_cell(fraction: float) -> str:
    # the colour is continuous in the efficiency (`efficiency_style`), hence inline
    colour = efficiency_style(fraction)
    return f'<td class="eff" style="color:{colour}">{_e(format_efficiency(fraction))}</td>'


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 1) -> str:
    """Rows are pre-rendered cells (`<td>…</td>`); the first `left` columns align left."""
    head = "".join(
        f'<th class="l">{_e(h)}</th>' if i < left else f"<th>{_e(h)}</th>"
        for i, h in enumerate(headers)
    )
    body = "".join(f"<tr>{''.join(row)}</tr>" for row in rows)
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="wide">{table}</div>'  # scrolls sideways, never cut off


def _td(value: object, *, left: bool = False) -> str:
    return f'<td class="l">{_e(value)}</td>' if left else f"<td>{_e(value)}</td>"


def _row_label(row: SweepRow, capped: bool) -> str:
    """A sweep row's name on a chart axis: `4,096`, or `4,096, cap 8` where caps are compared."""
    name = f"{row.max_seq_len:,}"
    return f"{name}, cap {cap_text(row.max_seqs_per_bin)}" if capped else name


def _svg_efficiency(result: SweepResult) -> str:
    """Grouped vertical bars: seqpack / sequential / no packing efficiency per row."""
    capped = result.is_capped
    groups = [
        (
            _row_label(row, capped),
            (row.packed.efficiency, row.sequential.efficiency, row.no_packing.efficiency),
        )
        for row in result.rows
    ]
    return grouped_chart(
        "Efficiency per max_seq_len" + (" and cap" if capped else ""),
        groups,
        _SERIES,
        format_efficiency,
        x_label="max_seq_len" + (", cap (max sequences per bin)" if capped else ""),
        y_label="efficiency (tokens / capacity)",
    )


def _svg_cap_costs(result: SweepResult) -> str:
    """Grouped bars per max_seq_len: the shares of all tokens it costs (one unit: tokens; the
    share of sequences over it is in the table above)."""
    groups = [
        (
            f"{row.max_seq_len:,}",
            (row.cost.share_tokens_over_cap, row.cost.share_tokens_truncated),
        )
        for row in one_per_max_seq_len(result)
    ]
    largest = max(value for _, values in groups for value in values)
    return grouped_chart(
        "Tokens each max_seq_len costs, as a share of all tokens",
        groups,
        _COST_SERIES,
        lambda value: format_percent(value, 2),
        x_label="max_seq_len",
        y_label="share of all tokens",
        top=axis_top(largest),
    )


def _page(title: str, body: Sequence[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _baselines_note(
    sample_size: int, max_seqs_per_bin: int | None, *, several_caps: bool = False
) -> str:
    sequential = sequential_description(sample_size, max_seqs_per_bin, several_caps=several_caps)
    return (
        '<p class="note">Baselines, on the same sequences seqpack packs, under the same cap: '
        f"{_e(NO_PACKING_DESCRIPTION)}; {_e(sequential)}. {BINS_SAVED_NOTE}</p>"
    )


def _baseline_row(baseline: BaselineStats, packed_bins: int) -> list[str]:
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
        _td(format_percent(baseline.bins_saved_by(packed_bins))),
    ]


def rank_balance_html(plans: Sequence[PlanBalance], options: RankBalanceOptions) -> list[str]:
    """The rank balance section (`seqpack stats --world-size`): the terminal's table."""
    with_length, with_cap = rank_balance_keys(plans)
    keys = ["max_seq_len"] * with_length + ["cap"] * with_cap
    rows = [[_td(cell) for cell in cells] for cells, _ in rank_balance_rows(plans)]
    return [
        f"<h2>{_e(RANK_BALANCE_TITLE)}</h2>",
        _table([*keys, *RANK_BALANCE_HEADERS], rows, left=0),
        f'<p class="note">{_e(rank_balance_note(options))}</p>',
    ]


def render_profile_html(
    profile: PackingProfile,
    *,
    title: str,
    details: Sequence[tuple[str, str]] = (),
    sample_size: int,
    sections: Sequence[str] = (),
) -> str:
    """The HTML report of one packing (a prepared directory); `sections` (HTML) go at its end."""
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
            ["method", "bins", "efficiency", "padding tokens", "seqs/bin", BINS_SAVED],
            comparison,
        ),
        _baselines_note(sample_size, profile.max_seqs_per_bin),
        "<h2>Sequence lengths</h2>",
        bar_chart(
            profile.length_buckets,
            "sequences",
            "Sequences per length range",
            label_axis="length (tokens)",
        ),
        "<h2>Bin fullness</h2>",
        bar_chart(
            profile.fullness_buckets,
            "bins",
            "Bins per fullness range",
            label_axis="filled (of max_seq_len)",
        ),
        "<h2>Sequences per bin</h2>",
        f"<p>At most {profile.stats.max_seqs_in_bin:,} in a bin (cap: "
        f"{_e(cap_text(profile.max_seqs_per_bin))}).</p>",
        bar_chart(
            profile.seqs_per_bin_buckets,
            "bins",
            "Bins per number of sequences they hold",
            label_axis="sequences in the bin",
        ),
        f"<h2>Most common templates (top {len(profile.top_templates)} of "
        f"{profile.num_templates:,})</h2>",
        _table(["bins", "share", "fill", "template (lengths)"], templates, left=0),
        *sections,
    ]
    return _page(title, body)


def _count_and_share(count: int, share: float, digits: int = 1) -> str:
    return _td(f"{count:,} ({format_percent(share, digits)})")


def _cap_cost_rows(result: SweepResult) -> list[list[str]]:
    rows = []
    for row in one_per_max_seq_len(result):
        cost = row.cost
        rows.append(
            [
                _td(f"{row.max_seq_len:,}", left=True),
                _count_and_share(cost.num_over_cap, cost.share_over_cap, 2),
                _count_and_share(cost.num_tokens_over_cap, cost.share_tokens_over_cap),
                _count_and_share(cost.num_tokens_truncated, cost.share_tokens_truncated),
                _td(format_percent(cost.attention_vs_padded, 2)),
            ]
        )
    return rows


_CAP_COST_NOTE = (
    '<p class="note">Sequences longer than max_seq_len are dropped from every packing below; '
    "the tokens lost if they are dropped, or cut if they are truncated to max_seq_len, are "
    "shown as counts and as a share of all tokens. Attention vs padded: the attention FLOPs of "
    "the packed rows, each sequence attending only within itself (the sum of length², as a "
    "varlen kernel computes it; the same for any packing of them), over those of one sequence "
    "per row padded to max_seq_len with dense attention (rows × max_seq_len²).</p>"
)


def _row_key(row: SweepRow, capped: bool) -> list[str]:
    """The cells that name a sweep row: its max_seq_len, and its cap where caps are compared."""
    key = [_td(f"{row.max_seq_len:,}", left=True)]
    if capped:
        key.append(_td(cap_text(row.max_seqs_per_bin), left=True))
    return key


def _packing_rows(result: SweepResult) -> list[list[str]]:
    capped = result.is_capped
    rows = []
    for row in result.rows:
        rows.append(
            [
                *_row_key(row, capped),
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
    return rows


def _per_bin_section(result: SweepResult) -> list[str]:
    """Per max_seq_len (and cap): seqpack's bins (against no cap where caps are compared),
    efficiency, sequences per bin (the largest and a chart of their spread) and attention per
    bin: what choosing a cap trades."""
    capped = result.is_capped
    rows = []
    for row in result.rows:
        rows.append(
            [
                *_row_key(row, capped),
                _td(f"{row.packed.num_bins:,}"),
                *([_td(f"{row.bins_vs_uncapped:+.2%}")] if capped else []),
                _efficiency_cell(row.packed.efficiency),
                _td(f"{row.packed.max_seqs_in_bin:,}"),
                _td(format_percent(row.attention_per_bin_vs_dense)),
                _td(format_percent(row.attention_max_bin_vs_dense)),
            ]
        )
    charts = [
        bar_chart(
            row.seqs_per_bin,
            "bins",
            f"Bins per number of sequences at max_seq_len {row.max_seq_len:,}"
            + (f", cap {cap_text(row.max_seqs_per_bin)}" if capped else ""),
            label_axis="sequences in the bin",
        )
        for row in result.rows
    ]
    heading = "Per cap (max sequences per bin)" if capped else "Per max_seq_len"
    return [
        f"<h2>{heading}: seqpack's bins, sequences and attention per bin</h2>",
        _table(
            [
                "max_seq_len",
                *(["cap"] if capped else []),
                "seqpack bins",
                *(["bins vs no cap"] if capped else []),
                "efficiency",
                "max seqs in a bin",
                "attention per bin, mean (of max_seq_len²)",
                "attention per bin, max (of max_seq_len²)",
            ],
            rows,
            left=2 if capped else 1,
        ),
        '<p class="note">'
        + (
            "Bins vs no cap: seqpack's bins over its bins with no cap at the same max_seq_len. "
            if capped
            else ""
        )
        + "Attention per bin: the sum of length² over the bin's sequences (what a varlen kernel "
        "computes), over max_seq_len² (a dense row); the total is the same at every cap, so a "
        "lower cap spreads it over more bins.</p>",
        *charts,
    ]


def render_sweep_html(
    result: SweepResult, *, title: str, left_out: str = "", sections: Sequence[str] = ()
) -> str:
    """The HTML report of a `max_seq_len` sweep (`left_out`: a paragraph on what prepare left
    out, for a prepared directory's lengths; `sections`: HTML that goes at its end)."""
    capped = result.is_capped
    caps = ", ".join(cap_text(cap) for cap in result.max_seqs_per_bin)
    body = [
        f"<h1>{_e(title)}</h1>",
        f"<p>{lengths_text(result.lengths)}.</p>",
        *(
            [f"<p>Cap (max sequences per bin): {_e(caps)}, for seqpack and both baselines.</p>"]
            if capped
            else []
        ),
        left_out,
        "<h2>What each max_seq_len costs (sequences longer than it)</h2>",
        _table(
            [
                "max_seq_len",
                "sequences longer",
                "tokens lost if dropped",
                "tokens cut if truncated",
                "attention vs padded",
            ],
            _cap_cost_rows(result),
        ),
        _CAP_COST_NOTE,
        _svg_cap_costs(result),
        "<h2>Per max_seq_len"
        + (" and cap" if capped else "")
        + ": the sequences that fit, packed</h2>",
        _table(
            [
                "max_seq_len",
                *(["cap"] if capped else []),
                "seqpack bins",
                "seqpack efficiency",
                "seqs/bin",
                "fullness p50",
                "sequential bins",
                "sequential efficiency",
                "no packing efficiency",
                f"{BINS_SAVED} vs sequential",
            ],
            _packing_rows(result),
            left=2 if capped else 1,
        ),
        _baselines_note(
            result.sample_size,
            result.max_seqs_per_bin[0],
            several_caps=len(result.max_seqs_per_bin) > 1,
        )
        + f'<p class="note">seqpack\'s packings: {_e(PACKER_NOTE)}.</p>'
        + (
            '<p class="note">* estimated on a sample.</p>'
            if any(row.sequential.estimated for row in result.rows)
            else ""
        ),
        *_per_bin_section(result),
        "<h2>Efficiency (tokens / capacity)</h2>",
        _svg_efficiency(result),
        "<h2>Sequence lengths</h2>",
        bar_chart(
            result.length_buckets,
            "sequences",
            "Sequences per length range",
            label_axis="length (tokens)",
        ),
        *sections,
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

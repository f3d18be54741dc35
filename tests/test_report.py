"""Rendering of `seqpack stats`: the terminal report (rich) and the standalone HTML report."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from seqpack_cli.errors import ConfigError
from seqpack_cli.stats.profile import PackingProfile, profile_packing
from seqpack_cli.stats.render.html import render_profile_html, render_sweep_html, write_html_report
from seqpack_cli.stats.render.svg import text_width
from seqpack_cli.stats.render.terminal import (
    efficiency_style,
    format_efficiency,
    format_padding,
    format_percent,
    format_template,
    render_profile,
    text_bar,
)
from seqpack_cli.stats.render.terminal_sweep import render_sweep
from seqpack_cli.stats.sweep import SweepResult, sweep_max_seq_len

# 6 bins at max_seq_len 10: (5,5) x3 full, (7,) x2, (4,3,2) x1
TEMPLATES = Counter({(5, 5): 3, (7,): 2, (4, 3, 2): 1})
COUNTS = {5: 6, 7: 2, 4: 1, 3: 1, 2: 1}


@pytest.fixture
def profile() -> PackingProfile:
    return profile_packing(COUNTS, TEMPLATES, 10, sample_size=100)


@pytest.fixture
def sweep() -> SweepResult:
    return sweep_max_seq_len({3: 2, 5: 3, 7: 1, 12: 1}, [6, 10, 16], sample_size=100)


def _render(draw, width: int = 160) -> str:  # type: ignore[no-untyped-def]
    console = Console(file=io.StringIO(), width=width, color_system=None)
    draw(console)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_format_template_runs() -> None:
    assert format_template((512, 512, 256, 7)) == "512×2 + 256 + 7"
    assert format_template((9,)) == "9"
    assert format_template(tuple(range(20, 0, -1)), max_parts=3) == "20 + 19 + 18 + … (17 more)"


def test_text_bar_and_percent() -> None:
    assert text_bar(1.0, 4) == "████"
    assert text_bar(0.0, 4) == "    "
    assert text_bar(0.5, 4) == "██  "
    assert text_bar(1 / 32, 4) == "▏   "  # one eighth of one character
    assert len(text_bar(0.37)) == len(text_bar(1.0))
    assert format_percent(0.98765) == "98.8%"
    assert format_percent(0.98766, 2) == "98.77%"
    # efficiency rounds down and padding up, so 100.00% / 0.00% mean exactly no padding
    assert format_efficiency(0.99999) == "99.99%" and format_efficiency(1.0) == "100.00%"
    assert format_padding(0.00001) == "0.01%" and format_padding(0.0) == "0.00%"
    # green from 95%, amber at 85%, red to 50%
    assert [efficiency_style(x) for x in (0.99, 0.85, 0.5)] == ["#2e7d32", "#b7791f", "#c62828"]


def _rgb(colour: str) -> tuple[int, int, int]:
    assert re.fullmatch(r"#[0-9a-f]{6}", colour), colour
    return (int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16))


def test_efficiency_colours_are_continuous() -> None:
    # The demo's sequential baseline at 84.84% was red and a 85.17% next to it yellow: the
    # colour jumped at a threshold between two figures a person reads as the same.
    close = [_rgb(efficiency_style(x)) for x in (0.8484, 0.8517)]
    assert max(abs(a - b) for a, b in zip(*close, strict=True)) <= 8


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_efficiency_colour_moves_no_faster_than_the_efficiency(a: float, b: float) -> None:
    # Lipschitz: the steepest stretch (85% -> 95%) moves a channel by at most 0x89 per 10%.
    distance = max(
        abs(x - y)
        for x, y in zip(_rgb(efficiency_style(a)), _rgb(efficiency_style(b)), strict=True)
    )
    assert distance <= 1370 * abs(a - b) + 1


def test_profile_terminal_report(profile: PackingProfile) -> None:
    out = _render(
        lambda console: render_profile(
            console, profile, title="prepared/", details=[("inputs", "a.parquet")], sample_size=100
        )
    )
    stats = profile.stats
    assert "prepared/" in out and "a.parquet" in out
    assert format_efficiency(stats.efficiency) in out
    assert f"{stats.num_bins:,}" in out
    for heading in ("Sequence lengths", "Bin fullness", "Sequences per bin", "Most common"):
        assert heading in out
    assert "5×2" in out  # the most common template, run-length written
    assert "sequential" in out and "no packing" in out
    assert "█" in out


def test_sweep_terminal_report(sweep: SweepResult) -> None:
    out = _render(lambda console: render_sweep(console, sweep, title="sweep of x.parquet"))
    assert "sweep of x.parquet" in out
    for row in sweep.rows:
        assert f"{row.max_seq_len:,}" in out
        assert format_efficiency(row.packed.efficiency) in out
        assert format_efficiency(row.no_packing.efficiency) in out
    # at 6: two of the 7 sequences over the cap, 19 of the 40 tokens lost if they are dropped,
    # 7 cut if truncated; attention 93 query-key pairs against 5 padded rows of 36
    lines = out.splitlines()
    at6 = next(i for i, line in enumerate(lines) if line.split()[:1] == ["6"])
    assert lines[at6].split() == ["6", "2", "19", "7", "51.67%"]
    assert lines[at6 + 1].split() == ["28.57%", "47.5%", "17.5%"]
    assert "next-fit" in out  # the baseline is explained under the table
    assert "attention vs padded" in " ".join(out.split()) and "length²" in out
    # the three packings of the sequences that fit, one line each
    # at 10: seqpack's 3 bins against no packing's 6 (28 tokens in 60)
    words = [line.split() for line in lines]
    assert ["10", "seqpack", "3", "2.00", "93.33%"] in words
    assert ["no", "packing", "6", "1.00", "46.66%", "50.0%"] in words


def test_reports_give_the_engines_lower_bound() -> None:
    # {600: 10, 10: 1} at max_seq_len 1000: no two 600s share a bin, so 10 bins are optimal,
    # though the 6,010 tokens would fit 7 by volume. Both reports used to say "lower bound 7".
    profile = profile_packing(
        {600: 10, 10: 1}, Counter({(600,): 9, (600, 10): 1}), 1000, sample_size=100
    )
    out = _render(
        lambda console: render_profile(console, profile, title="prepared/", sample_size=100)
    )
    assert "10 (lower bound 10, +0.00%)" in out and "lower bound 7" not in out
    document = render_profile_html(profile, title="prepared/", details=[], sample_size=100)
    assert "10 (lower bound 10)" in document and "lower bound 7" not in document


class _Checker(HTMLParser):
    """Collects tags and checks that every non-void element is closed in order."""

    VOID: ClassVar[set[str]] = {"meta", "br", "rect", "line", "img", "input", "link"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: Counter[str] = Counter()
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        self.attrs += attrs
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        self.attrs += attrs

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
        self.stack.pop()


def assert_standalone_html(document: str) -> _Checker:
    """Valid, balanced, self-contained: inline SVG, no script, nothing fetched from anywhere."""
    assert document.startswith("<!DOCTYPE html>")
    checker = _Checker()
    checker.feed(document)
    checker.close()
    assert checker.stack == []
    assert checker.tags["html"] == checker.tags["head"] == checker.tags["body"] == 1
    assert checker.tags["svg"] >= 1 and "<svg" in document
    assert checker.tags["script"] == 0 and checker.tags["link"] == 0 and checker.tags["img"] == 0
    assert "http" not in document.lower()
    assert not [name for name, _ in checker.attrs if name in {"src", "href"}]
    assert not re.search(r"url\(|@import", document)
    return checker


def test_profile_html_is_standalone(profile: PackingProfile) -> None:
    document = render_profile_html(
        profile,
        title="<script>alert(1)</script>",
        details=[("inputs", "a&b.parquet")],
        sample_size=9,
    )
    assert_standalone_html(document)
    assert "&lt;script&gt;" in document and "a&amp;b.parquet" in document  # data is escaped
    assert format_efficiency(profile.stats.efficiency) in document
    assert document.count("<svg") == 3  # lengths, fullness, sequences per bin
    assert "5×2" in document


def test_sweep_html_is_standalone(sweep: SweepResult) -> None:
    document = render_sweep_html(sweep, title="sweep")
    assert_standalone_html(document)
    # cap costs, sequences per bin at each max_seq_len, efficiency per max_seq_len, lengths
    assert document.count("<svg") == 3 + len(sweep.rows)
    for row in sweep.rows:
        assert format_efficiency(row.packed.efficiency) in document
    assert "next-fit" in document
    # what each max_seq_len costs: at 6, 2 sequences (28.57%), 19 tokens lost (47.5%), 7 cut
    assert "<td>2 (28.57%)</td><td>19 (47.5%)</td><td>7 (17.5%)</td><td>51.67%</td>" in document
    assert "tokens cut if truncated" in document


def test_write_html_report(tmp_path: Path) -> None:
    target = write_html_report(tmp_path / "r.html", "<!DOCTYPE html>")
    assert target.read_text(encoding="utf-8") == "<!DOCTYPE html>"
    with pytest.raises(ConfigError, match="--html"):
        write_html_report(tmp_path / "missing" / "r.html", "x")


# ---- readable at 80 columns, and nothing clipped in the HTML charts ------------------------


@pytest.fixture(scope="module")
def billion_histogram() -> dict[int, int]:
    # 1e9 sequences, lognormal lengths up to ~100k: tokens in the 1e12s, bins in the 1e8s.
    rng = np.random.default_rng(0)
    lengths = np.maximum(1, rng.lognormal(6.5, 1.0, 100_000)).astype(np.int64)
    values, counts = np.unique(lengths, return_counts=True)
    return dict(zip(values.tolist(), (counts * 10_000).tolist(), strict=True))


@pytest.fixture(scope="module")
def billion_sweep(billion_histogram: dict[int, int]) -> SweepResult:
    # The sequential baseline estimated (marked *).
    return sweep_max_seq_len(billion_histogram, [1024, 2048, 8192, 131072], sample_size=10_000)


@pytest.fixture(scope="module")
def capped_billion(billion_histogram: dict[int, int]) -> SweepResult:
    # The same 1e9 sequences with caps compared: the cap and key columns still fit 80 columns.
    return sweep_max_seq_len(
        billion_histogram, [1024, 131072], max_seqs_per_bin=[2, None], sample_size=10_000
    )


def _assert_fits(out: str, width: int) -> list[str]:
    lines = out.splitlines()
    too_wide = [line for line in lines if cell_len(line) > width]
    assert not too_wide, too_wide
    assert "…" not in out  # rich's ellipsis: no cell cut short
    return lines


def _sweep_cells(result: SweepResult) -> list[str]:
    """Every figure of the sweep's two tables, as printed."""
    cells = []
    for row in result.rows:
        cost = row.cost
        cells += [
            f"{count:,}"
            for count in (
                row.max_seq_len,
                cost.num_over_cap,
                cost.num_tokens_over_cap,
                cost.num_tokens_truncated,
                row.packed.num_bins,
                row.no_packing.num_bins,
            )
        ]
        cells += [
            format_percent(cost.share_over_cap, 2),
            format_percent(cost.share_tokens_over_cap),
            format_percent(cost.share_tokens_truncated),
            format_percent(cost.attention_vs_padded, 2),
            f"{row.sequential.num_bins:,}" + ("*" if row.sequential.estimated else ""),
            format_efficiency(row.packed.efficiency),
            format_efficiency(row.sequential.efficiency),
            format_efficiency(row.no_packing.efficiency),
        ]
    return cells


@pytest.mark.parametrize("name", ["sweep", "billion_sweep", "capped_sweep", "capped_billion"])
def test_sweep_report_reads_at_80_columns(name: str, request: pytest.FixtureRequest) -> None:
    result: SweepResult = request.getfixturevalue(name)
    out = _render(lambda console: render_sweep(console, result, title="sweep"), width=80)
    lines = _assert_fits(out, 80)
    words = {word for line in lines for word in line.split()}
    for cell in _sweep_cells(result):
        assert cell in words, cell  # whole, on one line: not folded, not cut
    if name == "billion_sweep":
        assert result.rows[0].cost.num_sequences == 10**9
        assert any(row.sequential.estimated for row in result.rows)


def test_profile_report_reads_at_80_columns(profile: PackingProfile) -> None:
    details = [("inputs", "12 files, 20,000,000 rows"), ("packer", "batched")]
    out = _render(
        lambda console: render_profile(
            console, profile, title="prepared/", details=details, sample_size=100
        ),
        width=80,
    )
    lines = _assert_fits(out, 80)
    assert any(line.split()[:2] == ["inputs", "12"] for line in lines)
    assert format_efficiency(profile.stats.efficiency) in out


def test_lengths_past_int64_fold_instead_of_being_cut() -> None:
    # Absurd lengths (up to 2**64 - 1) do not fit 80 columns: they fold, never end in "…".
    result = sweep_max_seq_len({5: 2, 2**62: 2, 2**64 - 1: 1}, [8], sample_size=100)
    out = _render(lambda console: render_sweep(console, result, title="x"), width=80)
    _assert_fits(out, 80)
    digits = re.sub(r"[^0-9\n]", "", out)
    assert "18446744073" in digits.replace("\n", "")  # the longest length, folded but whole


# Advance widths (em) of DejaVu Sans, measured: wider than Arial, Helvetica, Segoe UI or SF
# (it is the sans-serif fallback on most Linux desktops), so text that fits with these fits
# anywhere. A character missing here fails the test: add it, measured.
_DEJAVU_EM = {
    **dict.fromkeys("0123456789", 0.636),
    **dict.fromkeys(",. ", 0.318),
    "–": 0.5, "(": 0.39, ")": 0.39, "%": 0.95, "*": 0.5, "a": 0.613, "b": 0.635,
    "c": 0.55, "d": 0.635, "e": 0.615, "f": 0.352, "g": 0.635, "h": 0.634, "i": 0.278,
    "j": 0.278, "k": 0.579, "l": 0.278, "m": 0.974, "n": 0.634, "o": 0.612, "p": 0.635,
    "q": 0.635, "r": 0.395, "s": 0.521, "t": 0.392, "u": 0.634, "v": 0.592, "w": 0.818,
    "x": 0.592, "y": 0.592, "z": 0.525, "_": 0.5, "/": 0.337,
    "A": 0.684, "B": 0.686, "C": 0.698, "D": 0.77, "E": 0.632, "F": 0.575, "G": 0.775,
    "H": 0.752, "I": 0.295, "J": 0.295, "K": 0.656, "L": 0.557, "M": 0.863, "N": 0.748,
    "O": 0.787, "P": 0.603, "Q": 0.787, "R": 0.695, "S": 0.635, "T": 0.611, "U": 0.732,
    "V": 0.684, "W": 0.989, "X": 0.685, "Y": 0.611, "Z": 0.685,
}  # fmt: skip


def _svg_texts(document: str) -> list[tuple[ET.Element, list[tuple[float, float, float, float]]]]:
    """Each <svg> of the page with the box (left, right, top, bottom) of each of its texts,
    from DejaVu Sans's widths."""
    charts = []
    for source in re.findall(r"<svg.*?</svg>", document, flags=re.S):
        svg = ET.fromstring(source)
        boxes = []
        for text in svg.iter("text"):
            content = text.text or ""
            size = 12.0
            if match := re.search(r"font-size:\s*([0-9.]+)px", text.get("style", "")):
                size = float(match.group(1))
            width = sum(_DEJAVU_EM[char] for char in content) * size
            x, y = float(text.get("x", "0")), float(text.get("y", "0"))
            left = {"end": x - width, "middle": x - width / 2}.get(text.get("text-anchor", ""), x)
            assert text_width(content, size) >= width, content  # the layout's estimate is wide
            if "rotate(-90" in text.get("transform", ""):
                # an axis name turned to run upwards about (x, y): its length runs along y, and
                # its glyphs rise to the left of x
                assert text.get("transform") == f"rotate(-90 {text.get('x')} {text.get('y')})"
                top_y = y - (left - x) - width
                boxes.append((x - size, x + 0.3 * size, top_y, top_y + width))
                continue
            boxes.append((left, left + width, y - size, y + 0.3 * size))
        charts.append((svg, boxes))
    return charts


def _assert_nothing_clipped(document: str) -> None:
    for svg, boxes in _svg_texts(document):
        _, _, width, height = (float(v) for v in svg.get("viewBox", "").split())
        assert float(svg.get("width", "0")) == width and float(svg.get("height", "0")) == height
        for left, right, top, bottom in boxes:
            assert left >= 0 and right <= width and top >= 0 and bottom <= height, (
                (left, right, top, bottom),
                (width, height),
            )


def test_html_labels_and_legends_fit_their_viewbox(
    billion_sweep: SweepResult, capped_billion: SweepResult
) -> None:
    # long length labels (up to 2**64 - 1), huge counts, long max_seq_len labels, with caps
    wide = sweep_max_seq_len({5: 2, 2**62: 2, 2**64 - 1: 10**12}, [8, 2**31 - 1], sample_size=9)
    for result in (wide, billion_sweep, capped_billion):
        document = render_sweep_html(result, title="sweep")
        assert_standalone_html(document)
        _assert_nothing_clipped(document)
    assert "18,446,744,073,709,551,615" in render_sweep_html(wide, title="x")
    profile = profile_packing(
        {3: 10**15, 2**31 - 1: 1}, Counter({(3,) * 7: 10**15 // 7}), 2**31 - 1, sample_size=9
    )
    _assert_nothing_clipped(render_profile_html(profile, title="p", sample_size=9))


def test_the_clipping_check_can_fail() -> None:
    # The same check on a chart with a fixed 120 px label column (the old layout) fails.
    label = "2,147,483,649–18,446,744,073,709,551,615"
    old = (
        '<svg role="img" width="830" height="30" viewBox="0 0 830 30">'
        f'<text x="112" y="19" text-anchor="end">{label}</text></svg>'
    )
    with pytest.raises(AssertionError):
        _assert_nothing_clipped(old)


# ---- the cap named, one word for bins saved, plurals, titled and labelled charts -------------


@pytest.fixture(scope="module")
def capped_sweep() -> SweepResult:
    return sweep_max_seq_len(
        {3: 2, 5: 3, 7: 1, 12: 1}, [10, 16], max_seqs_per_bin=[2, None], sample_size=100
    )


def test_terminal_and_html_name_the_cap(capped_sweep: SweepResult) -> None:
    out = _render(lambda console: render_sweep(console, capped_sweep, title="sweep"))
    assert "cap (max sequences per bin): 2, none, for seqpack and both baselines" in out
    words = [line.split() for line in out.splitlines()]
    # the packing table: a row per (max_seq_len, cap), the cap in its own column
    assert any(line[:3] == ["16", "2", "seqpack"] for line in words)
    assert any(line[:3] == ["16", "none", "seqpack"] for line in words)
    assert "Per cap (max sequences per bin)" in out
    assert "or the row holds its cap's number of sequences" in " ".join(out.split())
    document = render_sweep_html(capped_sweep, title="sweep")
    assert "Cap (max sequences per bin): 2, none, for seqpack and both baselines." in document
    assert "<th>cap</th>" in document.replace(' class="l"', "")
    assert "Bins per number of sequences at max_seq_len 16, cap 2" in document
    # a prepared directory's own cap
    capped = profile_packing(
        {1: 12}, Counter({(1,) * 4: 3}), 10, sample_size=10, max_seqs_per_bin=4
    )
    out = _render(lambda console: render_profile(console, capped, title="p", sample_size=10))
    assert "cap (max seqs per bin)  4, for seqpack and both baselines" in out
    assert "or the row holds 4" in " ".join(out.split())
    assert "or the row holds 4" in render_profile_html(capped, title="p", sample_size=10)


def test_one_word_for_bins_saved(
    profile: PackingProfile, sweep: SweepResult, capped_sweep: SweepResult
) -> None:
    documents = [
        _render(lambda console: render_profile(console, profile, title="p", sample_size=100)),
        render_profile_html(profile, title="p", sample_size=100),
    ]
    for result in (sweep, capped_sweep):
        documents.append(_render(lambda console, r=result: render_sweep(console, r, title="s")))
        documents.append(render_sweep_html(result, title="s"))
    for document in documents:
        text = " ".join(document.split())
        assert "bins saved" in text
        for other in ("seqpack saves", "rows saved", "of rows", "% of bins"):
            assert other not in text, other


def test_counts_take_the_right_plural() -> None:
    one = profile_packing({4: 1}, Counter({(4,): 1}), 10, sample_size=10)
    document = render_profile_html(one, title="p", sample_size=10)
    assert "1 bin (100.0%)" in document and "1 sequence (100.0%)" in document
    assert not re.search(r"\b1 (bins|sequences)\b", document)


def test_prepared_details_take_the_right_plural() -> None:
    from seqpack_cli.stats.render import prepared_details

    manifest = {"inputs": {"num_files": 1, "num_rows": 1}, "summary": {"num_dropped": 1}}
    details = dict(prepared_details(manifest, verified=False))
    assert details["inputs"] == "1 file, 1 row"
    assert details["dropped by prepare"].startswith("1 sequence (")


def test_every_chart_is_titled_with_named_axes(
    profile: PackingProfile, sweep: SweepResult, capped_sweep: SweepResult
) -> None:
    documents = [
        render_profile_html(profile, title="p", sample_size=100),
        render_sweep_html(sweep, title="s"),
        render_sweep_html(capped_sweep, title="s"),
    ]
    for document in documents:
        for source in re.findall(r"<svg.*?</svg>", document, flags=re.S):
            svg = ET.fromstring(source)
            title = svg.findtext("title")
            texts = [text.text or "" for text in svg.iter("text")]
            assert title and title in texts, title  # shown, not only the accessible name
            if "Efficiency" in title or "Tokens" in title:  # the grouped charts: both axes named
                rotated = [
                    t.text for t in svg.iter("text") if "rotate(-90" in t.get("transform", "")
                ]
                assert len(rotated) == 1, title
                assert any(text.startswith("max_seq_len") for text in texts), title
            else:  # the bar charts: the labels' axis, and the bars' unit
                assert any(text.endswith(")") and "share of all" in text for text in texts), title
    # one unit per axis: the cap-cost chart shows shares of tokens only (the share of
    # sequences over the cap used to share its axis)
    (costs,) = [
        source
        for source in re.findall(r"<svg.*?</svg>", documents[1], flags=re.S)
        if "Tokens each max_seq_len costs" in source
    ]
    assert "share of all tokens" in costs and "sequences over the cap" not in costs


def test_sweep_reports_name_their_packer(sweep: SweepResult) -> None:
    # the figures come from a lighter LP budget than prepare's: both reports say which
    out = " ".join(_render(lambda console: render_sweep(console, sweep, title="s")).split())
    assert "seqpack's packings: pack_length_histogram_batched(lp_effort=0.5)" in out
    assert "pack_length_histogram_batched(lp_effort=0.5)" in render_sweep_html(sweep, title="s")
    assert sweep.to_dict()["packer"] == "pack_length_histogram_batched(lp_effort=0.5)"


def test_sweeps_show_the_sequences_per_bin(sweep: SweepResult) -> None:
    # The largest number of sequences in a bin and their spread, at every max_seq_len, capped
    # or not: in the terminal (the largest, and a spark line of the even buckets) and in HTML
    # (a chart per row).
    out = _render(lambda console: render_sweep(console, sweep, title="s"))
    assert "Per max_seq_len: seqpack's bins, sequences and attention per bin" in " ".join(
        out.split()
    )
    words = [line.split() for line in out.splitlines()]
    for row in sweep.rows:
        bins, max_seqs = f"{row.packed.num_bins:,}", str(row.packed.max_seqs_in_bin)
        efficiency = format_efficiency(row.packed.efficiency)
        assert [f"{row.max_seq_len:,}", bins, efficiency, max_seqs, "mean"] in [
            line[:5] for line in words
        ]
    document = render_sweep_html(sweep, title="s")
    for row in sweep.rows:
        assert f"Bins per number of sequences at max_seq_len {row.max_seq_len:,}<" in document

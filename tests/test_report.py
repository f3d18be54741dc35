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
from rich.cells import cell_len
from rich.console import Console

from seqpack_cli.errors import ConfigError
from seqpack_cli.stats.html import render_profile_html, render_sweep_html, write_html_report
from seqpack_cli.stats.profile import PackingProfile, profile_packing
from seqpack_cli.stats.report import (
    efficiency_style,
    format_efficiency,
    format_padding,
    format_percent,
    format_template,
    render_profile,
    render_sweep,
    text_bar,
)
from seqpack_cli.stats.svg import text_width
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
    assert [efficiency_style(x) for x in (0.99, 0.9, 0.5)] == ["green", "yellow", "red"]


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
    assert ["no", "packing", "6", "1.00", "46.66%", "50.0%", "of", "bins"] in words


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
    assert document.count("<svg") == 3  # cap costs, efficiency per max_seq_len, lengths
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
def billion_sweep() -> SweepResult:
    # 1e9 sequences, lognormal lengths up to ~100k: tokens in the 1e12s, bins in the 1e8s,
    # and the sequential baseline estimated (marked *).
    rng = np.random.default_rng(0)
    lengths = np.maximum(1, rng.lognormal(6.5, 1.0, 100_000)).astype(np.int64)
    values, counts = np.unique(lengths, return_counts=True)
    histogram = dict(zip(values.tolist(), (counts * 10_000).tolist(), strict=True))
    return sweep_max_seq_len(histogram, [1024, 2048, 8192, 131072], sample_size=10_000)


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


@pytest.mark.parametrize("name", ["sweep", "billion_sweep"])
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
    "x": 0.592, "y": 0.592, "z": 0.525,
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


def test_html_labels_and_legends_fit_their_viewbox(billion_sweep: SweepResult) -> None:
    # long length labels (up to 2**64 - 1), huge counts, long max_seq_len labels
    wide = sweep_max_seq_len({5: 2, 2**62: 2, 2**64 - 1: 10**12}, [8, 2**31 - 1], sample_size=9)
    for result in (wide, billion_sweep):
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

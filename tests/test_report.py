"""Rendering of `seqpack stats`: the terminal report (rich) and the standalone HTML report."""

from __future__ import annotations

import io
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

import pytest
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


def _render(draw) -> str:  # type: ignore[no-untyped-def]
    console = Console(file=io.StringIO(), width=160, color_system=None)
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
    assert "2 (28.57%)" in out  # at 6 two of the 7 sequences are over the cap
    assert "next-fit" in out  # the baseline is explained under the table


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
    assert document.count("<svg") == 2  # efficiency per max_seq_len, lengths
    for row in sweep.rows:
        assert format_efficiency(row.packed.efficiency) in document
    assert "next-fit" in document


def test_write_html_report(tmp_path: Path) -> None:
    target = write_html_report(tmp_path / "r.html", "<!DOCTYPE html>")
    assert target.read_text(encoding="utf-8") == "<!DOCTYPE html>"
    with pytest.raises(ConfigError, match="--html"):
        write_html_report(tmp_path / "missing" / "r.html", "x")

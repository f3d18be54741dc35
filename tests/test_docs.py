"""The docs' examples run as written, their links resolve, and what they say about options is true.

The pages are README.md and docs/*.md. Every ```python block of a page runs as its own script,
and every ```console block's `$ `-lines run as shell commands, in order, in one scratch
directory per page: a page is a walk-through, so later blocks may use files that earlier ones
wrote. A block whose fence says `no-run` (```python no-run, ```text no-run) is shown but not run
(output samples, fragments); blocks of other languages (text, bash) never run.

Commands written in the prose (`seqpack ...` or `python -m seqpack_cli...` in backticks) are
checked too, on the command-line page's walk-through data: a complete command runs as written;
one that only names a command (`seqpack prepare --engine dask`) must name options that exist.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CLI_PAGE = DOCS / "cli.md"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


# An inline code span in the prose (markdown lets it wrap across lines).
INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
PROSE_COMMAND = re.compile(r"(seqpack|python -m seqpack_cli[.\w]*) ")
# A markdown link [text](target); images and autolinks are not used in the docs.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _name(page: Path) -> str:
    """The page's path from the repository root (as given where it lies outside)."""
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page.as_posix()


def _runnable_blocks(text: str) -> list[tuple[str, str]]:
    blocks = []
    for language, options, body in FENCE.findall(text):
        if "no-run" in options:
            continue
        if language == "python":
            blocks.append(("python", body))
        elif language == "console":
            commands = [line[2:] for line in body.splitlines() if line.startswith("$ ")]
            blocks.extend(("shell", command) for command in commands)
    return blocks


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run_block(kind: str, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-c", code] if kind == "python" else ["bash", "-c", code]
    return subprocess.run(
        args, cwd=cwd, env=_environment(), capture_output=True, text=True, timeout=300
    )


def test_the_pages_have_runnable_examples() -> None:
    assert _runnable_blocks(README.read_text()), "README.md has no runnable examples"
    runnable = {_name(page) for page in PAGES if _runnable_blocks(page.read_text())}
    assert {"docs/cli.md", "docs/library.md", "docs/training.md", "docs/format.md"} <= runnable


def test_no_run_marks_a_block_that_is_not_run() -> None:
    text = "```python\nprint(1)\n```\n```python no-run\nprint(2)\n```\n```text\n$ ls\n```\n"
    text += "```console\n$ seqpack --help\nUsage: ...\n```\n"
    assert _runnable_blocks(text) == [("python", "print(1)\n"), ("shell", "seqpack --help")]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    for number, (kind, code) in enumerate(_runnable_blocks(page.read_text()), start=1):
        result = _run_block(kind, code, tmp_path)
        assert result.returncode == 0, (
            f"{_name(page)} block {number} ({kind}) failed:\n{code}\n--- stdout\n{result.stdout}"
            f"\n--- stderr\n{result.stderr}"
        )


def _prose_commands(text: str) -> list[str]:
    """Commands in backticks outside the fenced blocks, each once, whitespace collapsed."""
    prose = FENCE.sub("", text)
    commands = (" ".join(span.split()) for span in INLINE.findall(prose))
    return list(dict.fromkeys(c for c in commands if PROSE_COMMAND.match(c)))


@pytest.mark.slow
def test_prose_commands_run(tmp_path: Path) -> None:
    # Reported: `python -m seqpack_cli.prepare --input data/part-0.parquet ... --max-seq-len
    # 2048` failed as written (the data has sequences over 2048 tokens: it needs --over-cap).
    for kind, code in _runnable_blocks(CLI_PAGE.read_text()):
        result = _run_block(kind, code, tmp_path)
        assert result.returncode == 0, (code, result.stderr)
    commands = list(dict.fromkeys(c for page in PAGES for c in _prose_commands(page.read_text())))
    assert any("--input" in command for command in commands), commands
    ran = []
    for command in commands:
        result = _run_block("shell", command, tmp_path)
        named_only = result.stderr.startswith("error: Missing ") or re.match(
            r"error: Option '--[\w-]+' requires an argument", result.stderr
        )
        if result.returncode == 2 and named_only:
            continue  # a command named, not written out: its options parsed (none unknown)
        assert result.returncode == 0, f"prose command failed: {command}\n{result.stderr}"
        ran.append(command)
    assert ran, f"no prose command ran as a whole: {commands}"


# ---- links between the pages -------------------------------------------------------------------


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    prose = FENCE.sub("", page.read_text())
    return {_anchor(line.lstrip("#")) for line in prose.splitlines() if line.startswith("#")}


def _broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto: ...: not checked (no network in the tests)
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and (linked.suffix != ".md" or anchor not in _anchors(linked)):
            broken.append(f"{target}: no heading #{anchor} in {_name(linked)}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_relative_links_resolve(page: Path) -> None:
    assert _broken_links(page) == []


def test_every_docs_page_is_linked_from_the_index() -> None:
    linked = {target.partition("#")[0] for target in LINK.findall((DOCS / "index.md").read_text())}
    pages = {page.name for page in DOCS.glob("*.md")} - {"index.md"}
    assert pages <= linked, sorted(pages - linked)


def test_the_link_check_finds_a_broken_link_and_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A page\n\n## Its `part`\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#its-part) [file](c.md) [anchor](a.md#nothing) [web](https://x.y)")
    assert _broken_links(page) == [
        f"c.md: no file {tmp_path / 'c.md'}",
        f"a.md#nothing: no heading #nothing in {tmp_path / 'a.md'}",
    ]


# ---- what the docs say about options is what they do ---------------------------------------------


def _section(page: Path, title: str) -> str:
    """The page's `## title` section, up to the next `## ` heading."""
    text = page.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : None if end < 0 else end]


@pytest.mark.parametrize("command", ["prepare", "stats"])
def test_every_option_is_in_the_cli_page(command: str) -> None:
    import typer

    from seqpack_cli.cli.app import app

    group = typer.main.get_command(app)
    options = [o for p in group.commands[command].params for o in p.opts if o.startswith("--")]
    section = _section(CLI_PAGE, f"`seqpack {command}`")
    missing = [o for o in options if not re.search(rf"`{re.escape(o)}(?![\w-])", section)]
    assert options and missing == [], f"docs/cli.md does not describe {missing}"


def _option_row(option: str) -> str:
    """The row of `seqpack prepare`'s option table that names `option`."""
    (row,) = [
        line
        for line in _section(CLI_PAGE, "`seqpack prepare`").splitlines()
        if line.startswith("| ") and option in line
    ]
    return row


def test_the_memory_limits_the_docs_give_are_accepted() -> None:
    # Reported: "--memory-limit ... (at least 16MB)", but 16MB is refused as under 16MiB.
    from seqpack_cli.errors import ConfigError
    from seqpack_cli.prepare.db import MIN_MEMORY_LIMIT, check_memory_limit

    row = _option_row("--memory-limit")
    minimum = re.search(r"at least (\w+)", row)
    assert minimum is not None, row
    values = [minimum.group(1), *re.findall(r"`(\d+(?:[KMGT]i?B|%))`", row)]
    values += re.findall(r"--memory-limit (\w+)", row)
    for value in values:
        assert check_memory_limit(value) == value
    assert minimum.group(1) == f"{MIN_MEMORY_LIMIT // 2**20}MiB"
    with pytest.raises(ConfigError, match="at least 16MiB"):
        check_memory_limit(f"{MIN_MEMORY_LIMIT - 1}B")


def test_the_label_dtypes_the_docs_give_are_those_stored(tmp_path: Path) -> None:
    # Reported: "--labels-column ... (int32, -100 allowed)", but labels beyond int32 make an int64
    # store (values kept).
    from conftest import write_parquet

    from seqpack_cli.prepare import PrepareConfig, prepare_dataset

    row = _option_row("--labels-column")
    for label, dtype in [(7, "int32"), (2**40, "int64")]:
        data = tmp_path / dtype
        tokens, labels = [[1, 2, 3], [4, 5]], [[-100, label, 3], [-100, 5]]
        write_parquet(data / "a.parquet", {"ids": tokens, "labels": labels, "n": [3, 2]})
        prepared = prepare_dataset(
            PrepareConfig(
                inputs=[data],
                length_column="n",
                max_seq_len=8,
                output=data / "out",
                tokens_column="ids",
                labels_column="labels",
            )
        )
        assert prepared.manifest["token_store"]["labels"]["dtype"] == dtype
        assert int(prepared.labels[0][1]) == label  # values kept
        assert dtype in row and "-100 allowed" in row, row


def test_the_order_inputs_are_named_in_makes_the_same_token_source(tmp_path: Path) -> None:
    # Reported: the README said a token source made from "the same files in another order" is an
    # InputError; inputs are sorted by path, so it is the same source, and it is accepted.
    from conftest import write_parquet

    from seqpack_cli.prepare import PrepareConfig, prepare_dataset
    from seqpack_cli.prepare.token_files import write_token_source

    a = write_parquet(tmp_path / "a.parquet", {"ids": [[1, 2], [3]], "n": [2, 1]})
    b = write_parquet(tmp_path / "b.parquet", {"ids": [[4, 5, 6]], "n": [3]})
    prepared = prepare_dataset(
        PrepareConfig(inputs=[a, b], length_column="n", max_seq_len=8, output=tmp_path / "p")
    )
    sources = [
        write_token_source(files, "ids", output=tmp_path / name, prepared=prepared)
        for name, files in [("ab", [a, b]), ("ba", [b, a])]
    ]
    assert [s[i].tolist() for s in sources for i in range(3)] == [[1, 2], [3], [4, 5, 6]] * 2
    text = " ".join((DOCS / "training.md").read_text().split())
    assert "the same files named in another order make the same source" in text


# ---- the benchmarks page is generated -----------------------------------------------------------


def test_the_benchmarks_page_is_the_output_of_run_all() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import run_all
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    text = (DOCS / "benchmarks.md").read_text()
    assert "<!-- GENERATED by benchmarks/run_all.py --write-docs" in text
    assert re.search(r"^- command: `python benchmarks/run_all\.py --write-docs", text, re.M)
    assert re.search(r"^- date: \d{4}-\d\d-\d\d \d\d:\d\d UTC", text, re.M)
    assert re.search(r"^- machine: .+ cores", text, re.M)
    sections = re.findall(r"^## `(bench_\w+\.py)", text, re.M)
    assert sections and set(sections) <= set(run_all.SCRIPTS), sections
    run = run_all.Run("bench_epoch.py", ["--quick"], "== a table\n1  2\n", 0, 1.5)
    from datetime import datetime, timezone

    page = run_all.render_page(
        [run],
        "python benchmarks/run_all.py --write-docs --only x",
        datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc),
        "a machine, 2 cores",
        full=False,
    )
    assert "- date: 2026-01-02 03:04 UTC" in page and "## `bench_epoch.py --quick`" in page
    assert "```text\n== a table\n1  2\n```" in page

"""The README's examples run as written.

Every ```python block of README.md runs as its own script, and every ```console block's
`$ `-lines run as shell commands, in order, in one scratch directory: the blocks of the
README are a walk-through, so later blocks may use files that earlier ones wrote. A block
whose fence says ```python no-run is shown but not run (output samples, fragments).

Commands written in the prose (`seqpack ...` or `python -m seqpack_cli...` in backticks) are
checked too, on the command-line section's walk-through data: a complete command runs as written;
one that only names a command (`seqpack prepare --engine dask`) must name options that exist.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


# An inline code span in the prose (markdown lets it wrap across lines).
INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
PROSE_COMMAND = re.compile(r"(seqpack|python -m seqpack_cli[.\w]*) ")


def _runnable_blocks(text: str | None = None) -> list[tuple[str, str]]:
    blocks = []
    for language, options, body in FENCE.findall(README.read_text() if text is None else text):
        if "no-run" in options:
            continue
        if language == "python":
            blocks.append(("python", body))
        elif language == "console":
            commands = [line[2:] for line in body.splitlines() if line.startswith("$ ")]
            blocks.extend(("shell", command) for command in commands)
    return blocks


@pytest.mark.slow
def test_readme_examples_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    blocks = _runnable_blocks()
    assert blocks, "README.md has no runnable examples"
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for number, (kind, code) in enumerate(blocks, start=1):
        args = [sys.executable, "-c", code] if kind == "python" else ["bash", "-c", code]
        result = subprocess.run(
            args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, (
            f"README block {number} ({kind}) failed:\n{code}\n--- stdout\n{result.stdout}"
            f"\n--- stderr\n{result.stderr}"
        )


def _section(title: str) -> str:
    """The README's `## title` section, up to the next `## ` heading."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : None if end < 0 else end]


def _prose_commands() -> list[str]:
    """Commands in backticks outside the fenced blocks, each once, whitespace collapsed."""
    prose = FENCE.sub("", README.read_text())
    commands = (" ".join(span.split()) for span in INLINE.findall(prose))
    return list(dict.fromkeys(c for c in commands if PROSE_COMMAND.match(c)))


def _run_shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_readme_prose_commands_run(tmp_path: Path) -> None:
    # Reported: `python -m seqpack_cli.prepare --input data/part-0.parquet ... --max-seq-len
    # 2048` failed as written (the data has sequences over 2048 tokens: it needs --over-cap).
    for kind, code in _runnable_blocks(_section("The command line")):
        setup = [sys.executable, "-c", code] if kind == "python" else None
        result = (
            subprocess.run(setup, cwd=tmp_path, capture_output=True, text=True, timeout=300)
            if setup
            else _run_shell(code, tmp_path)
        )
        assert result.returncode == 0, (code, result.stderr)
    commands = _prose_commands()
    assert any("--input" in command for command in commands), commands
    ran = []
    for command in commands:
        result = _run_shell(command, tmp_path)
        if result.returncode == 2 and result.stderr.startswith("error: Missing "):
            continue  # a command named, not written out: its options parsed (none unknown)
        assert result.returncode == 0, f"README prose command failed: {command}\n{result.stderr}"
        ran.append(command)
    assert ran, f"no prose command ran as a whole: {commands}"


# ---- what the README says about options is what they do -----------------------------------------


def _option_row(option: str) -> str:
    """The row of `seqpack prepare`'s option table that names `option`."""
    (row,) = [
        line for line in README.read_text().splitlines() if line.startswith("| ") and option in line
    ]
    return row


def test_the_memory_limits_the_readme_gives_are_accepted() -> None:
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


def test_the_label_dtypes_the_readme_gives_are_those_stored(tmp_path: Path) -> None:
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
    text = " ".join(README.read_text().split())
    assert "the same files named in another order make the same source" in text

"""How the `seqpack` command shows its usage: help, usage errors, an interrupt while it starts.

Issue 21, item 6: `--overwrite <bool>` in `--help` (typed `--overwrite true`, it failed as
"input true does not exist"), a usage line reading `{inputs}...`, Typer's boxed usage errors
beside seqpack's one-line errors, and "a positive integer or None" on the command line.
"""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import write_parquet
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.progress import rich_progress

REPO = Path(__file__).resolve().parent.parent
BOX = re.compile("[╭╮╰╯│─]")
COMMANDS = ([], ["prepare"], ["stats"])


def _help(command: list[str]) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(["seqpack", *c]))
def test_help_shows_flags_as_flags(command: list[str]) -> None:
    text = _help(command)
    assert "<bool>" not in text and "bool" not in text.replace("Boolean", "")
    flags = {
        (): ["--version", "--help"],
        ("prepare",): ["--overwrite", "--filter-over-cap", "--quiet", "--json", "--help"],
        ("stats",): ["--verify", "--quiet", "--json", "--help"],
    }[tuple(command)]
    for flag in flags:
        (line,) = [line for line in text.splitlines() if re.search(rf"{flag}\b(?!-)", line)][:1]
        # The flag, then (after its short form, if any) straight to its help text: no value.
        after = line.split(flag, 1)[1].strip(" │")
        assert re.match(r"(-\w\s+)?[A-Z]", after), (flag, line)
    # An option that takes a value still names it.
    if command == ["prepare"]:
        assert re.search(r"--max-seq-len\s+<int>", text)


@pytest.mark.parametrize("command", [["prepare"], ["stats"]], ids=" ".join)
def test_arguments_show_their_metavar_not_a_python_type(command: list[str]) -> None:
    text = _help(command)
    # The Arguments panel's row: the required marker, then the metavar.
    (line,) = [line for line in text.splitlines() if re.search(r"\*\s+[A-Z_ |]*INPUT\.\.\.", line)]
    assert "list[" not in line and "<" not in line, line


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        (["prepare"], "Usage: seqpack prepare [OPTIONS] INPUT..."),
        (["stats"], "Usage: seqpack stats [OPTIONS] PREPARED_DIR | INPUT..."),
        ([], "Usage: seqpack [OPTIONS] COMMAND [ARGS]..."),
    ],
)
def test_the_usage_line_names_arguments_by_their_metavar(command: list[str], usage: str) -> None:
    text = _help(command)
    assert usage in text
    assert "{" not in text.split("Usage:", 1)[1].splitlines()[0]


def _data(tmp_path: Path) -> str:
    return str(write_parquet(tmp_path / "data" / "a.parquet", {"n": [1, 2, 3]}).parent)


USAGE_ERRORS = {
    "unknown option": (["prepare", "{data}", "--bogus"], "No such option: --bogus"),
    "unknown command": (["bogus"], "No such command 'bogus'"),
    "unknown group option": (["--bogus"], "No such option: --bogus"),
    "missing input": (["prepare"], "Missing argument 'INPUT...'"),
    "missing option": (
        ["prepare", "{data}", "--length-column", "n", "--max-seq-len", "8"],
        "Missing option '--output'",
    ),
    "a flag given a value": (
        ["prepare", "{data}", "-o", "{out}", "--length-column", "n", "--max-seq-len", "x"],
        "Invalid value for '--max-seq-len'",
    ),
    "stats values apart": (
        ["stats", "{data}", "--length-column", "n", "--max-seq-len", "8", "16"],
        "looks like a --max-seq-len value",
    ),
}


@pytest.mark.parametrize("case", USAGE_ERRORS)
def test_usage_errors_are_one_plain_line(tmp_path: Path, case: str) -> None:
    template, expected = USAGE_ERRORS[case]
    fill = {"data": _data(tmp_path), "out": str(tmp_path / "out")}
    result = CliRunner().invoke(app, [arg.format(**fill) for arg in template])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    assert "--help'" in lines[0] and not BOX.search(lines[0]), lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_usage_errors_from_the_installed_command_are_one_line(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "seqpack_cli", "prepare", _data(tmp_path), "--overwrite", "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: Missing option '--max-seq-len'"), result.stderr
    assert len(result.stderr.splitlines()) == 1 and not BOX.search(result.stderr)


def test_no_cap_is_worded_for_the_command_line(tmp_path: Path) -> None:
    # Reported: "--max-seqs-per-bin is 0; expected a positive integer or None". (`stats` parses
    # its own --max-seqs-per-bin, a list of caps.)
    args = ["prepare", _data(tmp_path), "--length-column", "n", "--max-seq-len", "8"]
    args += ["-o", str(tmp_path / "out")]
    result = CliRunner().invoke(app, [*args, "--max-seqs-per-bin", "0"])
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.splitlines()
    assert line == (
        "error: --max-seqs-per-bin is 0; expected a positive integer; pass --max-seqs-per-bin 1 "
        "or more, or leave it unset for no cap"
    )


# ---- Ctrl-C while the command line is still being imported (issue 21, item 7) -----------------

# What pip's console script does with pyproject's `seqpack = "module:function"`.
CONSOLE_SCRIPT = """
import importlib, re, sys
text = open(sys.argv.pop(1), encoding="utf-8").read()
module, function = re.search(r'^seqpack = "([^"]+)"', text, re.M).group(1).split(":")
{prelude}
sys.argv[0] = "seqpack"
entry = getattr(importlib.import_module(module), function)
{started}
sys.exit(entry())
"""

# A Ctrl-C that lands while `name` is imported, made certain: the import raises it.
INTERRUPT_IMPORT = """
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == {name!r}:
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
"""


def _default_sigint() -> None:
    # A background job (make test &) starts with SIGINT ignored, and children inherit that.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("name", ["typer", "seqpack_cli.cli.app", "seqpack_cli.cli.stats"])
def test_ctrl_c_while_importing_is_one_line(tmp_path: Path, name: str) -> None:
    # Reported: Ctrl-C in the first ~0.1 s of `seqpack prepare` printed a KeyboardInterrupt
    # traceback (the console script imported the whole command line before any handler).
    code = CONSOLE_SCRIPT.format(prelude=INTERRUPT_IMPORT.format(name=name), started="")
    args = ["prepare", _data(tmp_path), "--length-column", "n", "--max-seq-len", "8"]
    result = subprocess.run(
        [sys.executable, "-c", code, str(REPO / "pyproject.toml"), *args, "-o", "out"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        preexec_fn=_default_sigint,
    )
    assert (result.returncode, result.stderr) == (130, "interrupted; nothing written\n")
    assert result.stdout == "" and not (tmp_path / "out").exists()


def test_ctrl_c_at_any_moment_of_the_start_is_never_a_traceback(tmp_path: Path) -> None:
    # The real signal, at delays from the entry point's call (before it, the interpreter and
    # the console script itself run) through the imports and into the run: each run ends in one
    # line (130), or after the output was written (0).
    code = CONSOLE_SCRIPT.format(prelude="", started="sys.stdout.write('R'); sys.stdout.flush()")
    args = ["prepare", _data(tmp_path), "--length-column", "n", "--max-seq-len", "8"]
    for number, delay in enumerate([0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3]):
        output = tmp_path / f"out{number}"
        process = subprocess.Popen(
            [sys.executable, "-c", code, str(REPO / "pyproject.toml"), *args, "-o", str(output)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_default_sigint,
        )
        assert process.stdout is not None and process.stdout.read(1) == "R"
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
        assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, (delay, stderr)
        assert process.returncode in (0, 130), (delay, stderr)
        if process.returncode != 0:
            assert stderr in ("", "interrupted; nothing written\n"), (delay, stderr)
            assert not output.exists(), delay


# ---- progress: counts with thousands separators, phases named by what they count -------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_counts_have_thousands_separators(monkeypatch: pytest.MonkeyPatch) -> None:
    # Reported: "1234567/2000000" beside the bars.
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("COLUMNS", "160")
    with rich_progress() as report:
        assert report is not None
        report("histogram", 1_234_567, 2_000_000)
        report("pools", 3_000, 0)  # total unknown
    text = terminal.getvalue()
    assert "1,234,567/2,000,000" in text and "3,000/?" in text, text


def test_the_token_store_phase_counts_rows_and_says_so(tmp_path: Path) -> None:
    # Reported: a bar labelled `tokens` that counted rows.
    rows = [[1, 2, 3], [4], [5, 6], [7, 8, 9, 10]]
    write_parquet(tmp_path / "in" / "a.parquet", {"input_ids": rows, "n": [3, 1, 2, 4]})
    seen: dict[str, tuple[int, int]] = {}
    config = PrepareConfig(
        inputs=[tmp_path / "in"],
        length_column="n",
        max_seq_len=8,
        output=tmp_path / "out",
        tokens_column="input_ids",
    )
    prepare_dataset(config, progress=lambda phase, done, total: seen.update({phase: (done, total)}))
    assert "tokens" not in seen, seen
    assert seen["token store"] == (len(rows), len(rows)), seen

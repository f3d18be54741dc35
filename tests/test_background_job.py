"""The suite passes when it runs as a background job (issue 21).

`make test &`, nohup and some CI runners start the tests with SIGINT ignored, and every child
inherits that. seqpack leaves an ignored SIGINT ignored (the user's choice, as `nohup` means it),
so a test that sends SIGINT to a child must give the child the default disposition itself:
`conftest.with_default_signals`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import with_default_signals

ROOT = Path(__file__).resolve().parents[1]

# Prints how the child found SIGINT and SIGTERM: Python's KeyboardInterrupt handler and the
# default, as under an interactive shell, or "ignored".
_REPORT_DISPOSITIONS = """
import signal
int_ = signal.getsignal(signal.SIGINT)
term = signal.getsignal(signal.SIGTERM)
print("default" if int_ is signal.default_int_handler else "ignored", end=" ")
print("default" if term == signal.SIG_DFL else "ignored")
"""


def _ignoring(signals: str, command: list[str]) -> list[str]:
    """`command` started by a shell that ignores `signals` ("INT TERM"), as a background job's
    shell ignores SIGINT."""
    return ["bash", "-c", f"trap '' {signals}; exec \"$@\"", "bash", *command]


def _dispositions(command: list[str]) -> str:
    """What `command` reports when started with SIGINT and SIGTERM ignored."""
    result = subprocess.run(
        _ignoring("INT TERM", command), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_child_inherits_an_ignored_sigint() -> None:
    # What went wrong: started plainly, the child ignores both (so a test's signal is lost).
    assert _dispositions([sys.executable, "-c", _REPORT_DISPOSITIONS]) == "ignored ignored"


def test_with_default_signals_gives_the_child_the_default_dispositions() -> None:
    command = with_default_signals([sys.executable, "-c", _REPORT_DISPOSITIONS])
    assert _dispositions(command) == "default default"


def test_with_default_signals_keeps_the_arguments_and_the_exit_code() -> None:
    code = "import sys; print(sys.argv[1:]); sys.exit(7)"
    args = ["a b", "--flag", "", "ü"]
    result = subprocess.run(
        with_default_signals([sys.executable, "-c", code, *args]), capture_output=True, text=True
    )
    assert result.returncode == 7 and result.stdout.strip() == repr(args)


@pytest.mark.slow
def test_the_signal_tests_pass_with_sigint_ignored(tmp_path: Path) -> None:
    # The tests that send SIGINT, run as `make test &` would run them (each failed so before
    # they started their child through with_default_signals).
    safety = "tests/test_output_safety.py::test_"
    selection = [
        f"{safety}an_interrupt_before_the_commit_is_one_line_and_its_exit_code[SIGINT]",
        f"{safety}a_signal_during_the_commit_lets_the_run_finish[SIGINT-exchange]",
        f"{safety}a_signal_during_the_commit_lets_the_run_finish[SIGINT-renames]",
        "tests/test_prepare.py::test_sigterm_and_sigint_remove_the_temporary_directory[SIGINT]",
    ]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["--basetemp", str(tmp_path / "basetemp"), *selection]
    result = subprocess.run(
        _ignoring("INT", command), cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert "4 passed" in result.stdout, result.stdout[-4000:]

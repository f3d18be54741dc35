"""`make test` is the fast inner loop, `make test-all` the whole suite, which CI runs (issue 21).

The slow tests are marked in their modules or, by what makes them slow, in conftest (`SLOW`);
these tests check that the marks land where they should and that the targets select by them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _collected(*args: str) -> set[str]:
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {line.split("[")[0] for line in result.stdout.splitlines() if "::" in line}


@pytest.mark.slow  # two collections: 5 s
def test_the_fast_selection_leaves_out_what_conftest_calls_slow() -> None:
    modules = ["tests/test_dask_engine.py", "tests/test_output_safety.py"]
    everything = _collected(*modules)
    fast = _collected("-m", "not slow", *modules)
    slow = everything - fast
    engine, safety = (f"tests/{m}.py::test_" for m in ("test_dask_engine", "test_output_safety"))
    # By fixture (the session's Dask cluster), by name (a local cluster; many processes).
    assert f"{engine}byte_identical_to_the_local_engine" in slow
    assert f"{engine}workers_start_a_local_cluster_and_json_names_the_engine" in slow
    assert f"{safety}random_signals_always_leave_a_complete_output" in slow
    # The rest stays in the inner loop: the signal tests included.
    assert f"{engine}an_unreachable_scheduler_is_one_line" in fast
    assert f"{safety}an_interrupt_before_the_commit_is_one_line_and_its_exit_code" in fast
    assert len(fast) > 2 * len(slow)


def _recipe(makefile: str, target: str) -> list[str]:
    match = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.MULTILINE)
    assert match, f"no make target {target}"
    return [line.strip() for line in match.group(1).splitlines()]


def test_make_test_is_the_fast_selection_and_ci_runs_everything() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert _recipe(makefile, "test") == ["$(BIN)/python -m pytest -q -m 'not slow'"]
    assert _recipe(makefile, "test-all") == ["$(BIN)/python -m pytest -q"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == "make test-all" and "make test" not in ci

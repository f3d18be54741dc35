"""The suite's hypothesis settings: nothing that times a test, and a seed that is printed.

A fresh clone's `make test` on a loaded machine failed one property test of 2,117 with
`DeadlineExceeded` (hypothesis' default deadline is 200 ms an example). The profile loaded in
conftest.py has no deadline and skips the too-slow health check; a module's own `settings`
replace the profile's values they name, so none may set a deadline, and one that lists health
checks to skip must list too_slow again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import HYPOTHESIS_PROFILE, hypothesis_seed_line, pytest_report_header
from hypothesis import HealthCheck, core, settings

TESTS = Path(__file__).parent


def test_the_loaded_profile_never_times_a_test() -> None:
    assert settings.get_current_profile_name() == HYPOTHESIS_PROFILE
    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check
    # A settings object a module builds inherits the profile's values it does not name.
    assert settings(max_examples=3).deadline is None


def test_the_run_has_one_seed_and_prints_it(pytestconfig: pytest.Config) -> None:
    seed = core.global_force_seed
    assert seed is not None
    line = pytest_report_header(pytestconfig)
    assert line == hypothesis_seed_line() and f"--hypothesis-seed={seed}" in line


def _settings_calls(tree: ast.AST) -> list[ast.Call]:
    """Every `settings(...)` / `hypothesis.settings(...)` call, decorators included."""
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else None
            name = node.func.id if isinstance(node.func, ast.Name) else name
            if name in ("settings", "register_profile"):
                calls.append(node)
    return calls


def _skips_too_slow(value: ast.expr) -> bool:
    """Whether a `suppress_health_check=` value (written with `HealthCheck` only, as the
    modules do) holds too_slow."""
    checks = eval(
        compile(ast.Expression(value), "<settings>", "eval"), {"HealthCheck": HealthCheck}
    )
    return HealthCheck.too_slow in checks


def timing_settings(source: str) -> list[str]:
    """What in a test module's source gives hypothesis a time limit back: a deadline other
    than None, or a list of skipped health checks without too_slow."""
    found = []
    for call in _settings_calls(ast.parse(source)):
        for keyword in call.keywords:
            value = keyword.value
            if keyword.arg == "deadline" and not (
                isinstance(value, ast.Constant) and value.value is None
            ):
                found.append(f"line {call.lineno}: deadline={ast.unparse(value)}")
            if keyword.arg == "suppress_health_check" and not _skips_too_slow(value):
                found.append(
                    f"line {call.lineno}: suppress_health_check={ast.unparse(value)} without "
                    "HealthCheck.too_slow"
                )
    return found


def test_the_check_of_a_module_finds_what_times_a_test() -> None:
    assert timing_settings("@settings(max_examples=5, deadline=None)\ndef f(): pass") == []
    assert timing_settings("S = hypothesis.settings(deadline=500)") == ["line 1: deadline=500"]
    assert timing_settings("@settings(deadline=timedelta(seconds=1))\ndef f(): pass") == [
        "line 1: deadline=timedelta(seconds=1)"
    ]
    found = timing_settings("settings(suppress_health_check=[HealthCheck.function_scoped_fixture])")
    assert found == [
        "line 1: suppress_health_check=[HealthCheck.function_scoped_fixture] without "
        "HealthCheck.too_slow"
    ]
    assert (
        timing_settings(
            "settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])"
        )
        == []
    )
    assert timing_settings("settings(suppress_health_check=list(HealthCheck))") == []


def test_no_test_module_gives_hypothesis_a_time_limit() -> None:
    found = {
        path.name: timing_settings(path.read_text())
        for path in sorted(TESTS.glob("*.py"))
        if path.name != "conftest.py"
    }
    assert {name: lines for name, lines in found.items() if lines} == {}

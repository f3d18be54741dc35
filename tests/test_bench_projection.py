"""The Dask projection of `benchmarks/bench_dask.py` calls the driver's own functions: a change
of their signatures must fail here, not only in `make bench` (an OverCap change once did)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_benchmark

pytest.importorskip("distributed")


def test_the_driver_work_of_the_projection_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The projection imports its sibling bench_prepare, as the script run from benchmarks/ does.
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks"))
    projection = load_benchmark("dask_projection")
    seconds, peak_mib = projection.driver_seconds(4, 64)
    assert seconds > 0 and peak_mib > 0

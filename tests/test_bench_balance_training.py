"""benchmarks/bench_balance_training.py runs end to end (its --smoke mode: a tiny model on CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_balance_training


def test_smoke_run_prints_both_plans_and_predicts_balance(capsys: pytest.CaptureFixture) -> None:
    args = bench_balance_training.parse_args(["--smoke"])
    timings = bench_balance_training.run(args)
    assert [t.balance for t in timings] == ["None", "cost"]
    assert all(t.step_s >= t.rank_s > 0 and t.real_tokens > 0 for t in timings)
    # The cost model's own prediction: the balanced plan's steps are at least as even.
    assert timings[1].predicted <= timings[0].predicted
    assert bench_balance_training.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "balanced step time" in out and "predicted" in out

"""`make demo` (examples/demo.py) runs end to end, and reruns delete only what it wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.py"


@pytest.mark.slow
def test_the_demo_runs_and_keeps_foreign_files(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    (out / "data").mkdir(parents=True)
    foreign = out / "data" / "notes.txt"  # a file of the user's, beside the demo's data
    foreign.write_text("mine")
    for rows in (20_000, 30_000):  # the second size rewrites the dataset
        result = subprocess.run(
            [sys.executable, str(DEMO), "--rows", str(rows), "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        assert "Template [" in result.stdout and "in both epochs" in result.stdout
    assert foreign.read_text() == "mine"
    assert len(list((out / "data").glob("part-*.parquet"))) == 6
    assert (out / "prepared" / "manifest.json").is_file()

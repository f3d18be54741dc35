"""Datasets and comparisons shared by the Dask engine's tests (test_dask_engine, test_dask_cli).

`write_dataset` writes a few parquet files of uneven sizes (one of them empty, one in a
subfolder) whose ids take the path through the pools pass that `ids` names; `assert_same_output`
compares two prepared directories byte for byte, the manifest's `engine` entry aside;
`kill_the_worker_running` SIGKILLs the worker that runs a given kind of task, mid-run;
`stop_processes` stops the scheduler and workers a test started from the command line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ID_KINDS = ("sparse", "blocks", "hashed", "rows")
"""sparse: a global shuffle of spread ids (sorted per group); blocks: each file its own dense
block, shuffled (the id map per group); hashed: random int64; rows: no id column."""


def write_dataset(
    root: Path,
    *,
    ids: str = "sparse",
    num_files: int = 5,
    rows: int = 2000,
    seed: int = 0,
    lists: bool = False,
    max_length: int = 300,
) -> Path:
    """`num_files` files (sizes uneven, the second one empty) under `root`, columns `n` (lengths,
    or token lists with `lists`), `doc_id` (unless `ids == "rows"`) and `text`."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(3.5, 1.0, rows), 1, max_length).astype(np.int64)
    weights = rng.uniform(0.5, 1.5, num_files)
    weights[1 % num_files] = 0
    cuts = np.concatenate([[0], np.cumsum(weights / weights.sum() * rows)]).round().astype(int)
    if ids == "sparse":
        values = rng.permutation(rows).astype(np.int64) * 7 + 1_000
    elif ids == "blocks":
        values = np.concatenate(
            [cuts[i] + rng.permutation(cuts[i + 1] - cuts[i]) for i in range(num_files)]
        ).astype(np.int64)
    elif ids == "hashed":
        values = rng.choice(2**62, rows, replace=False).astype(np.int64) * rng.choice([-1, 1], rows)
    else:
        values = None
    for i in range(num_files):
        part = slice(cuts[i], cuts[i + 1])
        columns: dict[str, Any] = {}
        if lists:
            columns["n"] = pa.array([[1] * int(x) for x in lengths[part]], pa.list_(pa.int32()))
        else:
            columns["n"] = lengths[part]
        if values is not None:
            columns["doc_id"] = values[part]
        columns["text"] = pa.array([f"row {x}" for x in range(cuts[i], cuts[i + 1])], pa.string())
        path = root / (f"sub/part-{i:02d}.parquet" if i == 2 else f"part-{i:02d}.parquet")
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns), path, row_group_size=97)
    return root


def tree(path: Path) -> dict[str, bytes]:
    """Every file of a prepared directory but its manifest, by relative name."""
    return {
        p.relative_to(path).as_posix(): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def manifest_without_engine(path: Path) -> dict[str, Any]:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.pop("engine", None)
    manifest.pop("manifest_sha256", None)  # the manifest's own digest covers `engine` too
    return manifest


def assert_same_output(expected: Path, got: Path) -> None:
    """Byte-identical counts, templates and pools; the same manifest but for `engine`."""
    want, have = tree(expected), tree(got)
    assert sorted(have) == sorted(want)
    assert [name for name in want if want[name] != have[name]] == []
    assert manifest_without_engine(got) == manifest_without_engine(expected)


def leftovers(folder: Path) -> list[str]:
    """Temporary siblings a run left in `folder`."""
    return sorted(p.name for p in folder.iterdir() if ".seqpack-" in p.name)


def kill_the_worker_running(client: Any, run: Future, key_part: str, timeout_s: float = 60) -> None:
    """Wait until a task whose Dask key holds `key_part` runs on a worker of `client`'s cluster,
    then SIGKILL that worker's process; `run` is the job (it must not end first)."""
    deadline = time.monotonic() + timeout_s
    while True:
        running = client.run(lambda dask_worker: [str(t.key) for t in dask_worker.state.executing])
        busy = [worker for worker, keys in running.items() if any(key_part in k for k in keys)]
        if busy:
            break
        assert not run.done(), run.result()
        assert time.monotonic() < deadline, f"no {key_part} task ever ran"
        time.sleep(0.05)
    pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
    os.kill(pid, signal.SIGKILL)


def stop_processes(processes: list[subprocess.Popen]) -> None:
    """Terminate `processes` (last started first) and wait for them; kill what outlasts 30 s."""
    for process in reversed(processes):
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

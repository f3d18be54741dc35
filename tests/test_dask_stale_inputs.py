"""`--engine dask` with a worker that sees another file at an input's path than the driver does.

The worker is real: a `dask worker` process in a mount namespace of its own (`unshare`), where
the inputs' directory is a bind mount of a stale copy (the same rows, every token + 1): the path
is the same, the file is not. Every task that opens an input checks it against the driver's
fingerprint (size and parquet footer) and the run fails in one line naming the file and the
worker, writing nothing. Needs root for the mount namespace (skipped otherwise). Each task
function is also checked in this process against a file changed after it was fingerprinted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from dask_datasets import leftovers, stop_processes, write_dataset
from dask_store_cases import random_sequences, write_tokens

from seqpack_cli.errors import InputError
from seqpack_cli.over_cap import OverCap
from seqpack_cli.prepare.engines.dask.fingerprints import fingerprint, fingerprints
from seqpack_cli.prepare.engines.dask.groups import FileGroup, GroupCounts
from seqpack_cli.prepare.engines.dask.pool_tasks import PoolsJob, group_pools
from seqpack_cli.prepare.engines.dask.store_faults import stream_error
from seqpack_cli.prepare.engines.dask.store_footers import inspect_store_inputs
from seqpack_cli.prepare.engines.dask.tasks import (
    TaskSettings,
    check_inputs,
    group_histogram,
    locate_id,
    read_footers,
)
from seqpack_cli.prepare.footers import inspect_inputs
from seqpack_cli.prepare.pools.tuning import PoolTuning
from seqpack_cli.prepare.token_reading import inspect_token_inputs

distributed = pytest.importorskip("distributed")

BIN = Path(sys.executable).parent
TIMEOUT_S = 120
SEQUENCES = random_sequences(300, seed=3)


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or not sys.platform.startswith("linux"):
        return False
    probe = ["unshare", "--mount", "--propagation", "private", "true"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def _start(command: list[str], log: Path) -> subprocess.Popen:
    with open(log, "a") as handle:
        return subprocess.Popen(command, stdout=handle, stderr=handle)


@pytest.fixture(scope="module")
def stale_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """A scheduler, a worker that sees the inputs, and one that sees a stale copy at their path;
    (address, the inputs, the stale copy)."""
    if not _can_unshare():
        pytest.skip("needs a mount namespace of its own (unshare --mount, as root)")
    folder = tmp_path_factory.mktemp("stale")
    inputs = write_tokens(folder / "data", SEQUENCES)
    stale = write_tokens(folder / "stale", [[t + 1 for t in s] for s in SEQUENCES])
    log, scheduler_file = folder / "cluster.log", folder / "scheduler.json"
    processes = [_start(
        [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
         "--no-dashboard", "--scheduler-file", str(scheduler_file)], log,
    )]  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not scheduler_file.exists() or not scheduler_file.read_text().strip():
            assert processes[0].poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the scheduler never wrote its address"
            time.sleep(0.05)
        address = json.loads(scheduler_file.read_text())["address"]
        worker = [str(BIN / "dask"), "worker", address, "--nthreads", "1", "--no-dashboard",
                  "--host", "127.0.0.1"]  # fmt: skip
        processes.append(_start([*worker, "--name", "fresh"], log))
        mount = f'mount --bind {stale} {inputs} && exec "$@"'
        processes.append(_start(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh",
             *worker, "--name", "stale"], log,
        ))  # fmt: skip
        with distributed.Client(address, timeout=TIMEOUT_S) as client:
            client.wait_for_workers(2, timeout=TIMEOUT_S)
        yield address, inputs, stale
    finally:
        stop_processes(processes)


def test_a_worker_seeing_a_stale_copy_fails_the_run_in_one_line(
    stale_cluster: tuple[str, Path, Path], tmp_path: Path
) -> None:
    address, inputs, _ = stale_cluster
    output = tmp_path / "out"
    command = [
        str(BIN / "seqpack"), "prepare", str(inputs), "--length-column", "n",
        "--tokens-column", "input_ids", "--max-seq-len", "64", "--output", str(output),
        "--engine", "dask", "--scheduler", address,
    ]  # fmt: skip
    # The footers of 6 files go out in 3 tasks over the 2 workers, so the stale one reads some
    # in the first phase; whichever task it runs, the run stops there.
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"input file {inputs}/part-" in result.stderr
    assert "on Dask worker tcp://127.0.0.1:" in result.stderr
    assert "is not the file the driver read: its parquet footer differs" in result.stderr
    assert not output.exists() and leftovers(tmp_path) == []


# ---- each task checks its files, whichever phase it is in -------------------------------------


def _changed_after_fingerprint(tmp_path: Path) -> tuple[Path, list]:
    """Token files fingerprinted, then each replaced by a stale copy of the same path."""
    inputs = write_tokens(tmp_path / "data", SEQUENCES)
    paths = sorted(inputs.glob("*.parquet"))
    prints = fingerprints(paths)
    stale = write_tokens(tmp_path / "stale", [[t + 1 for t in s] for s in SEQUENCES])
    for path in paths:
        shutil.copyfile(stale / path.name, path)
    return inputs, prints


def test_every_task_that_reads_an_input_checks_it(tmp_path: Path) -> None:
    inputs, prints = _changed_after_fingerprint(tmp_path)
    paths = [p.path for p in prints]
    files = inspect_inputs(paths, "n")
    group = FileGroup(0, tuple(files), 0, 0, tuple(prints))
    settings = TaskSettings(threads=1)
    runs = tmp_path / "runs"
    runs.mkdir()
    job = PoolsJob("n", None, OverCap("error", 64), runs, PoolTuning(), settings, 8, 4, 1 << 20)
    counts = GroupCounts(np.array([5], dtype=np.int32), np.array([1], dtype=np.int32))
    token_file = inspect_token_inputs(paths[:1], "input_ids", None)[0]
    tasks = {
        "footers": lambda: read_footers(paths, prints),
        "histogram": lambda: group_histogram(group, "n", settings),
        "locate": lambda: locate_id(group, "n", 3, settings),
        "pools": lambda: group_pools(job, group, counts),
        "store footers": lambda: inspect_store_inputs(prints, {"tokens": "input_ids"}, None),
        "store fault": lambda: stream_error(
            token_file, "tokens", "input_ids", None, np.dtype("u2"), runs, prints[0]
        ),
    }
    for name, task in tasks.items():
        with pytest.raises(InputError, match="is not the file the driver read") as error:
            task()
        message = str(error.value)
        assert message.startswith(f"input file {inputs}/part-"), name
        assert "on Dask worker host " in message and "its parquet footer differs" in message


def test_a_file_of_another_size_is_named_with_both_sizes(tmp_path: Path) -> None:
    path = write_dataset(tmp_path / "in", num_files=1, rows=200) / "part-00.parquet"
    before = fingerprint(path)
    assert before is not None and before.num_bytes == path.stat().st_size
    check_inputs([before])  # the same file: nothing to say
    with open(path, "ab") as handle:
        handle.write(b"\0" * 10)
    with pytest.raises(InputError) as error:
        check_inputs([before])
    size = before.num_bytes
    assert f"it holds {size + 10} bytes there, {size} on the driver" in str(error.value)
    path.unlink()
    with pytest.raises(InputError, match="is not visible on Dask worker"):
        check_inputs([before])


def test_a_fifo_or_a_file_the_driver_cannot_read_has_no_fingerprint(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)
    assert fingerprint(fifo) is None  # and it did not block on opening the pipe
    assert fingerprint(tmp_path / "missing.parquet") is None
    path = write_dataset(tmp_path / "in", num_files=1, rows=50) / "part-00.parquet"
    with pytest.raises(InputError, match=r"readable on Dask worker host .* but not on the driver"):
        read_footers([path], [None])

"""`seqpack prepare --engine dask` on a cluster started as users start one: `dask scheduler` and
two `dask worker` processes from the command line, on 127.0.0.1 and free ports.

The cluster lives for the module and is stopped (SIGTERM, then SIGKILL) whatever happens. The
command runs as users run it, in a process of its own. A worker killed with SIGKILL while the
pools tasks run: Dask runs its tasks again and the output is the same, byte for byte. A driver
killed with SIGKILL leaves nothing that `load_prepared` accepts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dask_datasets import assert_same_output, leftovers, stop_processes, write_dataset

from seqpack_cli.errors import PreparedFormatError
from seqpack_cli.prepare import PrepareConfig, load_prepared, prepare_dataset
from seqpack_cli.prepare.engines.dask.driver import PAUSE_VARIABLE

distributed = pytest.importorskip("distributed")

BIN = Path(sys.executable).parent
TIMEOUT_S = 120


@dataclass
class CommandLineCluster:
    address: str
    client: Any

    def executing(self) -> dict[str, list[str]]:
        """The keys each worker is running now."""
        # A lambda: cloudpickle sends it by value (this module is not importable on a worker).
        return self.client.run(
            lambda dask_worker: [str(t.key) for t in dask_worker.state.executing]
        )

    def wait_idle(self, workers: int = 2) -> None:
        """Until `workers` workers are connected, and no task is assigned to one or runs."""
        self.client.wait_for_workers(workers, timeout=TIMEOUT_S)
        deadline = time.monotonic() + TIMEOUT_S
        while any(self.client.processing().values()) or any(self.executing().values()):
            assert time.monotonic() < deadline, "the cluster never went idle"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CommandLineCluster]:
    folder = tmp_path_factory.mktemp("cluster")
    scheduler_file = folder / "scheduler.json"
    log = open(folder / "cluster.log", "w")  # noqa: SIM115 (closed below, after the processes)
    processes: list[subprocess.Popen] = []
    client = None
    try:
        processes.append(subprocess.Popen(
            [BIN / "dask", "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--dashboard-address", "127.0.0.1:0", "--scheduler-file", scheduler_file],
            stdout=log, stderr=log,
        ))  # fmt: skip
        deadline = time.monotonic() + TIMEOUT_S
        while not scheduler_file.exists() or not scheduler_file.read_text().strip():
            assert processes[0].poll() is None, (folder / "cluster.log").read_text()
            assert time.monotonic() < deadline, "the scheduler never wrote its address"
            time.sleep(0.05)
        address = json.loads(scheduler_file.read_text())["address"]
        for number in range(2):
            processes.append(subprocess.Popen(
                [BIN / "dask", "worker", address, "--nthreads", "1", "--no-dashboard",
                 "--host", "127.0.0.1", "--name", f"worker-{number}",
                 "--local-directory", folder / f"worker-{number}"],
                stdout=log, stderr=log,
            ))  # fmt: skip
        client = distributed.Client(address, timeout=TIMEOUT_S)
        client.wait_for_workers(2, timeout=TIMEOUT_S)
        yield CommandLineCluster(address, client)
    finally:
        if client is not None:
            client.close()
        stop_processes(processes)
        log.close()


def _command(inputs: Path, output: Path, *extra: str) -> list[str]:
    return [
        str(BIN / "seqpack"), "prepare", str(inputs), "--length-column", "n", "--id-column",
        "doc_id", "--max-seq-len", "512", "--output", str(output), *extra,
    ]  # fmt: skip


def _local(inputs: Path, output: Path) -> Path:
    config = PrepareConfig(
        inputs=[inputs], length_column="n", id_column="doc_id", max_seq_len=512, output=output
    )
    prepare_dataset(config)
    return output


def _start_paused(cluster: CommandLineCluster, command: list[str]) -> tuple[subprocess.Popen, str]:
    """The command, with each pools task pausing halfway; returns once a worker runs one, and
    that worker's address."""
    environment = {**os.environ, PAUSE_VARIABLE: "2"}
    process = subprocess.Popen(command, env=environment, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        running = cluster.executing().items()
        busy = [w for w, keys in running if any("-pools-" in key for key in keys)]
        if busy:
            return process, busy[0]
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "no pools task ever ran"
        time.sleep(0.05)


def test_prepare_on_a_command_line_cluster(cluster: CommandLineCluster, tmp_path: Path) -> None:
    inputs = write_dataset(tmp_path / "in", ids="sparse", rows=3000)
    command = _command(inputs, tmp_path / "dask", "--engine", "dask", "--scheduler",
                       cluster.address, "--json")  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    engine = json.loads(result.stdout)["engine"]
    assert engine["scheduler"] == cluster.address and engine["workers"] == 2
    assert_same_output(_local(inputs, tmp_path / "local"), tmp_path / "dask")


def test_a_worker_killed_mid_run_changes_nothing(
    cluster: CommandLineCluster, tmp_path: Path
) -> None:
    cluster.wait_idle()
    inputs = write_dataset(tmp_path / "in", ids="sparse", rows=3000, seed=7)
    command = _command(inputs, tmp_path / "dask", "--engine", "dask", "--scheduler",
                       cluster.address)  # fmt: skip
    process, worker = _start_paused(cluster, command)
    pid = cluster.client.run(os.getpid, workers=[worker])[worker]
    os.kill(pid, signal.SIGKILL)
    _, stderr = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 0, stderr
    assert_same_output(_local(inputs, tmp_path / "local"), tmp_path / "dask")
    cluster.wait_idle()  # the worker's nanny started a new one
    assert pid not in cluster.client.run(os.getpid).values()


def test_a_killed_driver_leaves_nothing_loadable(
    cluster: CommandLineCluster, tmp_path: Path
) -> None:
    cluster.wait_idle()
    inputs = write_dataset(tmp_path / "in", ids="rows", rows=3000, seed=9)
    output = tmp_path / "out"
    command = [*_command(inputs, output, "--engine", "dask", "--scheduler", cluster.address)]
    command.remove("--id-column")
    command.remove("doc_id")
    process, _ = _start_paused(cluster, command)
    process.kill()
    process.communicate(timeout=TIMEOUT_S)
    assert not output.exists() and leftovers(tmp_path)  # its temporary directory, unfinished
    with pytest.raises(PreparedFormatError):
        load_prepared(output)
    cluster.wait_idle()  # its last task ends (the scheduler dropped the rest with the client)
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert leftovers(tmp_path) == []  # the next run removed the killed run's directory
    assert load_prepared(output, verify=True).counts

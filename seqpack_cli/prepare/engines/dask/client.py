"""The Dask side of the engine: a client on a running scheduler, or a local cluster for the run.

`open_cluster` connects (`--scheduler`) or starts a `LocalCluster` of `--workers` processes,
waits for a worker, and checks that every worker runs this version of seqpack. `task_error` words
what a task raised that is not seqpack's own error (a worker that died too often, a worker that
cannot import seqpack, a lost scheduler) as one line. `stop_tasks` cancels the run's tasks and
waits until no worker runs one any more, so the output's temporary directory can be removed.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqpack_cli import __version__
from seqpack_cli.errors import ConfigError, SeqpackError, first_line, option
from seqpack_cli.prepare.config import PrepareConfig, engine_option
from seqpack_cli.prepare.engines.dask.handshake import check_scheduler
from seqpack_cli.prepare.engines.dask.tasks import worker_info
from seqpack_cli.prepare.engines.dask.tuning import ClusterTuning

__all__ = [
    "Cluster",
    "local_cluster",
    "no_workers_error",
    "open_cluster",
    "stop_tasks",
    "task_error",
]

logger = logging.getLogger(__name__)

_STOP_TIMEOUT_S = 60
_TRIM = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
_START_METHOD = "distributed.worker.multiprocessing-method"
_QUIET_NATIVE_THREADS = 3
"""This process's threads after `import pyarrow`: the main one, jemalloc's, one of Arrow's."""


@dataclass
class Cluster:
    """A client, the local cluster it runs on if this run started one, and its size."""

    client: Any
    local: Any
    address: str
    num_workers: int
    num_threads: int
    duckdb_threads: int | None
    """DuckDB threads per task where this run decides them (a local cluster), else None."""

    quieted: list[tuple[logging.Logger, int]] | None = None
    """Dask's loggers and their levels, while their lines are muted (`_quiet_logs`)."""

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self.local is not None:
                self.local.close()
            _restore(self.quieted or [])


def _quiet_level() -> int:
    """The level of Dask's loggers while the engine runs: silent, unless this process logs INFO
    (`LOGLEVEL=INFO`). Whatever goes wrong reaches the run as an error, worded in one line; what
    distributed logs on the way (a lost scheduler's reconnection attempts, a task's "Compute
    Failed" block, CancelledError tracebacks) would only bury that line."""
    asked = logging.getLogger().getEffectiveLevel()  # distributed sets its own to INFO
    return asked if asked <= logging.INFO else logging.CRITICAL + 1


def _quiet_logs() -> list[tuple[logging.Logger, int]]:
    """Mute `distributed` and each of its loggers that has a level of its own (Dask's config
    gives `distributed.client` one); their previous levels, for `_restore`."""
    level = _quiet_level()
    names = ["distributed"] + [
        name
        for name, logger in logging.root.manager.loggerDict.items()
        if name.startswith("distributed.") and isinstance(logger, logging.Logger) and logger.level
    ]
    quieted = [(logging.getLogger(name), logging.getLogger(name).level) for name in names]
    for logger, _ in quieted:
        logger.setLevel(level)
    return quieted


def _restore(quieted: list[tuple[logging.Logger, int]]) -> None:
    for logger, level in quieted:
        logger.setLevel(level)


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError as error:
        raise ConfigError(
            f"{engine_option('dask')} needs Dask distributed ({first_line(error)}): pip install "
            "'seqpack-cli[dask]'"
        ) from None
    return distributed


def _start_method() -> str:
    """How the local cluster's workers start: "fork" where it is safe, else Dask's "spawn".

    A spawned worker starts a fresh interpreter and imports numpy, pyarrow, DuckDB and Dask
    again: ~0.5 s of a 2-process cluster's start, on cores the run needs. A forked one shares
    what this process imported. Forking is safe only in a process that runs nothing else: a
    thread holding a lock (DuckDB's, a user's) at the fork would hold it forever in the worker.
    So: Linux only (macOS cannot fork a process that loaded its system frameworks), no Python
    thread but this one, and no more native threads than importing pyarrow starts (its jemalloc
    and pool threads, idle, with their own fork handlers): no DuckDB or torch threads running.
    """
    tasks = Path("/proc/self/task")
    if not sys.platform.startswith("linux") or not tasks.is_dir():
        return "spawn"
    if threading.active_count() > 1 or len(os.listdir(tasks)) > _QUIET_NATIVE_THREADS:
        return "spawn"
    return "fork"


def local_cluster(workers: int) -> Any:
    """A `distributed.LocalCluster` of `workers` processes of one task thread each, as
    `--workers` starts it."""
    import dask
    import distributed

    # Dask's workers return freed memory to the system at once (MALLOC_TRIM_THRESHOLD_), so
    # every large array is fresh memory, faulted in page by page: that doubled the tasks'
    # system time. The tasks' memory is bounded by design: glibc's default, then.
    # The start method applies to this start only: a worker that dies later is started again
    # by its nanny with Dask's default (spawn), when this process may run DuckDB's threads.
    settings = {_TRIM: None, _START_METHOD: _start_method()}
    with dask.config.set(settings):
        return distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,  # nobody looks at it during a run: no web server to start
            silence_logs=_quiet_level(),  # the workers' too: a task's error comes back here
        )


def _connect(distributed: Any, config: PrepareConfig, timeout_s: int) -> tuple[Any, Any]:
    if config.workers is not None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        try:
            local = local_cluster(config.workers)
        except Exception as error:
            raise ConfigError(
                f"cannot start a local Dask cluster of {config.workers} workers "
                f"({first_line(error)}); lower {option('workers')}"
            ) from None
        logger.info("local Dask cluster: %d workers on %d cores", config.workers, cores)
        return distributed.Client(local), local
    assert config.scheduler is not None
    check_scheduler(config.scheduler, timeout_s)  # a bounded wait: the client's may not be
    try:
        return distributed.Client(config.scheduler, timeout=timeout_s), None
    except (OSError, TimeoutError, ValueError, TypeError) as error:
        raise ConfigError(
            f"cannot reach the Dask scheduler at {config.scheduler} ({first_line(error)}); start "
            f"one (dask scheduler) and pass its address to {option('scheduler')}"
        ) from None


def _check_workers(client: Any, address: str, tuning: ClusterTuning) -> dict[str, Any]:
    try:
        client.wait_for_workers(1, timeout=tuning.wait_workers_s)
    except (TimeoutError, OSError):
        raise ConfigError(
            f"the Dask scheduler at {address} has no workers (waited {tuning.wait_workers_s} s); "
            f"start some: dask worker {address}"
        ) from None
    try:
        infos: dict[str, Any] = client.run(worker_info)
    except Exception as error:
        raise task_error(error, "a version check") from None
    for worker, info in infos.items():
        if info["seqpack"] != __version__:
            raise ConfigError(
                f"Dask worker {worker} runs seqpack {info['seqpack']}, this process "
                f"{__version__}; install the same version on every worker"
            )
    return infos


def open_cluster(config: PrepareConfig, tuning: ClusterTuning) -> Cluster:
    """The cluster `config` names (`scheduler` or `workers`), connected and checked."""
    distributed = _import_distributed()
    quieted = _quiet_logs()
    try:
        client, local = _connect(distributed, config, tuning.connect_timeout_s)
    except BaseException:
        _restore(quieted)
        raise
    try:
        address = config.scheduler or f"a local cluster of {config.workers} workers"
        infos = _check_workers(client, address, tuning)
        workers = client.scheduler_info(n_workers=-1)["workers"]
        num_threads = sum(int(worker["nthreads"]) for worker in workers.values()) or 1
    except BaseException:
        Cluster(client, local, "", 0, 0, None, quieted).close()
        raise
    duckdb_threads = config.threads
    if local is not None and duckdb_threads is None:
        cores = min(info["cores"] for info in infos.values())
        duckdb_threads = max(1, math.floor(cores / max(1, config.workers or 1)))
    logger.info("Dask: %d workers, %d threads (%s)", len(workers), num_threads, address)
    return Cluster(client, local, address, len(workers), num_threads, duckdb_threads, quieted)


def task_error(error: BaseException, what: str) -> BaseException:
    """What a task (or `what` on the cluster) raised, as the error to report: seqpack's own
    errors as they are, Dask's and the environment's worded as one line."""
    if isinstance(error, SeqpackError):
        return error
    name = type(error).__name__
    if name == "KilledWorker":
        return ConfigError(
            f"Dask workers died again and again while running {what} ({first_line(error)}); "
            f"a worker may run out of memory: give the workers more, or lower "
            f"{option('memory_limit')} or {option('threads')}"
        )
    if isinstance(error, ImportError):
        return ConfigError(
            f"a Dask worker cannot run {what}: {first_line(error)}; install seqpack-cli "
            f"{__version__} (pip install 'seqpack-cli[dask]=={__version__}') in every worker's "
            "environment"
        )
    if name in ("CommClosedError", "CancelledError", "FutureCancelledError") or isinstance(
        error, (OSError, TimeoutError)
    ):
        return ConfigError(
            f"lost the Dask cluster while running {what} ({name}: {first_line(error)}); check "
            "that the scheduler and its workers are running, then run prepare again"
        )
    return error


def no_workers_error(cluster: Cluster, what: str, waited_s: float) -> ConfigError:
    """The cluster lost every worker while the run waited for `what`."""
    if cluster.local is not None:
        fix = (
            f"a worker may run out of memory: give the workers more, or lower "
            f"{option('memory_limit')} or {option('threads')}"
        )
    else:
        fix = f"start some (dask worker {cluster.address}), then run prepare again"
    return ConfigError(
        f"the Dask scheduler at {cluster.address} has no workers left (waited {waited_s:g} s) "
        f"for {what}; {fix}"
    )


def _running(prefix: str, dask_worker: Any = None) -> list[str]:
    """The keys starting with `prefix` that this worker still executes (`Client.run`)."""
    state = getattr(dask_worker, "state", None)
    tasks = getattr(state, "tasks", {}) if state is not None else {}
    busy = ("executing", "long-running", "cancelled", "resumed")
    mine = [(str(key), task) for key, task in tasks.items() if str(key).startswith(prefix)]
    return [key for key, task in mine if task.state in busy]


def stop_tasks(cluster: Cluster, futures: Iterable[Any], prefix: str) -> None:
    """Cancel the run's tasks and wait until no worker executes one (a running task cannot be
    stopped: it finishes on its own, and may still write into the temporary directory)."""
    client = cluster.client
    try:
        client.cancel(list(futures), force=True)
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            running = client.run(_running, prefix)
            if not any(running.values()):
                return
            time.sleep(0.05)
        logger.warning("Dask tasks still running after %d s: %s", _STOP_TIMEOUT_S, running)
    except Exception as error:  # the cluster is gone: nothing runs there any more
        logger.debug("stopping the Dask tasks: %s", error)

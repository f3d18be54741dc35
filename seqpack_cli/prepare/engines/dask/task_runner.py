"""`TaskRunner`: one run's Dask tasks, submitted under keys of their own and gathered in order.

Every task of a run is keyed `seqpack-{run}-{phase}-{i}`, so the run's tasks can be found (and
cancelled, `client.stop_tasks`) by that prefix, and no two runs on one cluster share a key. The
results come back as the tasks finish, each passed through `keep` at once (so the driver holds
what it keeps of a result, not the result), with the progress bar advanced per task: by the
phase's weight (files, rows or ids) and by the count of the run's tasks. A task that fails
writing on a full disk is reported by `write_error`, the engine's wording of the local engine's
line for it. While it waits, the runner watches the cluster (`watch`): tasks never finish on a
cluster that has lost every worker, so after `patience_s` without one the run ends in one line.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from seqpack_cli.prepare.engines.dask.client import task_error
from seqpack_cli.progress import ProgressCallback

__all__ = ["Call", "TaskRunner"]

logger = logging.getLogger(__name__)

Call = tuple[Callable[..., Any], tuple[Any, ...], int]
"""A task: its function, its arguments, and its weight on the progress bar (files, rows, ids)."""

_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""A write that failed for lack of room: the output's filesystem, not the cluster."""
_POLL_S = 0.01  # how often a wait looks for finished tasks (a wave of tasks ends together)
_WORKERS_POLL_S = 1.0  # how often it asks the scheduler whether any worker is left


class TaskRunner:
    """The tasks of the run `run_id`: what was submitted, how far they are, how long each phase
    took."""

    def __init__(self, run_id: str, progress: ProgressCallback | None = None) -> None:
        self.run_id = run_id
        self.progress = progress
        self.futures: list[Any] = []
        """Every future submitted (the engine cancels them on an error)."""
        self.submitted = 0
        self.done = 0
        self.seconds: dict[str, float] = {}
        """Wall seconds of each phase (footers, histogram, pools, check ids, write pools)."""
        self.write_error: Callable[[OSError], BaseException] | None = None
        """How the engine words a task's failed write for lack of room (as the local engine)."""
        self._client: Any = None
        self._patience_s = 0.0
        self._no_workers: Callable[[str], BaseException] | None = None

    def watch(
        self, client: Any, patience_s: float, no_workers: Callable[[str], BaseException]
    ) -> None:
        """Watch `client`'s cluster while waiting for tasks: with no worker for `patience_s`
        seconds, raise `no_workers(what the run was waiting for)`."""
        self._client, self._patience_s, self._no_workers = client, patience_s, no_workers

    def prefix(self, phase: str) -> str:
        """The start of the Dask keys of this run's tasks of `phase` (`seqpack-RUN-PHASE-`)."""
        return f"seqpack-{self.run_id}-{phase.replace(' ', '_')}"

    def submit(self, client: Any, phase: str, calls: Sequence[Call], first: int = 0) -> list[Any]:
        """The calls submitted as tasks keyed `{prefix}-{first + i}`."""
        futures = [
            client.submit(function, *args, key=f"{self.prefix(phase)}-{first + i}", pure=False)
            for i, (function, args, _) in enumerate(calls)
        ]
        self.futures.extend(futures)
        self.submitted += len(futures)
        return futures

    def gather(
        self,
        phase: str,
        futures: Sequence[Any],
        calls: Sequence[Call],
        keep: Callable[[int, Any], Any] | None = None,
    ) -> list[Any]:
        """Each task's result (or what `keep(i, result)` makes of it, as it arrives), in order,
        reporting progress as they come; the first error ends the phase."""
        from distributed import as_completed

        started = time.perf_counter()
        position = {future.key: i for i, future in enumerate(futures)}
        results: list[Any] = [None] * len(futures)
        total = sum(weight for _, _, weight in calls)
        finished = 0
        self._report(phase, 0, total)
        completed = as_completed(futures)
        while not completed.is_empty():
            self._wait_for_one(completed, phase)
            future = next(completed)
            i = position[future.key]
            try:
                result = self._result(future, phase)
            except BaseException as error:
                raise self._error(error, f"task {future.key}") from None
            future.release()
            results[i] = result if keep is None else keep(i, result)
            finished += calls[i][2]
            self.done += 1
            self._report(phase, finished, total)
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - started
        logger.info("%s: %d tasks in %.2fs", phase, len(futures), self.seconds[phase])
        return results

    def _watch(self, phase: str) -> _Watch | None:
        if self._client is None or self._no_workers is None:
            return None
        return _Watch(self._client, self._patience_s, self._no_workers, f"the {phase} tasks")

    def _wait_for_one(self, completed: Any, phase: str) -> None:
        """Until a task of `completed` has finished, watching the cluster meanwhile."""
        watch = self._watch(phase)
        if watch is None:
            return
        while not completed.has_ready():
            time.sleep(_POLL_S)
            watch.check()

    def _result(self, future: Any, phase: str) -> Any:
        """The finished task's result. Fetching it waits too: where the worker holding it died,
        Dask runs the task again, which needs a worker."""
        watch = self._watch(phase)
        if watch is None:
            return future.result()
        while True:
            try:
                return future.result(timeout=_WORKERS_POLL_S)
            except TimeoutError:
                if future.status == "error":  # the task's own TimeoutError
                    raise
                watch.check()

    def _error(self, error: BaseException, what: str) -> BaseException:
        full = isinstance(error, OSError) and error.errno in _FULL
        if full and self.write_error is not None:
            assert isinstance(error, OSError)
            return self.write_error(error)
        return task_error(error, what)

    def _report(self, phase: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(phase, done, total)
            self.progress("dask tasks", self.done, self.submitted)


class _Watch:
    """A wait's watch over the cluster: `check` (called often) asks the scheduler for its
    workers now and then, and raises `no_workers(what)` once there has been none for
    `patience_s` seconds."""

    def __init__(
        self, client: Any, patience_s: float, no_workers: Callable[[str], BaseException], what: str
    ) -> None:
        self.client, self.patience_s, self.no_workers = client, patience_s, no_workers
        self.what = what
        self.checked = time.monotonic()
        self.alone_since: float | None = None

    def check(self) -> None:
        now = time.monotonic()
        if now - self.checked < _WORKERS_POLL_S:
            return
        self.checked = now
        if self.client.nthreads():
            self.alone_since = None
        elif self.alone_since is None:
            self.alone_since = now
        elif now - self.alone_since >= self.patience_s:
            raise self.no_workers(self.what)

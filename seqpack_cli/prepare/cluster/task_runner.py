"""`TaskRunner`: one run's Dask tasks, submitted under keys of their own and gathered in order.

Every task of a run is keyed `seqpack-{run}-{phase}-{i}`, so the run's tasks can be found (and
cancelled, `client.stop_tasks`) by that prefix, and no two runs on one cluster share a key. The
results come back as the tasks finish, each passed through `keep` at once (so the driver holds
what it keeps of a result, not the result), with the progress bar advanced per task: by the
phase's weight (files, rows or ids) and by the count of the run's tasks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from seqpack_cli.prepare.cluster.client import task_error
from seqpack_cli.progress import ProgressCallback

__all__ = ["Call", "TaskRunner"]

logger = logging.getLogger(__name__)

Call = tuple[Callable[..., Any], tuple[Any, ...], int]
"""A task: its function, its arguments, and its weight on the progress bar (files, rows, ids)."""


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
        for future in as_completed(futures):
            i = position[future.key]
            try:
                result = future.result()
            except BaseException as error:
                raise task_error(error, f"task {future.key}") from None
            future.release()
            results[i] = result if keep is None else keep(i, result)
            finished += calls[i][2]
            self.done += 1
            self._report(phase, finished, total)
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - started
        logger.info("%s: %d tasks in %.2fs", phase, len(futures), self.seconds[phase])
        return results

    def _report(self, phase: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(phase, done, total)
            self.progress("dask tasks", self.done, self.submitted)

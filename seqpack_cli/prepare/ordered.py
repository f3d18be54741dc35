"""Work units decoded by threads, handed over in order, in bounded memory: `ordered_parallel`.

The one-pass token store decodes parquet row groups (pyarrow releases the GIL while it decodes)
in worker threads while one consumer writes their results in file order. A unit (one row group)
yields several items (Arrow batches, decoded and cast); workers take units in order, and an
item of a unit ahead of the one the consumer is on waits while more than `budget_bytes` are
already waiting, so memory stays bounded whatever the units' sizes. The unit the consumer is on
never waits (it is what frees the memory), so the pipeline cannot deadlock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

from seqpack_cli.interrupts import signals_held

__all__ = ["Sized", "ordered_parallel"]


class Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


Unit = TypeVar("Unit")
Item = TypeVar("Item", bound=Sized)

_POLL_SECONDS = 0.1  # waits wake up this often, so signals reach the main thread


class _Stopped(Exception):
    """Raised inside a worker once the consumer has gone."""


class _Pipeline(Generic[Unit, Item]):
    def __init__(
        self,
        units: Sequence[Unit],
        produce: Callable[[Unit], Iterable[Item]],
        budget_bytes: int,
    ) -> None:
        self.units = units
        self.produce = produce
        self.budget = budget_bytes
        self.cond = threading.Condition()
        self.queues: list[deque[Item]] = [deque() for _ in units]
        self.done = [False] * len(units)
        self.errors: list[BaseException | None] = [None] * len(units)
        self.waiting = 0  # bytes produced and not yet taken
        self.head = 0  # the unit the consumer is on
        self.next_unit = 0
        self.stop = False

    def work(self) -> None:
        while True:
            with self.cond:
                if self.stop or self.next_unit >= len(self.units):
                    return
                index = self.next_unit
                self.next_unit += 1
            try:
                for item in self.produce(self.units[index]):
                    self._put(index, item)
            except _Stopped:
                return
            except BaseException as error:  # handed to the consumer, in its turn
                with self.cond:
                    self.errors[index] = error
            with self.cond:
                self.done[index] = True
                self.cond.notify_all()

    def _put(self, index: int, item: Item) -> None:
        size = item.nbytes
        with self.cond:
            while self.waiting + size > self.budget and index != self.head and not self.stop:
                self.cond.wait(_POLL_SECONDS)
            if self.stop:
                raise _Stopped
            self.waiting += size
            self.queues[index].append(item)
            self.cond.notify_all()

    def take(self) -> Iterator[Item]:
        for index in range(len(self.units)):
            with self.cond:
                self.head = index
                self.cond.notify_all()
            while True:
                with self.cond:
                    while not self.queues[index] and not self.done[index]:
                        self.cond.wait(_POLL_SECONDS)
                    if not self.queues[index]:
                        error = self.errors[index]
                        if error is not None:
                            raise error
                        break
                    item = self.queues[index].popleft()
                    self.waiting -= item.nbytes
                    self.cond.notify_all()
                yield item


def ordered_parallel(
    units: Sequence[Unit],
    produce: Callable[[Unit], Iterable[Item]],
    *,
    workers: int,
    budget_bytes: int,
) -> Generator[Item, None, None]:
    """Every item of `produce(unit)` for each unit, in unit order, produced by `workers` threads
    at once; items waiting for the consumer take at most about `budget_bytes` (besides those of
    the unit it is on). An exception raised by `produce` is raised here when its unit's turn
    comes; closing the iterator early stops the workers (and waits for them)."""
    pipeline: _Pipeline[Unit, Item] = _Pipeline(units, produce, budget_bytes)
    finished = [threading.Event() for _ in range(max(1, min(workers, len(units))))]

    def run(event: threading.Event) -> None:
        try:
            pipeline.work()
        finally:
            event.set()

    threads = [
        threading.Thread(target=run, args=(event,), name="seqpack-read", daemon=True)
        for event in finished
    ]
    for thread in threads:
        thread.start()
    try:
        yield from pipeline.take()
    finally:
        with pipeline.cond:
            pipeline.stop = True
            pipeline.cond.notify_all()
        # Waited on with signals held (never join()): a worker still inside pyarrow when the
        # interpreter exits could crash it; each one stops after its current batch.
        with signals_held():
            for event in finished:
                event.wait()

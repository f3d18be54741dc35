"""How much work a call does, counted rather than timed, for tests of a cost bound.

A wall-clock bound ("under a second") fails on a loaded machine and says nothing on a fast one;
what a bound like "O(distinct lengths), not O(sequences)" promises is that the work does not
grow with the counts. `measure(call)` counts the Python lines the call executes (in this thread)
and the peak of the memory it allocates (numpy's arrays included), numbers that do not change
with the machine's load, so a test compares them between a small input and a huge one.
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any


@dataclass(frozen=True)
class Work:
    result: Any
    lines: int  # Python lines executed, in every function the call ran
    peak_bytes: int  # the most memory allocated at once while it ran


def measure(call: Callable[[], Any]) -> Work:
    """Run `call()` and count its work (see the module docstring)."""
    lines = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
        return local

    tracing_before = tracemalloc.is_tracing()
    if tracing_before:
        tracemalloc.reset_peak()
    else:
        tracemalloc.start()
    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local)
    try:
        before, _ = tracemalloc.get_traced_memory()
        result = call()
    finally:
        sys.settrace(previous)
        _, peak = tracemalloc.get_traced_memory()
        if not tracing_before:
            tracemalloc.stop()
    return Work(result, lines, peak - before)

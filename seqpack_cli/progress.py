"""Progress reporting: the library calls a plain callback, the CLI draws it with rich.

Library functions that do long work take `progress: ProgressCallback | None` and call
`progress(phase, done, total)` as they go (`total` may be 0 when unknown). They never draw
anything themselves. A phase is named by the work it counts ("histogram" and "token store"
count rows, "pools" ids), never by a unit it does not count.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ProgressCallback", "rich_progress"]

ProgressCallback = Callable[[str, int, int], None]


@contextmanager
def rich_progress(enabled: bool = True) -> Iterator[ProgressCallback | None]:
    """Yield a callback that draws one rich progress bar per phase on stderr.

    Yields None (no drawing at all) when disabled or when stderr is not a terminal, so
    `--quiet`, `--json` and piped output stay clean.
    """
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class Counts(ProgressColumn):
        """`done/total` with thousands separators (rich's MofNCompleteColumn has none)."""

        def render(self, task: Any) -> Text:
            total = "?" if task.total is None else f"{int(task.total):,}"
            return Text(f"{int(task.completed):,}/{total}", style="progress.download")

    tasks: dict[str, Any] = {}
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        Counts(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as bar:

        def report(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total or None)
            bar.update(tasks[phase], completed=done, total=total or None)

        yield report

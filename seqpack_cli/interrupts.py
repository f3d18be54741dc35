"""Ctrl-C and SIGTERM as exceptions, so that cleanups run, and held back while output commits.

`Interrupts` turns SIGINT into `KeyboardInterrupt` and SIGTERM into `Terminated` (a `SystemExit`
with the shell's code 143), and from `defer()` on only records them: a signal that comes once
the output is being put in place does not turn a finished job into an interrupted one. The CLI
holds one for a whole command; a `PreparedWriter` uses the one installed, or installs its own.

Standard library only (no numpy), so the CLI imports it at start-up for free.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = [
    "Interrupts",
    "Terminated",
    "signal_exception",
    "signal_name",
    "signals_blocked",
    "signals_held",
]


class Terminated(SystemExit):
    """SIGTERM as an exception, so cleanups run; exits with the shell's code for it (143) when
    nothing catches it."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def signal_exception(signum: int) -> BaseException:
    """The exception signal `signum` becomes: `KeyboardInterrupt` for SIGINT, else `Terminated`."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def signal_name(signum: int) -> str:
    """`signum` as a person reads it in a log line."""
    return "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name


class Interrupts:
    """SIGINT and SIGTERM as exceptions (`KeyboardInterrupt`, `Terminated`) that `defer()`
    turns into a note.

    As a context manager it takes over the default handlers (only those, only in the main
    thread) and puts them back on exit. Once `defer()` was called a signal is only recorded in
    `late`: the work it would have interrupted is done. `raised` is the signal it last raised
    (a library may have turned the exception into its own error). The CLI holds one for a whole
    command; a `PreparedWriter` uses the one installed, or installs its own, and defers it from
    its commit on.
    """

    def __init__(self) -> None:
        self.raised: int | None = None
        self.late: int | None = None
        self.deferring = False
        self._previous: dict[int, Any] = {}

    @classmethod
    def installed(cls) -> Interrupts | None:
        """The `Interrupts` whose handler is installed now, if any."""
        owner = getattr(signal.getsignal(signal.SIGINT), "__self__", None)
        if owner is None:
            owner = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
        return owner if isinstance(owner, cls) else None

    def install(self) -> bool:
        """Take over the default SIGINT and SIGTERM handlers; False if none was taken over."""
        if threading.current_thread() is not threading.main_thread():
            return False
        defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
        for signum, default in defaults.items():
            if signal.getsignal(signum) is default:
                self._previous[signum] = signal.signal(signum, self._handle)
        return bool(self._previous)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def defer(self) -> None:
        """From now on only record signals (`late`): the work they would interrupt is done."""
        self.deferring = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.deferring:
            self.late = signum
            return
        self.raised = signum
        raise signal_exception(signum)

    def __enter__(self) -> Interrupts:
        self.install()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Only record SIGINT and SIGTERM while the block runs (where an `Interrupts` is installed
    and not deferring already), then raise the one that came.

    For a step that an exception must not enter: importing DuckDB runs Python code inside its
    extension's initialisation, which aborts the process (SIGABRT, a "Critical nanobind error"
    traceback) or swallows the exception (the run then goes on) when a signal raises there.
    """
    interrupts = Interrupts.installed()
    if interrupts is None or interrupts.deferring:
        yield
        return
    interrupts.defer()
    try:
        yield
    finally:
        interrupts.deferring = False
        late, interrupts.late = interrupts.late, None
        if late is not None:
            interrupts.raised = late
            raise signal_exception(late)


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back in this thread (for handlers that are not `Interrupts`)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    blocked = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)

"""Creating every pool file in a background thread while the caller scans: `BackgroundPoolFiles`.

Creating a file costs 20 us to 1 ms on local and network filesystems: with thousands of distinct
lengths, creating them all ahead (`seqpack_cli.prepared.pool_files.PoolFiles.create`, header
included) in a thread of their own hides that behind the scan. The first append waits for it.

The thread is waited for through an Event, never Thread.join: on CPython 3.11 a join that a
signal handler's exception cuts short (SIGTERM or Ctrl-C while the first append waits) marks the
thread as ended while it runs on, and every later join returns at once: the cleanup then deleted
the directory while the thread still created pool files in it, and one created meanwhile was left
behind. An Event keeps no such state.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from seqpack_cli.prepared.pool_files import PoolFiles

__all__ = ["BackgroundPoolFiles"]

# How often `stop` looks whether a thread that never set its Event has ended anyway.
_STOP_POLL_S = 0.05


class BackgroundPoolFiles:
    """The `PoolFiles` of `counts` under `root`, their files created by a thread of their own.

    `start()` starts the thread; `ready()` waits for it (from any thread) and returns the pool
    files, or raises what creating them raised; `stop()` ends it early and waits until it touches
    no file again, so that the directory can be removed.
    """

    def __init__(self, root: str | os.PathLike[str], counts: Mapping[int, int]) -> None:
        self.pools = PoolFiles(root, counts)
        self._stop = threading.Event()
        self._created = threading.Event()  # set once the thread touches no file again
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        # Set before start(): a signal that comes inside it still leaves the thread to stop.
        self._thread = threading.Thread(target=self._create, name="seqpack-create", daemon=True)
        self._thread.start()

    def _create(self) -> None:
        try:
            self.pools.create(self._stop)
        except BaseException as error:  # handed to the first `ready()`
            self._error = error
        finally:
            self._created.set()

    def ready(self) -> PoolFiles:
        """The pool files, once every one is created; raises what creating them raised."""
        if self._thread is not None:
            self._created.wait()  # once set, waiting again (from any thread) returns at once
        if self._error is not None:
            raise self._error
        return self.pools

    def stop(self) -> None:
        """Stop creating files and wait until the thread touches none again."""
        self._stop.set()  # a thread that starts only now creates nothing
        thread, self._thread = self._thread, None
        while thread is not None and not self._created.wait(_STOP_POLL_S):
            if not thread.is_alive():  # a signal came inside start(): it never ran
                break

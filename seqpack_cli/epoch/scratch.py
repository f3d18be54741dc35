"""Work arrays reused from batch to batch (`Scratch`), for the vectorised paths of an epoch.

A batch of an epoch goes through a few dozen arrays of its size: the plan's batch drawing
(`seqpack_cli.epoch.batches`), the pool reads (`seqpack_cli.epoch.pools`) and the Feistel kernels
(`seqpack_cli.epoch.feistel`) all take theirs from one `Scratch`, by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Scratch"]


class Scratch:
    """Work arrays reused from call to call, by name.

    Allocated afresh each time, glibc returns the memory of a batch's arrays to the OS at each
    batch and faults it back in at the next (measured: a quarter of the time of an epoch over
    memory-mapped pools). One Scratch per iteration keeps them: memory is that of the largest
    batch, held while the iteration lives. `aliases` maps a name to another whose array is dead
    whenever this one is used: both get the same memory (whatever their dtypes).
    """

    __slots__ = ("_aliases", "_buffers")

    def __init__(self, aliases: dict[str, str] | None = None) -> None:
        self._buffers: dict[str, np.ndarray] = {}
        self._aliases = dict(aliases or {})

    def array(self, name: str, size: int, dtype: Any) -> np.ndarray:
        """An uninitialised 1-d array of `size` elements: the memory of the last array of this
        name (or its alias) when it is large enough. Valid until the next call for that name."""
        dtype = np.dtype(dtype)
        num_bytes = size * dtype.itemsize
        key = self._aliases.get(name, name)
        buffer = self._buffers.get(key)
        if buffer is None or len(buffer) < num_bytes:
            # A little headroom: batches differ slightly in size.
            buffer = np.empty(num_bytes + num_bytes // 8, dtype=np.uint8)
            self._buffers[key] = buffer
        return buffer[:num_bytes].view(dtype)

    def iota(self, size: int) -> np.ndarray:
        """`np.arange(size)` (int64), read-only: never write to it."""
        array = self._buffers.get("iota")
        if array is None or len(array) < size:
            array = np.arange(size + size // 8, dtype=np.int64)
            array.flags.writeable = False
            self._buffers["iota"] = array
        return array[:size]

    def hold(self, name: str, array: np.ndarray) -> None:
        """Keep `array` (one that numpy had to allocate, e.g. an argsort) until the next one of
        this name: its memory is then freed in the middle of the heap, where glibc reuses it,
        rather than at its top, where glibc returns it to the OS once the free space exceeds
        its trim threshold (measured: half the page faults of a batch)."""
        self._buffers[f"held.{name}"] = array

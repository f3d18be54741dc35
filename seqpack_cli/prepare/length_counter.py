"""The length histogram counted in memory that follows the number of distinct lengths, never
the number of sequences: `LengthCounter` (the one pass counts its batches' lengths with it, the
Dask driver adds up its groups' histograms)."""

from __future__ import annotations

from collections import Counter

import numpy as np

__all__ = ["LengthCounter"]

_DENSE_LENGTHS = 1 << 20  # lengths below this are counted in an array, longer ones in a Counter


class LengthCounter:
    """The histogram `{length: count}` of the lengths added, in memory that follows the number of
    distinct lengths (an array for short lengths, a Counter for long ones)."""

    def __init__(self) -> None:
        self.dense = np.zeros(0, dtype=np.int64)
        self.sparse: Counter[int] = Counter()

    def add(self, lengths: np.ndarray) -> None:
        """Count one sequence of each of `lengths`."""
        if not lengths.size:
            return
        if int(lengths.max()) >= _DENSE_LENGTHS:
            long = lengths >= _DENSE_LENGTHS
            self.add_counts(*np.unique(lengths[long], return_counts=True))
            lengths = lengths[~long]
        counts = np.bincount(lengths, minlength=self.dense.size)
        if counts.size > self.dense.size:
            counts[: self.dense.size] += self.dense
            self.dense = counts
        else:
            self.dense += counts

    def add_counts(self, lengths: np.ndarray, counts: np.ndarray) -> None:
        """Count `counts[k]` sequences of length `lengths[k]` (the lengths distinct): a histogram
        added (the Dask engine's groups', as they arrive)."""
        long = lengths >= _DENSE_LENGTHS
        self.sparse.update(dict(zip(lengths[long].tolist(), counts[long].tolist(), strict=True)))
        short, short_counts = lengths[~long], counts[~long]
        if not short.size:
            return
        if int(short.max()) >= self.dense.size:
            grown = np.zeros(int(short.max()) + 1, dtype=np.int64)
            grown[: self.dense.size] = self.dense
            self.dense = grown
        self.dense[short] += short_counts  # distinct lengths: no index twice

    def histogram(self) -> dict[int, int]:
        present = np.flatnonzero(self.dense)
        counts = dict(zip(present.tolist(), self.dense[present].tolist(), strict=True))
        counts.update(self.sparse)
        return {length: counts[length] for length in sorted(counts)}

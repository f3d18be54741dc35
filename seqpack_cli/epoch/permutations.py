"""Stateless seeded permutations: `FeistelPermutation` (one) and `FeistelFamily` (many at once).

An epoch visits its bins in the order of one `FeistelPermutation` and reads each id pool through
another (`seqpack_cli.epoch.plan`); a batch permutes the positions of thousands of pools in one
vectorised pass with a `FeistelFamily`. The network itself, and cycle walking, are in
`seqpack_cli.epoch.feistel`. Each permutation is a pure function of (n, seed): identical in
every process, on every machine and with every numpy version.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.epoch.feistel import (
    MAX_SCALAR_WALKERS,
    feistel_inplace,
    feistel_key,
    feistel_scalar,
    permute_walking,
    scalar_params,
    walk_scalar,
    width_runs,
    word_width,
)
from seqpack_cli.epoch.scratch import Scratch
from seqpack_cli.errors import ConfigError
from seqpack_cli.seeding import INT64_MAX, check_required_seed

__all__ = ["FeistelFamily", "FeistelPermutation"]


class FeistelPermutation:
    """A stateless seeded bijection of `[0, n)`: `perm[i]` in O(1) time and memory.

    A Feistel network of `NUM_ROUNDS` rounds (`NUM_ROUNDS_SMALL` for words under `SMALL_WIDTH`
    bits; see `seqpack_cli.epoch.feistel`) permutes the `w`-bit words, `2**w` the smallest power
    of two >= n (halves of `w // 2` and `w - w // 2` bits; round function: the splitmix64
    finaliser of the right half xor a 64-bit key drawn from blake2b(seed, n) xor a round
    constant). Words that land at or beyond `n` are fed through the network again ("cycle
    walking") until they land inside, which restricts the bijection of `[0, 2**w)` to a
    bijection of `[0, n)`; fewer than two passes are needed on average since `2**w < 2n`.

    The permutation is a pure function of (n, seed): identical in every process and machine.
    """

    __slots__ = ("_key", "_left_bits", "_np", "_right_bits", "n", "seed")

    def __init__(self, n: int, seed: int) -> None:
        self.n = check_int(
            "permutation size",
            n,
            minimum=0,
            maximum=INT64_MAX,
            expected="an integer from 0 to 2**63 - 1",
            fix="pass the number of elements to permute",
        )
        self.seed = check_required_seed(seed)
        width = word_width(self.n)
        self._left_bits = width // 2
        self._right_bits = width - self._left_bits
        self._key = feistel_key(self.n, self.seed)
        self._np = (*scalar_params(width), np.array(self._key, dtype=np.uint64))

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"FeistelPermutation(n={self.n}, seed={self.seed})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FeistelPermutation):
            return NotImplemented
        return (self.n, self.seed) == (other.n, other.seed)

    def __hash__(self) -> int:
        return hash((FeistelPermutation, self.n, self.seed))

    def __getitem__(self, index: int) -> int:
        i = operator.index(index)
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(f"index {index} is out of range for a permutation of size {self.n}")
        x = feistel_scalar(i, self._left_bits, self._right_bits, self._key)
        while x >= self.n:
            x = feistel_scalar(x, self._left_bits, self._right_bits, self._key)
        return x

    def take(self, indices: np.ndarray) -> np.ndarray:
        """`[perm[i] for i in indices]` as an int64 array of the same shape, vectorised.

        `indices` is an integer array (any shape) with values in `[0, n)`.
        """
        values = np.asarray(indices)
        if values.dtype.kind not in "iu":
            raise ConfigError(
                f"permutation indices have dtype {values.dtype}; expected an integer array"
            )
        if values.size and (int(values.min()) < 0 or int(values.max()) >= self.n):
            raise IndexError(
                f"permutation indices span [{int(values.min())}, {int(values.max())}]; "
                f"expected values in [0, {self.n})"
            )
        words = values.astype(np.uint64).ravel()
        self.permute_inplace(words)
        return words.view(np.int64).reshape(values.shape)

    def permute_inplace(self, x: np.ndarray, scratch: Scratch | None = None) -> None:
        """Replace each word of the 1-d uint64 array `x` by its image, in place (no checks:
        the caller guarantees 0 <= x[i] < n). The fast path under `take`."""
        feistel_inplace(x, *self._np, scratch)
        walking = np.flatnonzero(x >= self.n)
        while walking.size > MAX_SCALAR_WALKERS:
            again = x[walking]
            feistel_inplace(again, *self._np, scratch)
            x[walking] = again
            walking = walking[again >= self.n]
        for i in walking.tolist():
            x[i] = walk_scalar(int(x[i]), self.n, self._left_bits, self._right_bits, self._key)


class FeistelFamily:
    """Several FeistelPermutations applied element-wise in one vectorised pass.

    `family.take(members, indices)[i] == perms[members[i]][indices[i]]`. An epoch draws ids from
    thousands of pools at once, so the cost must not grow with the number of distinct
    permutations in a batch. Elements are put in order of word width (free when the perms are
    ordered by width and the members sorted, as an EpochPlan does; one sort otherwise). Each pass
    (the first, then each round of cycle walking on the elements still out of range) runs the
    network once per run of equal width (at most 64 runs) with scalar shifts and masks and only
    the key looked up per element; runs too short to amortise the ~60 array operations of a pass
    share one pass with per-element shifts and masks.
    """

    __slots__ = ("_by_width", "_key", "_n", "_run_first", "_run_width", "_width")

    def __init__(self, perms: Sequence[FeistelPermutation]) -> None:
        self._n = np.array([p.n for p in perms], dtype=np.uint64)
        self._width = np.array([p._left_bits + p._right_bits for p in perms], dtype=np.uint8)
        self._key = np.array([p._key for p in perms], dtype=np.uint64)
        # Members grouped by width, for `permute_grouped`: run r is members
        # [_run_first[r], _run_first[r + 1]), all of width _run_width[r].
        widths = self._width.astype(np.int64)
        self._by_width = bool(len(widths) < 2 or (widths[1:] >= widths[:-1]).all())
        first = [0, *(np.flatnonzero(widths[1:] != widths[:-1]) + 1).tolist()]
        self._run_first = [*first, len(widths)] if len(widths) else [0]
        self._run_width = widths[first].tolist() if len(widths) else []

    def __len__(self) -> int:
        return len(self._n)

    def take(self, members: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """Permute `indices[i]` by permutation `members[i]`, for 1-d arrays of equal length.

        Returns a new uint64 array. No range checks: the caller guarantees
        `0 <= indices[i] < perms[members[i]].n`.
        """
        x = np.array(indices, dtype=np.uint64)
        self.permute_inplace(members, x)
        return x

    def permute_inplace(self, members: np.ndarray, x: np.ndarray) -> None:
        """`take` without the copy: permutes the 1-d uint64 array `x` in place."""
        members = np.asarray(members).astype(np.intp, copy=False)
        if not len(members):
            return
        if self._by_width and (len(members) < 2 or (members[1:] >= members[:-1]).all()):
            starts = np.searchsorted(members, np.arange(len(self) + 1))
            self.permute_grouped(x, members, starts)
            return
        widths = self._width.take(members)
        order = np.argsort(widths, kind="stable")
        grouped = x[order]
        keys = self._key.take(members[order])
        run_widths, run_bounds = width_runs(widths[order])
        sizes = self._n.take(members[order])
        permute_walking(grouped, keys, sizes, run_widths, run_bounds, Scratch())
        x[order] = grouped

    def permute_grouped(
        self,
        x: np.ndarray,
        members: np.ndarray,
        starts: Sequence[int] | np.ndarray,
        scratch: Scratch | None = None,
    ) -> None:
        """Permute the 1-d uint64 array `x` in place, word i by permutation `members[i]`, where
        the words come member after member: `members` is sorted and member m's words are
        `x[starts[m]:starts[m + 1]]` (`len(starts) == len(family) + 1`). The hot path of an
        epoch: no sort, no per-element look-up of widths, work arrays from `scratch`.

        The family's permutations must be ordered by width (as an EpochPlan orders them); no
        range checks.
        """
        if not self._by_width:
            raise ValueError("permute_grouped needs a family ordered by width")
        scratch = scratch or Scratch()
        n = len(x)
        keys = self._key.take(members, out=scratch.array("family.keys", n, np.uint64), mode="clip")
        sizes = self._n.take(members, out=scratch.array("family.sizes", n, np.uint64), mode="clip")
        bounds = [int(starts[m]) for m in self._run_first]
        permute_walking(x, keys, sizes, self._run_width, bounds, scratch)

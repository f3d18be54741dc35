"""Stable seeds and stateless seeded permutations.

Everything here is a pure function of its integer arguments, computed with fixed-width
arithmetic and blake2b, so the same arguments give the same result in every process, on every
machine and with every numpy version. Nothing depends on Python's `hash()` (salted per process
for strings) or on a numpy random stream.

- `seed_from_components(*components)`: a 63-bit seed from any tuple of integers
  (epoch, rank, worker, dataset, ...).
- `shuffle_bins(bin_indices, seed)`: a shuffled copy of a list.
- `FeistelPermutation(n, seed)`: the i-th element of a seeded permutation of `[0, n)` in O(1)
  time and memory, without building the permutation (used for the id pools of an epoch).
- `FeistelFamily(perms)`: many such permutations applied element-wise in one vectorised pass.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import struct
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from seqpack_cli.errors import ConfigError

__all__ = ["FeistelFamily", "FeistelPermutation", "seed_from_components", "shuffle_bins"]

T = TypeVar("T")

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_MASK63 = (1 << 63) - 1
_MASK64 = (1 << 64) - 1
# blake2b personalisation: changing it (or the encoding below) changes every seed, so it is
# versioned like a file format.
_PERSON = b"seqpack.seed.v1"
# Domain tags keep the seeds derived for different purposes apart from any user tuple.
_FEISTEL_TAG = 0x5EED_FE15_7E1
_SHUFFLE_TAG = 0x5EED_5_4FF1E

# The splitmix64 finaliser (Steele, Lea & Flood 2014): a bijection of 64-bit words in which
# every output bit depends on every input bit. Keyed by xoring the round key in first, it is
# the Feistel round function.
_MIX_1 = 0xBF58476D1CE4E5B9
_MIX_2 = 0x94D049BB133111EB


def _u64(value: int) -> np.ndarray:
    """`value` as a 0-d uint64 array. The kernels below pass their constants to ufuncs as 0-d
    arrays: numpy takes them in ~0.45 us per call, a numpy scalar in ~0.7-1.1 us (it is converted
    on every call), and a Feistel pass makes ~64 ufunc calls per slice of words."""
    return np.array(value, dtype=np.uint64)


_NP_MIX_1 = _u64(_MIX_1)
_NP_MIX_2 = _u64(_MIX_2)
_NP_30 = _u64(30)
_NP_27 = _u64(27)
_NP_31 = _u64(31)

# Luby-Rackoff: 4 rounds of a pseudo-random function give a strong pseudo-random permutation.
# Words under 8 bits (permutations of at most 128 elements) get 8 rounds: with halves of a few
# bits each round function is one of few possible maps, and with 4 rounds the permutations of,
# say, 5 elements are visibly non-uniform (chi-square of the position matrix ~5x its
# expectation; ~1.4x with 8 rounds). Such pools hold few ids, so the extra rounds cost nothing
# that matters.
NUM_ROUNDS = 4
NUM_ROUNDS_SMALL = 8
SMALL_WIDTH = 8
# Round r xors C_r into the key (multiples of the 64-bit golden ratio: every bit differs between
# rounds), so one key per permutation serves all rounds.
_ROUND_CONSTANTS = [((r + 1) * 0x9E3779B97F4A7C15) & _MASK64 for r in range(NUM_ROUNDS_SMALL)]
_NP_ROUND_CONSTANTS = [_u64(c) for c in _ROUND_CONSTANTS]
# Words per kernel slice: 4 buffers of 16 Ki words (512 KiB) stay in a 1-2 MiB L2 cache, and
# the per-call overhead of numpy (~60 calls per slice) stays small against the work.
_KERNEL_SLICE = 1 << 14


def _component(value: Any, position: int) -> int:
    """One component as a Python int in the int64 range, or a ConfigError saying why not."""
    if isinstance(value, (bool, np.bool_)):
        # True == 1 would silently give the same seed as 1; a flag is almost always a mistake.
        raise ConfigError(
            f"seed component {position} is the bool {value!r}; expected an integer "
            "(pass int(flag) if a flag is really meant to change the seed)"
        )
    try:
        number = operator.index(value)
    except TypeError:
        raise ConfigError(
            f"seed component {position} is {value!r} of type {type(value).__name__}; "
            "expected an integer (epoch, rank, worker id, ...): convert it with int() "
            "or derive an integer from it first"
        ) from None
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise ConfigError(
            f"seed component {position} is {number}, outside the signed 64-bit range "
            f"[{_INT64_MIN}, {_INT64_MAX}]; reduce it (e.g. take it modulo 2**63)"
        )
    return number


def seed_from_components(*components: int) -> int:
    """A stable, non-negative 63-bit seed from any tuple of integers.

    The seed is the blake2b digest (8 bytes, personalisation `seqpack.seed.v1`) of the number of
    components followed by each component, all as little-endian signed 64-bit integers, read as
    a little-endian integer and masked to 63 bits. It is the same in every process and on every
    machine, and different tuples (including tuples of different lengths, such as `(1,)` and
    `(1, 0)`) give unrelated seeds.

    Components are Python or numpy integers in the int64 range; floats, strings and bools are
    refused with a ConfigError (a float epoch or a string name has no canonical integer form).
    """
    values = [_component(value, position) for position, value in enumerate(components)]
    payload = struct.pack(f"<q{len(values)}q", len(values), *values)
    digest = hashlib.blake2b(payload, digest_size=8, person=_PERSON).digest()
    return int.from_bytes(digest, "little") & _MASK63


def _optional_seed(seed: Any, option: str) -> int | None:
    if seed is None:
        return None
    if isinstance(seed, (bool, np.bool_)):
        raise ConfigError(f"{option} is the bool {seed!r}; expected an integer or None")
    try:
        return operator.index(seed)
    except TypeError:
        raise ConfigError(
            f"{option} is {seed!r} of type {type(seed).__name__}; expected an integer or None "
            "(use seed_from_components(epoch, ...) to build one)"
        ) from None


def _mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (in place; returns it)."""
    values ^= values >> _NP_30
    values *= _NP_MIX_1
    values ^= values >> _NP_27
    values *= _NP_MIX_2
    values ^= values >> _NP_31
    return values


def shuffle_bins(bin_indices: Sequence[T], seed: int | None = None) -> list[T]:
    """A shuffled copy of `bin_indices`; the input is never modified.

    With `seed=None` the copy keeps the input order. With a seed the order is a pure function of
    (seed, len(bin_indices)): each position gets the 64-bit key splitmix64(position xor k), k
    derived from the seed with `seed_from_components`, and positions are sorted by key (the keys
    are distinct: both steps are bijections of 64-bit words). Unlike a numpy random stream this
    never changes with the numpy version.
    """
    items = list(bin_indices)
    key = _optional_seed(seed, "seed")
    if key is None or len(items) < 2:
        return items
    salt = np.uint64(seed_from_components(_SHUFFLE_TAG, key))
    keys = np.arange(len(items), dtype=np.uint64)
    keys ^= salt
    order = np.argsort(_mix64(keys), kind="stable")
    return [items[i] for i in order.tolist()]


def _feistel_key(n: int, seed: int) -> int:
    """The 64-bit key of the permutation of size n with this seed (round r uses key ^ C_r)."""
    payload = struct.pack("<3q", _FEISTEL_TAG, seed, n)
    digest = hashlib.blake2b(payload, digest_size=8, person=_PERSON).digest()
    return int.from_bytes(digest, "little")


def _num_rounds(width: int) -> int:
    return NUM_ROUNDS_SMALL if width < SMALL_WIDTH else NUM_ROUNDS


class Scratch:
    """Work arrays reused from call to call, by name (an internal helper of the vectorised
    paths here and in `epoch`).

    A batch of an epoch goes through a few dozen arrays of its size; allocated afresh each
    time, glibc returns their memory to the OS at each batch and faults it back in at the next
    (measured: a quarter of the time of an epoch over memory-mapped pools). One Scratch per
    iteration keeps them: memory is that of the largest batch, held while the iteration lives.
    `aliases` maps a name to another whose array is dead whenever this one is used: both get
    the same memory (whatever their dtypes).
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


def _feistel_inplace(
    x: np.ndarray,
    rounds: int,
    left_bits: Any,
    right_bits: Any,
    left_mask: Any,
    right_mask: Any,
    key: Any,
    scratch: Scratch | None = None,
) -> None:
    """Run `rounds` Feistel rounds on the uint64 words of the 1-d array `x`, in place.

    Each other parameter is a uint64 scalar (a 0-d array, or a numpy scalar) or a 1-d array
    shaped like `x` (one value per element). A round maps (L, R) -> (R, L xor F_r(R)), L the high
    `la` bits and R the low `lb` bits of the word; the halves swap sizes every round, which keeps
    each round a bijection when the width is odd. F_r(R) = splitmix64(R xor key xor C_r), cut to
    the bits of L.

    The halves are kept in two arrays for all the rounds (split once, joined once), so a round is
    11 array operations (12 with a per-element key) instead of the 16 of packing and unpacking
    words every round. The work runs in slices of `_KERNEL_SLICE` words with three reused
    scratch buffers, so the operations stay in the L2 cache.
    """
    params = (left_bits, right_bits, left_mask, right_mask, key)
    per_element = [np.ndim(p) == 1 for p in params]
    round_keys = None if per_element[4] else _round_keys(int(key))
    size = min(len(x), _KERNEL_SLICE)
    scratch = scratch or Scratch()
    buffers = [scratch.array(f"feistel.{i}", size, np.uint64) for i in range(3)]
    for first in range(0, len(x), _KERNEL_SLICE):
        words = x[first : first + _KERNEL_SLICE]
        n = len(words)
        la, lb, ma, mb, k = (
            p[first : first + n] if sliced else p
            for p, sliced in zip(params, per_element, strict=True)
        )
        high, f, shifted = (buffer[:n] for buffer in buffers)
        np.right_shift(words, lb, out=high)
        low = np.bitwise_and(words, mb, out=words)
        # Round r cuts F to the bits of the current high half: la bits in even rounds, lb in
        # odd ones (the halves trade places every round).
        masks = (ma, mb)
        for number in range(rounds):
            if round_keys is None:
                np.bitwise_xor(low, k, out=f)
                f ^= _NP_ROUND_CONSTANTS[number]
            else:
                np.bitwise_xor(low, round_keys[number], out=f)
            np.right_shift(f, _NP_30, out=shifted)
            f ^= shifted
            f *= _NP_MIX_1
            np.right_shift(f, _NP_27, out=shifted)
            f ^= shifted
            f *= _NP_MIX_2
            np.right_shift(f, _NP_31, out=shifted)
            f ^= shifted
            f &= masks[number & 1]
            high ^= f
            high, low = low, high
        # The low half has lb bits after an even number of rounds, la after an odd one.
        low_bits = lb if rounds % 2 == 0 else la
        if low is words:
            np.left_shift(high, low_bits, out=high)
            words |= high
        else:
            np.left_shift(words, low_bits, out=words)
            words |= low


@functools.lru_cache(maxsize=1024)
def _round_keys(key: int) -> list[np.ndarray]:
    """`key xor C_r` for each round, as 0-d uint64 arrays (shared: never modify them)."""
    return [_u64(key ^ c) for c in _ROUND_CONSTANTS]


def _feistel_scalar(x: int, left_bits: int, right_bits: int, key: int) -> int:
    """`_feistel_inplace` for one Python int (same arithmetic, no numpy overhead)."""
    halves = ((left_bits, right_bits), (right_bits, left_bits))
    for number in range(_num_rounds(left_bits + right_bits)):
        la, lb = halves[number & 1]
        right = x & ((1 << lb) - 1)
        f = right ^ key ^ _ROUND_CONSTANTS[number]
        f ^= f >> 30
        f = (f * _MIX_1) & _MASK64
        f ^= f >> 27
        f = (f * _MIX_2) & _MASK64
        f ^= f >> 31
        x = (right << la) | ((x >> lb) ^ (f & ((1 << la) - 1)))
    return x


def _scalar_params(width: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rounds, left_bits, right_bits, left_mask, right_mask) of a word width, the last four as
    0-d uint64 arrays (shared: never modify them)."""
    params = _PARAMS_BY_WIDTH.get(width)
    if params is None:
        left_bits = width // 2
        right_bits = width - left_bits
        params = (
            _num_rounds(width),
            _u64(left_bits),
            _u64(right_bits),
            _u64((1 << left_bits) - 1),
            _u64((1 << right_bits) - 1),
        )
        _PARAMS_BY_WIDTH[width] = params
    return params


_PARAMS_BY_WIDTH: dict[int, tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}


class FeistelPermutation:
    """A stateless seeded bijection of `[0, n)`: `perm[i]` in O(1) time and memory.

    A Feistel network of `NUM_ROUNDS` rounds (`NUM_ROUNDS_SMALL` for words under `SMALL_WIDTH`
    bits) permutes the `w`-bit words, `2**w` the smallest
    power of two >= n (halves of `w // 2` and `w - w // 2` bits; round function: the splitmix64
    finaliser of the right half xor a 64-bit key drawn from blake2b(seed, n) xor a round
    constant). Words that land at or beyond `n` are fed through the network again ("cycle
    walking") until they land inside, which restricts the bijection of `[0, 2**w)` to a
    bijection of `[0, n)`; fewer than two passes are needed on average since `2**w < 2n`.

    The permutation is a pure function of (n, seed): identical in every process and machine.
    """

    __slots__ = ("_key", "_left_bits", "_np", "_right_bits", "n", "seed")

    def __init__(self, n: int, seed: int) -> None:
        if isinstance(n, (bool, np.bool_)):
            raise ConfigError(f"permutation size is the bool {n!r}; expected an integer >= 0")
        try:
            n = operator.index(n)
        except TypeError:
            raise ConfigError(
                f"permutation size is {n!r} of type {type(n).__name__}; expected an integer >= 0"
            ) from None
        if not 0 <= n <= _INT64_MAX:
            raise ConfigError(f"permutation size is {n}; expected an integer in [0, 2**63)")
        key = _optional_seed(seed, "seed")
        if key is None:
            raise ConfigError("seed is None; a FeistelPermutation needs an integer seed")
        self.n = n
        if not _INT64_MIN <= key <= _INT64_MAX:
            raise ConfigError(
                f"seed is {key}, outside the signed 64-bit range; reduce it (e.g. modulo 2**63)"
            )
        self.seed = key
        width = (n - 1).bit_length() if n > 1 else 0
        self._left_bits = width // 2
        self._right_bits = width - self._left_bits
        self._key = _feistel_key(n, self.seed)
        self._np = (*_scalar_params(width), _u64(self._key))

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
        x = _feistel_scalar(i, self._left_bits, self._right_bits, self._key)
        while x >= self.n:
            x = _feistel_scalar(x, self._left_bits, self._right_bits, self._key)
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
        _feistel_inplace(x, *self._np, scratch)
        walking = np.flatnonzero(x >= self.n)
        while walking.size > _MAX_SCALAR_WALKERS:
            again = x[walking]
            _feistel_inplace(again, *self._np, scratch)
            x[walking] = again
            walking = walking[again >= self.n]
        for i in walking.tolist():
            x[i] = _walk_scalar(int(x[i]), self.n, self._left_bits, self._right_bits, self._key)


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

    __slots__ = (
        "_by_width",
        "_key",
        "_left_bits",
        "_left_mask",
        "_n",
        "_right_bits",
        "_right_mask",
        "_run_first",
        "_run_width",
        "_width",
    )

    def __init__(self, perms: Sequence[FeistelPermutation]) -> None:
        self._n = np.array([p.n for p in perms], dtype=np.uint64)
        self._width = np.array([p._left_bits + p._right_bits for p in perms], dtype=np.uint8)
        self._key = np.array([p._key for p in perms], dtype=np.uint64)
        self._left_bits = np.array([p._left_bits for p in perms], dtype=np.uint64)
        self._right_bits = np.array([p._right_bits for p in perms], dtype=np.uint64)
        self._left_mask = (np.uint64(1) << self._left_bits) - np.uint64(1)
        self._right_mask = (np.uint64(1) << self._right_bits) - np.uint64(1)
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
        run_widths, run_bounds = _runs(widths[order])
        sizes = self._n.take(members[order])
        _permute_walking(grouped, keys, sizes, run_widths, run_bounds, Scratch())
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
        _permute_walking(x, keys, sizes, self._run_width, bounds, scratch)


# Cycle walking finishes in Python (`_feistel_scalar`, ~3 us per word and pass) once at most
# this many words are left.
_MAX_SCALAR_WALKERS = 32
# A width run shorter than this shares one per-element-parameter pass with the other short runs:
# ~60 array operations per pass cost ~30 us whatever the run's length.
_MIN_SCALAR_RUN = 2048


def _runs(widths: np.ndarray) -> tuple[list[int], list[int]]:
    """Runs of equal values of a sorted array: (value of each run, [0, end of each run])."""
    cuts = np.flatnonzero(widths[1:] != widths[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(widths)]
    return widths[bounds[:-1]].astype(np.int64).tolist(), bounds


def _permute_walking(
    x: np.ndarray,
    keys: np.ndarray,
    sizes: np.ndarray,
    widths: list[int],
    bounds: list[int],
    scratch: Scratch,
) -> None:
    """Permute the uint64 words `x` in place: word i by the permutation of size `sizes[i]` and
    key `keys[i]`, with cycle walking. The words come in runs of equal width:
    `x[bounds[r]:bounds[r + 1]]` has width `widths[r]` (ascending)."""
    _network_by_runs(x, keys, widths, bounds, scratch)
    out_of_range = np.greater_equal(x, sizes, out=scratch.array("walk.mask", len(x), np.bool_))
    walking = np.flatnonzero(out_of_range)
    while walking.size > _MAX_SCALAR_WALKERS:
        again = x.take(
            walking, out=scratch.array("walk.words", len(walking), np.uint64), mode="clip"
        )
        # `walking` is ascending, so each width run's walkers stay one run.
        walking_bounds = np.searchsorted(walking, bounds).tolist()
        walking_keys = keys.take(
            walking, out=scratch.array("walk.keys", len(walking), np.uint64), mode="clip"
        )
        _network_by_runs(again, walking_keys, widths, walking_bounds, scratch)
        x[walking] = again
        walking_sizes = sizes.take(walking, out=walking_keys, mode="clip")
        walking = walking[again >= walking_sizes]
    # The last few words walk in Python: a pass of the network costs ~40 us of numpy calls
    # however few its words, and the tail takes a dozen passes.
    for i, run in zip(
        walking.tolist(), (np.searchsorted(bounds, walking, side="right") - 1).tolist(), strict=True
    ):
        left_bits = widths[run] // 2
        x[i] = _walk_scalar(
            int(x[i]), int(sizes[i]), left_bits, widths[run] - left_bits, int(keys[i])
        )


def _walk_scalar(x: int, n: int, left_bits: int, right_bits: int, key: int) -> int:
    """Apply the network to x until it lands in [0, n) (x is out of range on entry)."""
    x = _feistel_scalar(x, left_bits, right_bits, key)
    while x >= n:
        x = _feistel_scalar(x, left_bits, right_bits, key)
    return x


def _network_by_runs(
    x: np.ndarray, keys: np.ndarray, widths: list[int], bounds: list[int], scratch: Scratch
) -> None:
    """One pass of the network over each run of equal width of `x` (see `_permute_walking`):
    long runs with scalar shifts and masks, the short ones together with per-element ones."""
    short: list[int] = []
    for run, width in enumerate(widths):
        a, b = bounds[run], bounds[run + 1]
        if b - a >= _MIN_SCALAR_RUN:
            _feistel_inplace(x[a:b], *_scalar_params(width), keys[a:b], scratch)
        elif b > a:
            short.append(run)
    if not short:
        return
    lengths = [bounds[run + 1] - bounds[run] for run in short]
    index = np.repeat(np.array([bounds[run] for run in short], dtype=np.intp), lengths)
    index += np.arange(len(index)) - np.repeat(np.cumsum([0, *lengths[:-1]]), lengths)
    run_widths = np.array([widths[run] for run in short], dtype=np.uint64)
    left_bits = run_widths // np.uint64(2)
    right_bits = run_widths - left_bits
    params = [
        np.repeat(p, lengths)
        for p in (
            left_bits,
            right_bits,
            (np.uint64(1) << left_bits) - np.uint64(1),
            (np.uint64(1) << right_bits) - np.uint64(1),
        )
    ]
    words = x[index]
    word_keys = keys[index]
    # Widths ascend, so the words that take the small-width round count come first.
    small = sum(
        length for run, length in zip(short, lengths, strict=True) if widths[run] < SMALL_WIDTH
    )
    for rounds, a, b in ((NUM_ROUNDS_SMALL, 0, small), (NUM_ROUNDS, small, len(words))):
        if a < b:
            left, right, left_mask, right_mask = (p[a:b] for p in params)
            _feistel_inplace(
                words[a:b], rounds, left, right, left_mask, right_mask, word_keys[a:b], scratch
            )
    x[index] = words

"""The Feistel network behind the seeded permutations of an epoch, vectorised over numpy words.

The kernels of `seqpack_cli.epoch.permutations` (`FeistelPermutation`, `FeistelFamily`): a
network of `NUM_ROUNDS` rounds (`NUM_ROUNDS_SMALL` for words under `SMALL_WIDTH` bits) whose
round function is the splitmix64 finaliser of `seqpack_cli.seeding`, keyed per permutation;
`feistel_inplace` runs it on an array of words, `feistel_scalar` on one Python int, and
`permute_walking` cycle-walks words of many permutations (runs of equal word width) back into
their ranges. Every result is a pure function of the integers involved: identical in every
process, on every machine and with every numpy version.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

import numpy as np

from seqpack_cli.epoch.scratch import Scratch
from seqpack_cli.seeding import SPLITMIX64_MULTIPLIERS, SPLITMIX64_SHIFTS, digest64

__all__ = [
    "MAX_SCALAR_WALKERS",
    "NUM_ROUNDS",
    "NUM_ROUNDS_SMALL",
    "SMALL_WIDTH",
    "feistel_inplace",
    "feistel_key",
    "feistel_scalar",
    "num_rounds",
    "permute_walking",
    "scalar_params",
    "walk_scalar",
    "width_runs",
    "word_width",
]

_MASK64 = (1 << 64) - 1
# Domain tag: keeps the permutation keys apart from the seeds of seqpack_cli.seeding.
_FEISTEL_TAG = 0x5EED_FE15_7E1


def _u64(value: int) -> np.ndarray:
    """`value` as a 0-d uint64 array. The kernels below pass their constants to ufuncs as 0-d
    arrays: numpy takes them in ~0.45 us per call, a numpy scalar in ~0.7-1.1 us (it is converted
    on every call), and a Feistel pass makes ~64 ufunc calls per slice of words."""
    return np.array(value, dtype=np.uint64)


_NP_MIX_1, _NP_MIX_2 = (_u64(m) for m in SPLITMIX64_MULTIPLIERS)
_NP_SHIFT_1, _NP_SHIFT_2, _NP_SHIFT_3 = (_u64(s) for s in SPLITMIX64_SHIFTS)

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
# Cycle walking finishes in Python (`feistel_scalar`, ~3 us per word and pass) once at most
# this many words are left.
MAX_SCALAR_WALKERS = 32
# A width run shorter than this shares one per-element-parameter pass with the other short runs:
# ~60 array operations per pass cost ~30 us whatever the run's length.
_MIN_SCALAR_RUN = 2048


def feistel_key(n: int, seed: int) -> int:
    """The 64-bit key of the permutation of size n with this seed (round r uses key ^ C_r)."""
    return digest64(struct.pack("<3q", _FEISTEL_TAG, seed, n))


def word_width(n: int) -> int:
    """Bits of the words a permutation of size n works on: `2**width` is the smallest power of
    two >= n."""
    return (n - 1).bit_length() if n > 1 else 0


def num_rounds(width: int) -> int:
    """Rounds of the network on words of `width` bits."""
    return NUM_ROUNDS_SMALL if width < SMALL_WIDTH else NUM_ROUNDS


def feistel_inplace(
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
            np.right_shift(f, _NP_SHIFT_1, out=shifted)
            f ^= shifted
            f *= _NP_MIX_1
            np.right_shift(f, _NP_SHIFT_2, out=shifted)
            f ^= shifted
            f *= _NP_MIX_2
            np.right_shift(f, _NP_SHIFT_3, out=shifted)
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


def feistel_scalar(x: int, left_bits: int, right_bits: int, key: int) -> int:
    """`feistel_inplace` for one Python int (same arithmetic, no numpy overhead)."""
    halves = ((left_bits, right_bits), (right_bits, left_bits))
    # Constants as locals: this runs per look-up of `plan[k]`, where global look-ups show.
    shift_1, shift_2, shift_3 = SPLITMIX64_SHIFTS
    mix_1, mix_2 = SPLITMIX64_MULTIPLIERS
    mask, round_constants = _MASK64, _ROUND_CONSTANTS
    for number in range(num_rounds(left_bits + right_bits)):
        la, lb = halves[number & 1]
        right = x & ((1 << lb) - 1)
        f = right ^ key ^ round_constants[number]
        f ^= f >> shift_1
        f = (f * mix_1) & mask
        f ^= f >> shift_2
        f = (f * mix_2) & mask
        f ^= f >> shift_3
        x = (right << la) | ((x >> lb) ^ (f & ((1 << la) - 1)))
    return x


_PARAMS_BY_WIDTH: dict[int, tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}


def scalar_params(width: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rounds, left_bits, right_bits, left_mask, right_mask) of a word width, the last four as
    0-d uint64 arrays (shared: never modify them)."""
    params = _PARAMS_BY_WIDTH.get(width)
    if params is None:
        left_bits = width // 2
        right_bits = width - left_bits
        params = (
            num_rounds(width),
            _u64(left_bits),
            _u64(right_bits),
            _u64((1 << left_bits) - 1),
            _u64((1 << right_bits) - 1),
        )
        _PARAMS_BY_WIDTH[width] = params
    return params


def width_runs(widths: np.ndarray) -> tuple[list[int], list[int]]:
    """Runs of equal values of a sorted array: (value of each run, [0, end of each run])."""
    cuts = np.flatnonzero(widths[1:] != widths[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(widths)]
    return widths[bounds[:-1]].astype(np.int64).tolist(), bounds


def permute_walking(
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
    while walking.size > MAX_SCALAR_WALKERS:
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
        x[i] = walk_scalar(
            int(x[i]), int(sizes[i]), left_bits, widths[run] - left_bits, int(keys[i])
        )


def walk_scalar(x: int, n: int, left_bits: int, right_bits: int, key: int) -> int:
    """Apply the network to x until it lands in [0, n) (x is out of range on entry)."""
    x = feistel_scalar(x, left_bits, right_bits, key)
    while x >= n:
        x = feistel_scalar(x, left_bits, right_bits, key)
    return x


def _network_by_runs(
    x: np.ndarray, keys: np.ndarray, widths: list[int], bounds: list[int], scratch: Scratch
) -> None:
    """One pass of the network over each run of equal width of `x` (see `permute_walking`):
    long runs with scalar shifts and masks, the short ones together with per-element ones."""
    short: list[int] = []
    for run, width in enumerate(widths):
        a, b = bounds[run], bounds[run + 1]
        if b - a >= _MIN_SCALAR_RUN:
            feistel_inplace(x[a:b], *scalar_params(width), keys[a:b], scratch)
        elif b > a:
            short.append(run)
    if short:
        _network_on_short_runs(x, keys, widths, bounds, short, scratch)


def _network_on_short_runs(
    x: np.ndarray,
    keys: np.ndarray,
    widths: list[int],
    bounds: list[int],
    short: list[int],
    scratch: Scratch,
) -> None:
    """One pass of the network over the runs `short` of `x` (see `_network_by_runs`), gathered
    into one array with per-element shifts and masks: one pass for all of them."""
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
            feistel_inplace(
                words[a:b], rounds, left, right, left_mask, right_mask, word_keys[a:b], scratch
            )
    x[index] = words

"""Stable seeds: a seed from any tuple of integers, and a seeded shuffle of a list.

Everything here is a pure function of its integer arguments, computed with fixed-width
arithmetic and blake2b, so the same arguments give the same result in every process, on every
machine and with every numpy version. Nothing depends on Python's `hash()` (salted per process
for strings) or on a numpy random stream.

- `seed_from_components(*components)`: a 63-bit seed from any tuple of integers
  (epoch, rank, worker, dataset, ...).
- `shuffle_bins(bin_indices, seed)`: a shuffled copy of a list.
- `check_seed(seed)`: the one rule for every seed argument and option (an int64; None where
  optional), and `numpy_seed(seed)` for a numpy Generator.
- `mix64(values)`: the splitmix64 finaliser on a uint64 array (shuffle keys, balanced steps).
- `digest64(payload)` and `SPLITMIX64_MULTIPLIERS` / `SPLITMIX64_SHIFTS`: the hash and the mixer
  these are built from, shared with the seeded permutations of an epoch
  (`seqpack_cli.epoch.feistel`, `seqpack_cli.epoch.permutations`), which sit above this module.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.errors import option

__all__ = [
    "check_required_seed",
    "check_seed",
    "numpy_seed",
    "seed_from_components",
    "shuffle_bins",
]

T = TypeVar("T")

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_MASK63 = (1 << 63) - 1
# blake2b personalisation: changing it (or the encodings of the payloads) changes every seed and
# every permutation, so it is versioned like a file format.
_PERSON = b"seqpack.seed.v1"
# Domain tag: keeps the seeds of `shuffle_bins` apart from any user tuple (the permutations of an
# epoch have their own tag, in `seqpack_cli.epoch.feistel`).
_SHUFFLE_TAG = 0x5EED_5_4FF1E

SPLITMIX64_MULTIPLIERS = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
"""The multipliers of the splitmix64 finaliser (Steele, Lea & Flood 2014): a bijection of 64-bit
words in which every output bit depends on every input bit. x ^= x >> 30; x *= M1;
x ^= x >> 27; x *= M2; x ^= x >> 31. Keyed by xoring a round key in first, it is also the
round function of the Feistel permutations of an epoch."""
SPLITMIX64_SHIFTS = (30, 27, 31)
"""The shifts of the splitmix64 finaliser, in order (see `SPLITMIX64_MULTIPLIERS`)."""

_COMPONENT_FIX = (
    "components are integers such as the epoch, rank or worker id: convert with int() "
    "(int(flag) if a flag is really meant to change the seed), reduce larger ones modulo 2**63"
)


def digest64(payload: bytes) -> int:
    """The 64-bit blake2b digest of `payload` with seqpack's personalisation, read little-endian:
    the one hash every seed and every permutation key is drawn from."""
    digest = hashlib.blake2b(payload, digest_size=8, person=_PERSON).digest()
    return int.from_bytes(digest, "little")


def check_seed(seed: Any, name: str = "seed", *, optional: bool = True) -> int | None:
    """`seed` checked: an integer in the signed 64-bit range (the range `seed_from_components`
    accepts). Every seed of the package, argument or option, is checked here: one range, one
    message.

    Args:
        seed: the value to check (a Python or numpy integer; None where `optional`).
        name: the argument named in the error message (`--name` on the command line).
        optional: whether None is accepted (and returned as None).

    Returns:
        `seed` as a Python int, or None for None where `optional`.

    Raises:
        ConfigError: for anything else (a bool, a float, a string, an int out of range, or
            None where not `optional`), naming `name`, the value and the fix.
    """
    if seed is None and optional:
        return None
    return check_int(
        option(name),
        seed,
        minimum=INT64_MIN,
        maximum=INT64_MAX,
        expected="an integer in the signed 64-bit range" + (", or None" if optional else ""),
        fix="derive one with seed_from_components(epoch, ...)",
    )


def check_required_seed(seed: Any, name: str = "seed") -> int:
    """`check_seed` for a seed that may not be None."""
    checked = check_seed(seed, name, optional=False)
    assert checked is not None  # optional=False never returns None
    return checked


def numpy_seed(seed: int) -> int:
    """A checked seed as `np.random.default_rng` takes it (a non-negative int): the int64's
    unsigned 64-bit value, so every seed >= 0 is itself."""
    return seed & 0xFFFF_FFFF_FFFF_FFFF


def seed_from_components(*components: int) -> int:
    """A stable, non-negative 63-bit seed from any tuple of integers.

    The seed is the blake2b digest (8 bytes, personalisation `seqpack.seed.v1`) of the number of
    components followed by each component, all as little-endian signed 64-bit integers, read as
    a little-endian integer and masked to 63 bits. It is the same in every process and on every
    machine, and different tuples (including tuples of different lengths, such as `(1,)` and
    `(1, 0)`) give unrelated seeds.

    Components are Python or numpy integers in the int64 range; floats, strings and bools are
    refused with a ConfigError (a float epoch or a string name has no canonical integer form;
    True == 1 would silently give the same seed as 1).

    Args:
        *components: the integers to derive the seed from (epoch, rank, worker, ...); none at
            all is a valid (empty) tuple.

    Returns:
        The seed, an int in `[0, 2**63)`.

    Raises:
        ConfigError: for a component that is not an integer in the signed 64-bit range, naming
            its position.
    """
    values = [
        check_int(
            f"seed component {position}",
            value,
            minimum=INT64_MIN,
            maximum=INT64_MAX,
            expected="an integer in the signed 64-bit range",
            fix=_COMPONENT_FIX,
        )
        for position, value in enumerate(components)
    ]
    payload = struct.pack(f"<q{len(values)}q", len(values), *values)
    return digest64(payload) & _MASK63


def mix64(values: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on a uint64 array (in place; returns it)."""
    first, second, third = (np.uint64(shift) for shift in SPLITMIX64_SHIFTS)
    values ^= values >> first
    values *= np.uint64(SPLITMIX64_MULTIPLIERS[0])
    values ^= values >> second
    values *= np.uint64(SPLITMIX64_MULTIPLIERS[1])
    values ^= values >> third
    return values


def shuffle_bins(bin_indices: Sequence[T], seed: int | None = None) -> list[T]:
    """A shuffled copy of `bin_indices`; the input is never modified.

    With `seed=None` the copy keeps the input order. With a seed the order is a pure function of
    (seed, len(bin_indices)): each position gets the 64-bit key splitmix64(position xor k), k
    derived from the seed with `seed_from_components`, and positions are sorted by key (the keys
    are distinct: both steps are bijections of 64-bit words). Unlike a numpy random stream this
    never changes with the numpy version.

    Args:
        bin_indices: the items to shuffle (any sequence; read once into a list).
        seed: any int64 (see `check_seed`); None (the default) keeps the input order.

    Returns:
        A new list holding the items of `bin_indices` in the seeded order.

    Raises:
        ConfigError: for a seed that is not None or an int64.
    """
    items = list(bin_indices)
    key = check_seed(seed)
    if key is None or len(items) < 2:
        return items
    salt = np.uint64(seed_from_components(_SHUFFLE_TAG, key))
    keys = np.arange(len(items), dtype=np.uint64)
    keys ^= salt
    order = np.argsort(mix64(keys), kind="stable")
    return [items[i] for i in order.tolist()]

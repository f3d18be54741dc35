"""seed_from_components and shuffle_bins (seqpack_cli.seeding), and the stateless permutations
of an epoch built on them (seqpack_cli.epoch.permutations)."""

from __future__ import annotations

import hashlib
import json
import math
import struct

import numpy as np
import pytest
from conftest import run_in_fresh_process
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.epoch.permutations import FeistelFamily, FeistelPermutation
from seqpack_cli.errors import ConfigError
from seqpack_cli.seeding import seed_from_components, shuffle_bins

SETTINGS = settings(max_examples=40, deadline=None)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


# ---------------------------------------------------------------- seed_from_components


def test_seed_is_the_documented_blake2b_digest() -> None:
    # The docstring is the spec: blake2b(8 bytes, person="seqpack.seed.v1") of the count and
    # the components as little-endian int64, read little-endian, masked to 63 bits.
    for components in [(), (0,), (3, 1, 7), (-1, 2**62)]:
        payload = struct.pack(f"<q{len(components)}q", len(components), *components)
        digest = hashlib.blake2b(payload, digest_size=8, person=b"seqpack.seed.v1").digest()
        expected = int.from_bytes(digest, "little") & (2**63 - 1)
        assert seed_from_components(*components) == expected


def test_seed_values_are_pinned() -> None:
    # Changing these changes every epoch of every user: it must be a deliberate, versioned
    # decision (bump the personalisation string), never an accident.
    assert seed_from_components(0) == 8098174508685483417
    assert seed_from_components(1, 2, 3) == 1441472334286259703


@SETTINGS
@given(st.lists(INT64, max_size=6))
def test_seed_is_a_non_negative_63_bit_int(components: list[int]) -> None:
    seed = seed_from_components(*components)
    assert isinstance(seed, int)
    assert 0 <= seed < 2**63


def test_component_count_and_order_matter() -> None:
    seeds = [seed_from_components(*c) for c in [(), (0,), (0, 0), (1,), (1, 0), (0, 1), (2, 1)]]
    assert len(set(seeds)) == len(seeds)


def test_numpy_integers_are_the_same_as_python_ints() -> None:
    assert seed_from_components(np.int64(5), np.uint8(3)) == seed_from_components(5, 3)


@pytest.mark.parametrize("bad", [1.0, "1", True, np.bool_(False), None, 2**63, -(2**63) - 1])
def test_non_integer_or_out_of_range_components_are_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match="seed component 1"):
        seed_from_components(0, bad)  # type: ignore[arg-type]


def test_seed_is_the_same_in_a_fresh_process() -> None:
    # A different PYTHONHASHSEED would change anything built on hash(); nothing here may be.
    code = (
        "import json; from seqpack_cli.seeding import seed_from_components;"
        "from seqpack_cli.epoch.permutations import FeistelPermutation;"
        "print(json.dumps([seed_from_components(4, 2, 9),"
        " FeistelPermutation(1000, 77).take(__import__('numpy').arange(1000)).tolist()]))"
    )
    stdout = run_in_fresh_process(code, hash_seed="12345")
    seed, perm = json.loads(stdout)
    assert seed == seed_from_components(4, 2, 9)
    assert perm == FeistelPermutation(1000, 77).take(np.arange(1000)).tolist()


# ---------------------------------------------------------------- shuffle_bins


@SETTINGS
@given(st.lists(st.integers(), max_size=60), st.integers(0, 2**40))
def test_shuffle_bins_is_a_reproducible_permutation(items: list[int], seed: int) -> None:
    before = list(items)
    shuffled = shuffle_bins(items, seed=seed)
    assert items == before  # input untouched
    assert shuffled is not items
    assert sorted(shuffled) == sorted(items)
    assert shuffle_bins(items, seed=seed) == shuffled


def test_shuffle_bins_without_seed_is_a_copy_in_order() -> None:
    items = [[3, 1], [2], [0]]
    copy = shuffle_bins(items)
    assert copy == items
    assert copy is not items


def test_shuffle_bins_seeds_give_different_orders() -> None:
    items = list(range(50))
    orders = {tuple(shuffle_bins(items, seed=seed)) for seed in range(20)}
    assert len(orders) == 20
    assert tuple(items) not in orders


def test_shuffle_bins_refuses_a_float_seed() -> None:
    with pytest.raises(ConfigError, match="seed"):
        shuffle_bins([1, 2, 3], seed=1.5)  # type: ignore[arg-type]


# ---------------------------------------------------------------- FeistelPermutation

SIZES = [*range(0, 70), 97, 127, 128, 129, 255, 256, 257, 1000, 1021, 1024, 4097, 65537]


@pytest.mark.parametrize("n", SIZES)
def test_feistel_is_a_bijection(n: int) -> None:
    for seed in (0, 1, 2**62 + 12345):
        perm = FeistelPermutation(n, seed)
        values = perm.take(np.arange(n))
        assert len(perm) == n
        assert np.array_equal(np.sort(values), np.arange(n))
        if n <= 300:  # the scalar path computes the same permutation
            assert [perm[i] for i in range(n)] == values.tolist()


@SETTINGS
@given(st.integers(0, 3000), INT64)
def test_feistel_is_a_bijection_for_any_size_and_seed(n: int, seed: int) -> None:
    values = FeistelPermutation(n, seed).take(np.arange(n))
    assert np.array_equal(np.sort(values), np.arange(n))


def test_feistel_indexing_and_take_shapes() -> None:
    perm = FeistelPermutation(10, 3)
    assert perm[-1] == perm[9]
    grid = perm.take(np.arange(10).reshape(2, 5))
    assert grid.shape == (2, 5)
    assert grid.dtype == np.int64
    assert perm.take(np.array([], dtype=np.int64)).shape == (0,)
    assert FeistelPermutation(0, 3).take(np.arange(0)).size == 0
    with pytest.raises(IndexError):
        perm[10]
    with pytest.raises(IndexError):
        FeistelPermutation(0, 3)[0]
    with pytest.raises(IndexError):
        perm.take(np.array([3, 10]))
    with pytest.raises(ConfigError):
        perm.take(np.array([0.5]))


@pytest.mark.parametrize("bad", [-1, 2**63, 1.5, "3", True])
def test_feistel_refuses_bad_sizes(bad: object) -> None:
    with pytest.raises(ConfigError, match="permutation size"):
        FeistelPermutation(bad, 0)  # type: ignore[arg-type]


def test_feistel_refuses_a_missing_or_bad_seed() -> None:
    with pytest.raises(ConfigError, match="seed"):
        FeistelPermutation(10, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="seed"):
        FeistelPermutation(10, 2**64)


def test_feistel_on_a_huge_domain_is_injective_and_in_range() -> None:
    # 2**40 elements: far too many to enumerate, but O(1) memory per look-up.
    n = 2**40 + 17
    perm = FeistelPermutation(n, 5)
    sample = np.arange(0, n, n // 20_000, dtype=np.int64)
    values = perm.take(sample)
    assert values.min() >= 0 and values.max() < n
    assert len(np.unique(values)) == len(sample)
    assert [perm[int(i)] for i in sample[:50]] == values[:50].tolist()


def test_seeds_give_different_permutations() -> None:
    perms = {tuple(FeistelPermutation(1000, seed).take(np.arange(1000))) for seed in range(30)}
    assert len(perms) == 30
    small = {tuple(FeistelPermutation(5, seed).take(np.arange(5))) for seed in range(2000)}
    assert len(small) == math.factorial(5)  # every permutation of 5 elements is reachable


@pytest.mark.parametrize("seed", range(5))
def test_permutation_of_range_1000_is_far_from_identity(seed: int) -> None:
    values = FeistelPermutation(1000, seed).take(np.arange(1000))
    # A uniform permutation has ~1 fixed point and correlation ~N(0, 1/sqrt(1000) ~ 0.03).
    assert np.count_nonzero(values == np.arange(1000)) <= 8
    assert abs(np.corrcoef(values, np.arange(1000))[0, 1]) < 0.15
    # Neighbours are scattered: consecutive inputs do not land next to each other.
    assert np.median(np.abs(np.diff(values))) > 100


@pytest.mark.parametrize(("n", "limit"), [(5, 2.5), (12, 1.5), (64, 1.15), (200, 1.1)])
def test_positions_are_uniform_over_seeds(n: int, limit: float) -> None:
    # Position matrix counts[i, j] = #seeds with perm[i] == j. For uniform random permutations
    # the chi-square statistic divided by its degrees of freedom is ~1 (sd ~sqrt(2/df)). A
    # network of 3-bit words cycle-walked down to 5 keeps a small bias (~1.6 here; 4 rounds
    # instead of 8 would score ~5.6); from a few dozen elements on it is indistinguishable.
    num_seeds = 40 * n
    counts = np.zeros((n, n))
    for seed in range(num_seeds):
        counts[np.arange(n), FeistelPermutation(n, seed).take(np.arange(n))] += 1
    expected = num_seeds / n
    statistic = ((counts - expected) ** 2 / expected).sum() / (n - 1) ** 2
    assert statistic < limit, statistic


# ---------------------------------------------------------------- FeistelFamily


@SETTINGS
@given(
    st.lists(st.integers(0, 400), min_size=1, max_size=8),
    st.integers(0, 2**32),
    st.booleans(),
)
def test_family_matches_each_permutation(sizes: list[int], seed: int, by_width: bool) -> None:
    sizes = [n + 1 for n in sizes]  # non-empty permutations only: members must index into one
    if by_width:  # the order an EpochPlan uses, which takes the no-sort path
        sizes.sort()
    perms = [FeistelPermutation(n, seed + i) for i, n in enumerate(sizes)]
    family = FeistelFamily(perms)
    rng = np.random.default_rng(seed)
    members = rng.integers(0, len(perms), size=300)
    if by_width:
        members.sort()
    indices = np.array([rng.integers(0, sizes[m]) for m in members], dtype=np.int64)
    got = family.take(members, indices)
    assert got.tolist() == [perms[m][int(i)] for m, i in zip(members, indices, strict=True)]
    assert len(family) == len(perms)

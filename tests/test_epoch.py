"""EpochPlan and materialize_epoch: stateless, random-access, sharded epochs."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    REFERENCE_LENGTHS,
    REFERENCE_POOLS,
    REFERENCE_TEMPLATES,
    run_in_fresh_process,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.epoch.permutations import FeistelFamily, FeistelPermutation
from seqpack_cli.epoch.plan import EpochPlan, materialize_epoch
from seqpack_cli.epoch.scratch import Scratch
from seqpack_cli.epoch.tuning import EpochTuning
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.seeding import seed_from_components
from seqpack_cli.templates import canonical_templates

SETTINGS = settings(max_examples=40, deadline=None)

# The reference's worked example, shared with the other tests.
LENGTHS, TEMPLATES, POOLS = REFERENCE_LENGTHS, REFERENCE_TEMPLATES, REFERENCE_POOLS

template_strategy = st.dictionaries(
    keys=st.lists(st.integers(1, 9), min_size=1, max_size=4).map(
        lambda lengths: tuple(sorted(lengths, reverse=True))
    ),
    values=st.integers(1, 6),
    max_size=8,
).map(Counter)
seed_strategy = st.one_of(st.none(), st.integers(0, 2**63 - 1))
# (templates, seed, world_size, rank, drop_last) for a sharded plan; tests take rank %= world_size.
SHARDED_PLAN = (
    template_strategy,
    seed_strategy,
    st.integers(1, 5),
    st.integers(0, 4),
    st.booleans(),
)


def make_pools(templates: Counter, seed: int = 0) -> tuple[dict[int, np.ndarray], dict[int, int]]:
    """Pools for `templates` holding shuffled ids (not equal to positions), and id -> length."""
    needed: Counter[int] = Counter()
    for template, multiplicity in templates.items():
        for length in template:
            needed[length] += multiplicity
    ids = np.random.default_rng(seed).permutation(sum(needed.values())) + 1000
    pools, length_of, offset = {}, {}, 0
    for length in sorted(needed):
        pools[length] = np.sort(ids[offset : offset + needed[length]])
        length_of.update(dict.fromkeys(pools[length].tolist(), length))
        offset += needed[length]
    return pools, length_of


def oracle(templates, pools, seed=None, rank=0, world_size=1, drop_last=False) -> list[list[int]]:
    """DESIGN.md decision 3 written out plainly: canonical bins drawing pool positions through
    per-length cursors, a seeded global order, seeded pool permutations, DistributedSampler
    sharding."""
    canonical, cursor = [], Counter()
    for template, multiplicity in sorted(templates.items(), reverse=True):
        for _ in range(multiplicity):
            slots = []
            for length in template:
                slots.append((length, cursor[length]))
                cursor[length] += 1
            canonical.append(slots)
    num_bins = len(canonical)
    if seed is None:
        order = list(range(num_bins))
        perm = {length: range(len(pool)) for length, pool in pools.items()}
    else:
        order_perm = FeistelPermutation(num_bins, seed_from_components(seed, 0))
        order = [order_perm[g] for g in range(num_bins)]
        perm = {
            length: FeistelPermutation(len(pool), seed_from_components(seed, length))
            for length, pool in pools.items()
        }
    num_samples = num_bins // world_size if drop_last else math.ceil(num_bins / world_size)
    out = []
    for k in range(num_samples):
        j = order[(rank + k * world_size) % num_bins]
        out.append([int(pools[length][perm[length][p]]) for length, p in canonical[j]])
    return out


# ---------------------------------------------------------------- the reference's example


def test_reference_example_without_seed_is_the_canonical_order() -> None:
    # Templates descending: (7,3), (5,5) x2, (5,3), (3,). Length 3's pool [6, 7, 8] goes to
    # (7,3), (5,3), (3,) in that order; length 5's [1..5] to (5,5) #0 -> 1,2, #1 -> 3,4, then
    # (5,3) -> 5.
    plan = EpochPlan(TEMPLATES, POOLS)
    assert list(plan) == [[0, 6], [1, 2], [3, 4], [5, 7], [8]]
    assert [plan.lengths(k) for k in range(5)] == [(7, 3), (5, 5), (5, 5), (5, 3), (3,)]


@pytest.mark.parametrize("epoch", range(6))
def test_reference_example_every_epoch(epoch: int) -> None:
    bins = list(materialize_epoch(TEMPLATES, POOLS, seed=seed_from_components(epoch)))
    assert len(bins) == 5
    assert sorted(i for b in bins for i in b) == list(range(9))  # every id exactly once
    assert Counter(tuple(sorted((LENGTHS[i] for i in b), reverse=True)) for b in bins) == TEMPLATES
    # Within a bin, ids follow the template's slot order (lengths descending).
    assert all(
        [LENGTHS[i] for i in b] == sorted((LENGTHS[i] for i in b), reverse=True) for b in bins
    )


def test_materialize_epoch_takes_the_reference_keywords() -> None:
    # The reference signature: materialize_epoch(templates, length_to_indices, seed=None).
    by_keyword = materialize_epoch(templates=TEMPLATES, length_to_indices=POOLS, seed=4)
    assert list(by_keyword) == list(EpochPlan(TEMPLATES, POOLS, 4))
    assert list(materialize_epoch(TEMPLATES, length_to_indices=POOLS)) == [
        [0, 6],
        [1, 2],
        [3, 4],
        [5, 7],
        [8],
    ]


def test_reference_example_epochs_differ() -> None:
    epochs = {
        tuple(tuple(b) for b in materialize_epoch(TEMPLATES, POOLS, seed=seed_from_components(e)))
        for e in range(10)
    }
    assert len(epochs) > 5


def test_plan_sizes() -> None:
    plan = EpochPlan(TEMPLATES, POOLS, 3)
    assert (len(plan), plan.num_bins_total, plan.num_sequences, plan.max_seq_len_needed) == (
        5,
        5,
        9,
        10,
    )
    assert "EpochPlan(" in repr(plan)


# ---------------------------------------------------------------- properties


@SETTINGS
@given(template_strategy, seed_strategy, st.integers(0, 100))
def test_each_id_exactly_once_and_bins_match_templates(templates, seed, pool_seed) -> None:
    pools, length_of = make_pools(templates, pool_seed)
    plan = EpochPlan(templates, pools, seed)
    bins = list(plan)
    ids = [i for b in bins for i in b]
    assert sorted(ids) == sorted(length_of)
    assert len(bins) == plan.num_bins_total == sum(templates.values())
    for k, b in enumerate(bins):
        assert tuple(length_of[i] for i in b) == plan.lengths(k)  # slot order = template order
    assert Counter(plan.lengths(k) for k in range(len(plan))) == templates
    assert plan.num_sequences == len(ids)


@SETTINGS
@given(*SHARDED_PLAN)
def test_plan_is_the_documented_construction(templates, seed, world_size, rank, drop_last) -> None:
    rank %= world_size
    pools, _ = make_pools(templates)
    plan = EpochPlan(templates, pools, seed, rank=rank, world_size=world_size, drop_last=drop_last)
    assert list(plan) == oracle(templates, pools, seed, rank, world_size, drop_last)


@SETTINGS
@given(template_strategy, seed_strategy, st.data())
def test_random_access_resume_and_batches_agree_with_iteration(templates, seed, data) -> None:
    pools, _ = make_pools(templates)
    plan = EpochPlan(templates, pools, seed)
    bins = list(plan)
    assert [plan[k] for k in range(len(plan))] == bins
    assert [plan[-k] for k in range(1, len(plan) + 1)] == bins[::-1]
    start = data.draw(st.integers(0, len(plan)))
    assert list(plan.iter(start)) == bins[start:]
    assert list(materialize_epoch(templates, pools, seed, start=start)) == bins[start:]
    stop = data.draw(st.integers(-2, len(plan) + 2))
    assert plan.bins(start, stop) == bins[start:stop]


@SETTINGS
@given(template_strategy, seed_strategy, st.integers(1, 6))
def test_ranks_cover_the_epoch_like_distributed_sampler(templates, seed, world_size) -> None:
    pools, length_of = make_pools(templates)
    full = list(EpochPlan(templates, pools, seed))
    num_bins = len(full)
    shards = [
        list(EpochPlan(templates, pools, seed, rank=r, world_size=world_size))
        for r in range(world_size)
    ]
    num_samples = math.ceil(num_bins / world_size)
    assert all(len(shard) == num_samples for shard in shards)
    # Interleaving the ranks gives the global order, padded by wrapping around to its start.
    interleaved = [shards[g % world_size][g // world_size] for g in range(num_samples * world_size)]
    assert interleaved[:num_bins] == full
    assert all(interleaved[g] == full[g % num_bins] for g in range(len(interleaved)))
    union = Counter(i for shard in shards for b in shard for i in b)
    assert set(union) == set(length_of)  # every id is covered; only padding bins repeat

    dropped = [
        list(EpochPlan(templates, pools, seed, rank=r, world_size=world_size, drop_last=True))
        for r in range(world_size)
    ]
    assert all(len(shard) == num_bins // world_size for shard in dropped)
    ids = [i for shard in dropped for b in shard for i in b]
    assert len(ids) == len(set(ids))  # disjoint shards


def test_same_seed_same_bins_different_seeds_different_pairings() -> None:
    templates = Counter({(4, 4): 300, (6, 2): 200, (8,): 50, (5, 2, 1): 100})
    pools, _ = make_pools(templates)
    first = list(EpochPlan(templates, pools, 11))
    assert list(EpochPlan(templates, pools, 11)) == first
    pairings = [
        {frozenset(b) for b in EpochPlan(templates, pools, seed_from_components(e))}
        for e in range(4)
    ]
    for a in range(4):
        for b in range(a + 1, 4):
            # 650 multi-sequence bins; shared pairings between two epochs are rare.
            assert len(pairings[a] & pairings[b]) < 60


def test_seeded_order_mixes_templates() -> None:
    templates = Counter({(4, 4): 500, (6, 2): 500})
    pools, _ = make_pools(templates)
    unseeded = [EpochPlan(templates, pools).lengths(k) for k in range(1000)]
    seeded_plan = EpochPlan(templates, pools, 3)
    seeded = [seeded_plan.lengths(k) for k in range(1000)]
    assert sum(a != b for a, b in itertools.pairwise(unseeded)) == 1  # one run per template
    assert sum(a != b for a, b in itertools.pairwise(seeded)) > 350  # ~500 if random


def test_same_bins_in_a_fresh_process() -> None:
    code = (
        "import json, numpy as np; from collections import Counter;"
        "from seqpack_cli.epoch.plan import EpochPlan;"
        "t = Counter({(4, 4): 30, (6, 2): 20, (8,): 5});"
        "p = {4: np.arange(60), 6: np.arange(60, 80), 2: np.arange(80, 100),"
        " 8: np.arange(100, 105)};"
        "print(json.dumps(list(EpochPlan(t, p, 2024, rank=1, world_size=3))))"
    )
    stdout = run_in_fresh_process(code, hash_seed="999")
    templates = Counter({(4, 4): 30, (6, 2): 20, (8,): 5})
    pools = {4: np.arange(60), 6: np.arange(60, 80), 2: np.arange(80, 100), 8: np.arange(100, 105)}
    assert json.loads(stdout) == list(EpochPlan(templates, pools, 2024, rank=1, world_size=3))


def test_sharding_matches_torch_distributed_sampler() -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    templates = Counter({(4, 4): 7, (6, 2): 5, (8,): 1})
    pools, _ = make_pools(templates)
    canonical = list(EpochPlan(templates, pools))
    for world_size in (1, 2, 3, 4, 5, 16):
        for drop_last in (False, True):
            for rank in range(world_size):
                sampler = torch_data.DistributedSampler(
                    range(len(canonical)),
                    num_replicas=world_size,
                    rank=rank,
                    shuffle=False,
                    drop_last=drop_last,
                )
                plan = EpochPlan(
                    templates, pools, rank=rank, world_size=world_size, drop_last=drop_last
                )
                assert list(plan) == [canonical[i] for i in sampler]


def test_mixed_pool_sizes_and_many_batches() -> None:
    # Pools from 1 to 5000 ids: both round counts of the permutations (words under and over
    # 8 bits), many widths and cycle walking; tiny batches force many batch and list boundaries.
    templates = Counter({(9, 1): 5000, (7, 7, 2): 100, (3,): 129, (2, 2): 14, (5,): 1})
    pools, length_of = make_pools(templates, 4)
    expected = oracle(templates, pools, 77)
    assert list(EpochPlan(templates, pools, 77)) == expected
    plan = EpochPlan(templates, pools, 77, tuning=EpochTuning(batch_ids=7, list_bins=3))
    assert list(plan) == expected
    assert plan.bins(100, 5000) == expected[100:5000]
    assert sorted(i for b in expected for i in b) == sorted(length_of)


def test_one_template_corpus() -> None:
    # The reference's homogeneous corpus: every bin is (512, 512, 512, 512); bins of one size
    # are built as one 2-d block.
    templates = Counter({(512, 512, 512, 512): 3000})
    pools, length_of = make_pools(templates, 2)
    for seed in (None, 5):
        plan = EpochPlan(templates, pools, seed, rank=1, world_size=7)
        assert list(plan) == oracle(templates, pools, seed, 1, 7)
    assert sorted(i for b in EpochPlan(templates, pools, 5) for i in b) == sorted(length_of)


def test_many_templates_use_the_bucket_table_and_its_fallback() -> None:
    # Multiplicities from 1 to 400 over 60 templates: buckets of many bins, some inside one
    # template, some straddling a boundary (looked up by binary search).
    templates = Counter({(length, 1): 1 + (length * 37) % 400 for length in range(2, 62)})
    pools, _ = make_pools(templates, 3)
    plan = EpochPlan(templates, pools, 99)
    assert plan._tables.bucket_shift > 0
    table = plan._tables.bucket_segment
    assert (table < 0).any() and (table >= 0).any()
    assert list(plan) == oracle(templates, pools, 99)


# ---------------------------------------------------------------- array path and layouts


def arrays_as_bins(ids: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    assert ids.dtype == np.int64 and offsets.dtype == np.int64
    assert offsets[0] == 0 and offsets[-1] == len(ids) and (np.diff(offsets) > 0).all()
    return [ids[a:b].tolist() for a, b in itertools.pairwise(offsets.tolist())]


@SETTINGS
@given(*SHARDED_PLAN, st.data())
def test_bin_arrays_equal_the_lists(templates, seed, world_size, rank, drop_last, data) -> None:
    rank %= world_size
    pools, _ = make_pools(templates)
    plan = EpochPlan(templates, pools, seed, rank=rank, world_size=world_size, drop_last=drop_last)
    bins = list(plan)
    assert arrays_as_bins(*plan.bin_arrays(0, len(plan))) == bins
    start = data.draw(st.integers(-len(plan) - 2, len(plan) + 2))  # resume anywhere
    stop = data.draw(st.integers(-len(plan) - 2, len(plan) + 2))
    assert (
        arrays_as_bins(*plan.bin_arrays(start, stop)) == bins[start:stop] == plan.bins(start, stop)
    )


def test_bin_arrays_across_batches_and_empty_ranges() -> None:
    templates = Counter({(9, 1): 3000, (7, 7, 2): 100, (3,): 129, (2, 2): 14, (5,): 1})
    pools, _ = make_pools(templates, 4)
    expected = oracle(templates, pools, 77, 1, 3)
    tuning = EpochTuning(batch_ids=50)  # ~25 bins per batch
    plan = EpochPlan(templates, pools, 77, rank=1, world_size=3, tuning=tuning)
    ids, offsets = plan.bin_arrays(0, len(plan))
    assert arrays_as_bins(ids, offsets) == expected
    assert arrays_as_bins(*plan.bin_arrays(333, 1010)) == expected[333:1010]
    for start, stop in [(5, 5), (7, 3), (len(plan), len(plan) + 9)]:
        ids, offsets = plan.bin_arrays(start, stop)
        assert ids.shape == (0,) and offsets.tolist() == [0]
    assert EpochPlan(Counter(), {}).bin_arrays(0, 10)[1].tolist() == [0]
    # The arrays are the caller's: a later call does not overwrite them.
    first = plan.bin_arrays(0, 100)
    snapshot = first[0].copy()
    plan.bin_arrays(100, 400)
    list(plan)
    assert (first[0] == snapshot).all()


@pytest.mark.parametrize("seed", [None, 21])
@pytest.mark.parametrize(
    "layout",
    [
        {"min_group_bins": 1, "list_bins": 16},  # every size its own group, small blocks
        {"min_group_bins": 4, "list_bins": 7},  # some sizes grouped, the rest sliced
        {"min_group_bins": 10**6},  # nothing grouped: every block sliced
        {"list_bins": 1, "min_group_bins": 0},  # blocks of one bin
        {"list_bins": 1, "min_group_bins": 0, "batch_ids": 20_000},  # > 4096 blocks: uint32 keys
    ],
)
def test_list_layouts_give_the_documented_bins(layout: dict, seed: int | None) -> None:
    # Bins are laid out by size within blocks (see epoch.batches.Chunk) and put back in order:
    # whatever the grouping, the lists are the oracle's, in order, across batch and block
    # boundaries.
    templates = Counter(
        {(6, 1): 700, (5, 4): 300, (3, 3, 3): 200, (8,): 150, (2, 1, 1, 1): 90, (9, 9, 1): 3}
    )
    pools, _ = make_pools(templates, 7)
    tuning = EpochTuning(**{"batch_ids": 300, **layout})
    plan = EpochPlan(templates, pools, seed, rank=2, world_size=3, tuning=tuning)
    expected = oracle(templates, pools, seed, 2, 3)
    assert list(plan) == expected
    assert plan.bins(11, 400) == expected[11:400]
    assert list(plan.iter(123)) == expected[123:]


def test_small_pools_merged_into_one_array() -> None:
    # 40 lengths with 1..40 ids each, one with 2000: the small pools are copied into one array
    # (read with one take per batch), up to the budget; the bins do not change.
    templates = Counter({(length,): length for length in range(1, 41)})
    templates[(50, 50)] = 1000
    pools, _ = make_pools(templates, 5)
    expected = oracle(templates, pools, 8)
    for budget in (0, 5, 100, 820, 10**6):
        tuning = EpochTuning(min_merged_pools=2, merged_pool_ids=budget)
        plan = EpochPlan(templates, pools, 8, tuning=tuning)
        assert len(plan._pools.merged) <= budget
        assert list(plan) == expected
    assert len(plan._pools.merged_offsets) == 41  # every pool fits the last budget
    tuning = EpochTuning(min_merged_pools=2, merged_pool_ids=820)  # 1 + 2 + ... + 40
    assert len(EpochPlan(templates, pools, 8, tuning=tuning)._pools.merged_offsets) == 40


def test_iterators_of_one_plan_do_not_share_work_arrays() -> None:
    # Each iteration has its own work arrays: two iterators and `bins` interleaved, over
    # several batches, see their own bins.
    templates = Counter({(4, 4): 3000, (6, 2): 2000, (8,): 500})
    pools, _ = make_pools(templates)
    expected = list(EpochPlan(templates, pools, 3))
    plan = EpochPlan(templates, pools, 3, tuning=EpochTuning(batch_ids=1000))
    first, second = plan.iter(0), plan.iter(2000)
    interleaved = []
    for a, b in zip(first, second, strict=False):  # second is shorter
        interleaved.append((a, b))
        plan.bins(10, 20)  # batches computed in between
    assert [a for a, _ in interleaved] == expected[: len(interleaved)]
    assert [b for _, b in interleaved] == expected[2000:]


def test_feistel_family_grouped_path_matches_each_permutation() -> None:
    # The path an epoch uses: words grouped by member, members ordered by width. Sizes give
    # runs long enough for the scalar kernel (>= 2048 words), short runs (per-element kernel,
    # 8 rounds under 8 bits), and cycle walking down to the Python tail.
    sizes = [1, 3, 100, 129, 5000, 4097, 70_000]
    perms = sorted(
        (FeistelPermutation(n, seed_from_components(9, n)) for n in sizes),
        key=lambda p: ((p.n - 1).bit_length(), p.n),
    )
    family = FeistelFamily(perms)
    rng = np.random.default_rng(0)
    counts = [3, 7, 500, 400, 6000, 3000, 9000]
    members = np.repeat(np.arange(len(perms), dtype=np.uint16), counts)
    indices = np.concatenate([rng.integers(0, p.n, c) for p, c in zip(perms, counts, strict=True)])
    starts = [0, *np.cumsum(counts).tolist()]
    words = indices.astype(np.uint64)
    family.permute_grouped(words, members, starts, Scratch())
    expected = [perms[m][int(i)] for m, i in zip(members.tolist(), indices, strict=True)]
    assert words.tolist() == expected
    assert family.take(members, indices).tolist() == expected


# ---------------------------------------------------------------- input forms


def test_templates_json_form_and_unsorted_templates_are_accepted() -> None:
    as_json = [[[5, 5], 2], [[3, 7], 1], [[5, 3], 1], [[3], 1]]
    assert list(EpochPlan(as_json, POOLS, 4)) == list(EpochPlan(TEMPLATES, POOLS, 4))
    assert canonical_templates([((5, 5), 1), ([5, 5], 1)]) == [((5, 5), 2)]


def test_memory_mapped_and_narrow_pools_give_the_same_bins(tmp_path: Path) -> None:
    templates = Counter({(4, 4): 30, (6, 2): 20, (8,): 5})
    pools, _ = make_pools(templates)
    mapped = {}
    for length, pool in pools.items():
        np.save(tmp_path / f"{length}.npy", pool)
        mapped[length] = np.load(tmp_path / f"{length}.npy", mmap_mode="r")
    narrow = {length: pool.astype(np.uint32) for length, pool in pools.items()}
    as_lists = {length: pool.tolist() for length, pool in pools.items()}
    expected = list(EpochPlan(templates, pools, 8))
    assert list(EpochPlan(templates, mapped, 8)) == expected
    assert list(EpochPlan(templates, narrow, 8)) == expected
    assert list(EpochPlan(templates, as_lists, 8)) == expected
    json_keys = {str(length): pool for length, pool in pools.items()}
    with pytest.raises(InputError, match=r"a pool key is '\d' of type str.*int\(\)"):
        EpochPlan(templates, json_keys, 8)
    assert all(type(i) is int for b in expected for i in b)


def test_empty_epoch() -> None:
    plan = EpochPlan(Counter(), {}, 5)
    assert len(plan) == 0 and plan.num_bins_total == 0 and list(plan) == []
    assert plan.bins(0, 10) == []
    assert EpochPlan({}, {3: np.array([], dtype=np.int64)}).num_sequences == 0
    with pytest.raises(IndexError):
        plan[0]


# ---------------------------------------------------------------- errors


def test_wrong_pool_size_is_named() -> None:
    templates = Counter({(17,): 41})
    with pytest.raises(InputError, match="pool for length 17 has 40 ids but the templates need 41"):
        EpochPlan(templates, {17: np.arange(40)})


def test_missing_and_unused_pools_are_named() -> None:
    with pytest.raises(InputError, match="no pool for length 7"):
        EpochPlan(TEMPLATES, {5: POOLS[5], 3: POOLS[3]})
    with pytest.raises(InputError, match="no template uses length 9"):
        EpochPlan(TEMPLATES, {**POOLS, 9: np.array([42])})
    with pytest.raises(InputError, match="expected a 1-d integer array"):
        EpochPlan(TEMPLATES, {**POOLS, 7: np.array([0.0])})
    with pytest.raises(InputError, match="expected a mapping"):
        EpochPlan(TEMPLATES, [POOLS[7]])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("templates", "message"),
    [
        ({(5, 0): 1}, "length 0"),
        ({(5, -2): 1}, "length -2"),
        ({(5, 2.5): 1}, "length 2.5"),
        ({(): 1}, "template 0 is empty"),
        ({(5,): 0}, "multiplicity of template"),
        ({(5,): -1}, "multiplicity of template"),
        ({(5,): True}, "bool"),
        ([(5, 1, 2)], "pair"),
        ("55", "expected a Counter"),
        ({"55": 1}, "tuple of lengths"),
    ],
)
def test_bad_templates_are_refused(templates: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        EpochPlan(templates, {5: np.arange(1)})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"world_size": 0}, "world_size is 0"),
        ({"rank": 2, "world_size": 2}, "rank is 2"),
        ({"rank": -1}, "rank is -1"),
        ({"rank": 1.0, "world_size": 2}, "rank is 1.0"),
        ({"world_size": True}, "world_size is the bool True"),
    ],
)
def test_bad_rank_or_world_size(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EpochPlan(TEMPLATES, POOLS, **options)


def test_bad_seed_start_and_index() -> None:
    with pytest.raises(ConfigError, match="seed"):
        EpochPlan(TEMPLATES, POOLS, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="seed"):
        EpochPlan(TEMPLATES, POOLS, 2**63)
    plan = EpochPlan(TEMPLATES, POOLS, 1)
    with pytest.raises(ConfigError, match="start is 6"):
        plan.iter(6)
    with pytest.raises(ConfigError, match="start is -1"):
        materialize_epoch(TEMPLATES, POOLS, 1, start=-1)  # raised at the call, not at next()
    with pytest.raises(IndexError):
        plan[5]
    with pytest.raises(IndexError):
        plan[-6]
    with pytest.raises(TypeError):
        plan[True]
    with pytest.raises(TypeError):
        plan[1.0]  # type: ignore[index]


# ---------------------------------------------------------------- tuning


def test_tuning_defaults_are_frozen_and_shared_by_every_plan() -> None:
    default = EpochTuning()
    assert EpochPlan(TEMPLATES, POOLS).tuning == default
    assert default.batch_ids == 1 << 19 and default.list_bins == 256
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.batch_ids = 5  # type: ignore[misc]
    assert type(EpochTuning(batch_ids=np.int64(9)).batch_ids) is int


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"batch_ids": 0}, "EpochTuning.batch_ids is 0"),
        ({"list_bins": 257}, "EpochTuning.list_bins is 257; expected an integer from 1 to 256"),
        ({"merged_pool_ids": -1}, "EpochTuning.merged_pool_ids is -1"),
        ({"min_merged_pools": 0}, "EpochTuning.min_merged_pools is 0"),
        ({"max_buckets": True}, "EpochTuning.max_buckets is the bool True"),
        ({"ids_per_length": 2.5}, "EpochTuning.ids_per_length is 2.5 of type float"),
    ],
)
def test_bad_tuning_is_refused(fields: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EpochTuning(**fields)


def test_tuning_must_be_an_epoch_tuning() -> None:
    with pytest.raises(ConfigError, match="tuning is a dict; expected an EpochTuning"):
        EpochPlan(TEMPLATES, POOLS, tuning={"batch_ids": 7})  # type: ignore[arg-type]

"""Steps of an epoch plan: ranks balanced by attention cost, and resume on another world size."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import numpy as np
import pytest
from conftest import run_in_fresh_process
from hypothesis import given, settings
from hypothesis import strategies as st
from test_epoch import make_pools, template_strategy

from seqpack_cli.epoch import EpochCursor, EpochPlan
from seqpack_cli.epoch.dealing import BalancedDeal, _sort_keys
from seqpack_cli.epoch.plan import template_costs
from seqpack_cli.errors import ConfigError

SETTINGS = settings(max_examples=40, deadline=None)

seed_strategy = st.one_of(st.none(), st.integers(0, 2**63 - 1))
# (world_size, rows_per_rank, balance_window, drop_last)
LAYOUT = st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 5), st.booleans())


def all_ranks(templates, pools, seed, layout, **options) -> list[EpochPlan]:
    world_size, rows, window, drop_last = layout
    return [
        EpochPlan(
            templates,
            pools,
            seed,
            rank=rank,
            world_size=world_size,
            rows_per_rank=rows,
            balance="cost",
            cost_per_token=3.0,
            balance_window=window,
            drop_last=drop_last,
            **options,
        )
        for rank in range(world_size)
    ]


def dealt_bins(plans: list[EpochPlan], first_step: int = 0, last_step: int | None = None):
    """Every bin the ranks take in steps first..last-1, as tuples of ids."""
    out = []
    for plan in plans:
        rows = plan.rows_per_rank
        stop = len(plan) if last_step is None else last_step * rows
        out += [tuple(b) for b in plan.bins(first_step * rows, stop)]
    return out


def epoch_bins(templates, pools, seed) -> Counter:
    """The epoch's bins (the same seed pairs the same ids, whatever the deal)."""
    return Counter(tuple(b) for b in EpochPlan(templates, pools, seed))


# ---------------------------------------------------------------- a golden case by hand

GOLDEN = Counter({(8,): 1, (6, 2): 1, (4, 4): 1, (2, 2, 2, 2): 1})
GOLDEN_POOLS = {8: np.array([0]), 6: np.array([1]), 4: np.array([2, 3]), 2: np.arange(4, 9)}


def test_golden_deal_checked_by_hand() -> None:
    # c = 0: the bins cost 64, 40, 32 and 16 (sum of squares), canonical bins 0..3 in that order.
    # One step of 2 ranks x 2 rows. Round 1: the two costliest to ranks 0, 1 (64, 40); round 2:
    # the least-loaded rank (1, at 40) takes the next (32), rank 0 the last (16): 80 and 72.
    # DistributedSampler's strided order gives rank 0 bins 0 and 2 (96) and rank 1 56.
    pools = GOLDEN_POOLS
    plans = [
        EpochPlan(GOLDEN, pools, rank=r, world_size=2, rows_per_rank=2, balance="cost",
                  cost_per_token=0, balance_window=1)
        for r in range(2)
    ]  # fmt: skip
    assert [p.num_steps for p in plans] == [1, 1]
    assert [list(map(sum, (p.lengths(0), p.lengths(1)))) for p in plans] == [[8, 8], [8, 8]]
    assert [(p.lengths(0), p.lengths(1)) for p in plans] == [
        ((8,), (2, 2, 2, 2)),
        ((6, 2), (4, 4)),
    ]
    assert plans[0].step_costs(0, 1).tolist() == [[80.0, 72.0]]
    strided = EpochPlan(GOLDEN, pools, rank=0, world_size=2, rows_per_rank=2)
    assert strided.step_costs(0, 1).tolist() == [[96.0, 56.0]]


def test_padding_repeats_bins_of_the_last_window_checked_by_hand() -> None:
    # c = 0, no seed: the canonical order is 4 bins (8,) (cost 64), then 13 bins (4, 4) (32).
    # W = 4, B = 1: 5 steps for 17 bins, so 3 repeats. Windows of 2 steps: window 0 is steps
    # 0-1 (stream 0..7: the four (8,) and four (4, 4)), the last window steps 2-4 (stream 8..16:
    # nine (4, 4)) and the 3 repeats, which come from it: every step's 4 bins cost the same.
    # Repeats of the stream's first bins, as DistributedSampler pads, were three (8,) that
    # sorted into the last window's first step: 64, 64, 64, 32, max/mean 64/56 = 1.143.
    templates = Counter({(8,): 4, (4, 4): 13})
    pools, _ = make_pools(templates)
    plans = [
        EpochPlan(templates, pools, rank=r, world_size=4, balance="cost", cost_per_token=0,
                  balance_window=2)
        for r in range(4)
    ]  # fmt: skip
    costs = plans[0].step_costs(0, plans[0].num_steps)
    assert plans[0].num_steps == 5
    assert (costs.max(axis=1) / costs.mean(axis=1)).tolist() == [1.0] * 5
    dealt = Counter(dealt_bins(plans))
    repeats = [b for b, n in dealt.items() if n == 2]
    assert sorted(dealt.values()) == [1] * 14 + [2] * 3
    last_window = {tuple(b) for b in EpochPlan(templates, pools).bins(8, 17)}
    assert set(repeats) <= last_window
    for s in range(5):  # never one bin twice in a step
        step = [tuple(p.step(s)[0]) for p in plans]
        assert len(set(step)) == 4


def step_ratios(loads: np.ndarray) -> np.ndarray:
    return loads.max(axis=1) / loads.mean(axis=1)


@SETTINGS
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=80),
    st.integers(1, 6),
    st.integers(1, 3),
    st.integers(1, 4),
    seed_strategy,
)
def test_repeats_pad_the_last_window_with_its_own_bins(costs, world, rows, window, seed) -> None:
    # The deal alone, on stream indices whose costs are drawn: every index dealt, each window's
    # steps hold its own indices, the repeats are indices of the last window unless it is one
    # short step (twice in no step, unless the epoch is that step), and with B = 1 the last
    # window's worst step is no worse than filling its short step with the bins sorted just
    # above it.
    cost = np.array(costs, dtype=np.float64)
    n, size = len(cost), world * rows
    deal = BalancedDeal(n, 0, world, rows, window, False, seed, lambda u: u, cost)
    steps = deal.steps(0, deal.num_steps)
    assert steps.shape == (-(-n // size), world, rows)
    last = (max(1, deal.num_steps // window) - 1) * window  # the last window's first step
    for first in range(0, last, window):  # full windows: their indices, each once
        dealt = np.sort(steps[first : first + window].ravel())
        assert dealt.tolist() == list(range(first * size, (first + window) * size))
    counts = Counter(steps[last:].ravel().tolist())
    assert sum(counts.values()) - len(set(counts) & set(range(last * size, n))) == -n % size
    if n - last * size >= size:  # the repeats are bins of the last window
        assert sorted(counts) == list(range(last * size, n))
    else:  # a last window of one short step: the stream's first bins repeat, as strided
        assert sorted(counts) == sorted(
            {*range(last * size, n), *(i % n for i in range(-n % size))}
        )
    if n >= size:
        assert all(len(set(step.ravel().tolist())) == size for step in steps)
    if rows == 1 and n % size and n - last * size >= size:
        ordered = np.sort(cost[last * size :])[::-1]
        short = len(ordered) % size
        cut = len(ordered) - short
        filled = np.concatenate((ordered[:cut], ordered[cut - (size - short) :]))
        reference = step_ratios(filled.reshape(-1, size)).max()
        assert step_ratios(cost[steps[last:, :, 0]]).max() <= reference * (1 + 1e-12)


@SETTINGS
@given(st.lists(st.floats(0, 1e12), min_size=1, max_size=40), st.data())
def test_sort_keys_order_bins_as_their_costs(costs, data) -> None:
    # The deal sorts a window's bins by their templates' rank by cost: the same order, ties
    # included, as a stable sort of the costs, descending.
    cost = np.array(costs)
    t = np.array(data.draw(st.lists(st.integers(0, len(costs) - 1), max_size=200)), np.int64)
    order = np.argsort(_sort_keys(cost).take(t), kind="stable")
    assert order.tolist() == np.argsort(-cost.take(t), kind="stable").tolist()


def test_sort_keys_of_many_costs_are_wide_enough() -> None:
    cost = np.arange(70_000, dtype=np.float64)[::-1] * 0.5  # 70,000 distinct: past uint16
    keys = _sort_keys(cost)
    assert keys.dtype == np.int64
    assert keys.tolist() == list(range(70_000))


def test_template_costs_are_linear_plus_square() -> None:
    assert template_costs([(8,), (6, 2)], 10.0).tolist() == [10 * 8 + 64, 10 * 8 + 36 + 4]


# ---------------------------------------------------------------- invariants


@SETTINGS
@given(template_strategy, seed_strategy, st.integers(1, 5), st.integers(1, 4), st.data())
def test_balance_none_is_todays_plan(templates, seed, world_size, rows, data) -> None:
    pools, _ = make_pools(templates)
    rank = data.draw(st.integers(0, world_size - 1))
    drop_last = data.draw(st.booleans())
    today = EpochPlan(templates, pools, seed, rank=rank, world_size=world_size, drop_last=drop_last)
    stepped = EpochPlan(
        templates, pools, seed, rank=rank, world_size=world_size, drop_last=drop_last,
        rows_per_rank=rows,
    )  # fmt: skip
    assert list(stepped) == list(today)
    assert stepped.num_steps == -(-len(today) // rows)
    steps = [b for s in range(stepped.num_steps) for b in stepped.step(s)]
    assert steps == list(today)


@SETTINGS
@given(template_strategy, seed_strategy, LAYOUT)
def test_balanced_ranks_partition_the_epoch(templates, seed, layout) -> None:
    pools, length_of = make_pools(templates)
    plans = all_ranks(templates, pools, seed, layout)
    world_size, rows, _, drop_last = layout
    num_steps = {p.num_steps for p in plans}
    assert len(num_steps) == 1  # every rank the same number of steps
    assert {len(p) for p in plans} == {num_steps.pop() * rows}
    dealt = Counter(dealt_bins(plans))
    everything = epoch_bins(templates, pools, seed)
    total, step = sum(everything.values()), world_size * rows
    if drop_last:
        assert not dealt - everything  # nothing twice, nothing foreign
        assert total - sum(dealt.values()) == total % step  # only the tail is dropped
    else:
        assert set(dealt) == set(everything)  # every bin, and the padding repeats some
        assert sum(dealt.values()) - total == -total % step
    for plan in plans:  # each bin is a template's bin: lengths sum within the template
        for k in range(len(plan)):
            assert sorted((length_of[i] for i in plan[k]), reverse=True) == list(plan.lengths(k))


@SETTINGS
@given(template_strategy, seed_strategy, LAYOUT, st.data())
def test_random_access_steps_and_iteration_agree(templates, seed, layout, data) -> None:
    pools, _ = make_pools(templates)
    plan = all_ranks(templates, pools, seed, layout)[-1]
    every = list(plan)
    assert [plan[k] for k in range(len(plan))] == every
    if plan.num_steps:
        s = data.draw(st.integers(0, plan.num_steps - 1))
        rows = plan.rows_per_rank
        assert plan.step(s) == every[s * rows : (s + 1) * rows]
        ids, offsets = plan.bin_arrays(0, len(plan))
        assert [ids[a:b].tolist() for a, b in itertools.pairwise(offsets)] == every


@SETTINGS
@given(template_strategy, seed_strategy, LAYOUT, st.data())
def test_step_views_agree_with_the_ranks(templates, seed, layout, data) -> None:
    pools, _ = make_pools(templates)
    plans = all_ranks(templates, pools, seed, layout)
    plan = plans[0]
    if not plan.num_steps:
        return
    first = data.draw(st.integers(0, plan.num_steps - 1))
    last = data.draw(st.integers(first, plan.num_steps))
    t = plan.step_templates(first, last)
    costs = template_costs(plan.templates, 3.0)
    for s in range(first, last):
        for r, rank_plan in enumerate(plans):
            rows = rank_plan.rows_per_rank
            lengths = [rank_plan.lengths(k) for k in range(s * rows, (s + 1) * rows)]
            assert [plan.templates[i] for i in t[s - first, r]] == lengths
            expected = sum(costs[plan.templates.index(x)] for x in lengths)
            assert plan.step_costs(s, s + 1)[0, r] == pytest.approx(expected)
    ids, offsets = plan.step_id_arrays(first, last)
    expected_ids = [
        b for s in range(first, last) for p in plans for b in p.step(s)
    ]  # [step, rank, row] order
    assert [ids[a:b].tolist() for a, b in itertools.pairwise(offsets)] == expected_ids


@SETTINGS
@given(template_strategy, seed_strategy, LAYOUT, LAYOUT, st.sampled_from([None, "cost"]), st.data())
def test_resume_on_any_layout_gives_exactly_the_rest(
    templates, seed, layout, new_layout, new_balance, data
) -> None:
    pools, _ = make_pools(templates)
    layout = (*layout[:3], True)  # the first run drops no bin it did not deal
    plans = all_ranks(templates, pools, seed, layout)
    steps = data.draw(st.integers(0, plans[0].num_steps))
    cursor = plans[0].cursor_after(steps)
    assert all(p.cursor_after(steps) == cursor for p in plans)  # any rank's cursor
    before = dealt_bins(plans, 0, steps)
    world_size, rows, window, _ = new_layout
    resumed = [
        EpochPlan(
            templates, pools, seed, rank=r, world_size=world_size, rows_per_rank=rows,
            balance=new_balance, cost_per_token=1.0, balance_window=window, cursor=cursor,
        )
        for r in range(world_size)
    ]  # fmt: skip
    after = dealt_bins(resumed)
    for plan in resumed:  # random access agrees with the batches, padding included
        assert [plan[k] for k in range(len(plan))] == plan.bins(0, len(plan))
    everything = epoch_bins(templates, pools, seed)
    total = sum(everything.values())
    dealt = Counter(before + after)
    # None skipped (a tail the first run's drop_last left is dealt by the resumed run)...
    assert set(dealt) == set(everything)
    # ...and none repeated but the padding of the resumed run's last step.
    assert 0 <= sum(dealt.values()) - total < world_size * rows
    assert not Counter(before) - everything


@SETTINGS
@given(template_strategy, seed_strategy, LAYOUT, LAYOUT, st.data())
def test_resume_after_repeats_deals_no_bin_twice(templates, seed, layout, new_layout, data) -> None:
    # The first run pads its last step with repeats (drop_last=False) and may stop after them:
    # a bin it trained on, as itself or as a repeat, is not dealt again, and none is skipped.
    pools, _ = make_pools(templates)
    plans = all_ranks(templates, pools, seed, (*layout[:3], False))
    steps = data.draw(st.integers(0, plans[0].num_steps))
    cursor = plans[0].cursor_after(steps)
    before = set(dealt_bins(plans, 0, steps))
    after = set(
        dealt_bins(all_ranks(templates, pools, seed, (*new_layout[:3], False), cursor=cursor))
    )
    assert not before & after
    assert before | after == set(epoch_bins(templates, pools, seed))


def test_resume_on_the_same_layout_continues_the_same_steps() -> None:
    templates = Counter({(8,): 9, (6, 2): 14, (4, 4): 11, (3, 3, 2): 17, (2, 2, 2, 2): 13})
    pools, _ = make_pools(templates)
    options = dict(world_size=3, rows_per_rank=2, balance="cost", cost_per_token=2.0,
                   balance_window=4, drop_last=True)  # fmt: skip
    plan = EpochPlan(templates, pools, 5, rank=1, **options)
    cursor = plan.cursor_after(5)  # mid-window: 5 of 4-step windows
    assert cursor.pending
    resumed = EpochPlan(templates, pools, 5, rank=1, cursor=cursor, **options)
    again = EpochPlan(templates, pools, 5, rank=1, cursor=EpochCursor.from_state(
        json.loads(json.dumps(cursor.to_state()))), **options)  # fmt: skip
    assert list(again) == list(resumed)
    # The resumed plan deals the same bins as the rest of the original run, regrouped.
    rest = Counter(tuple(b) for r in range(3) for b in EpochPlan(
        templates, pools, 5, rank=r, **options).bins(5 * 2, None))  # fmt: skip
    resumed_all = Counter(tuple(b) for r in range(3) for b in EpochPlan(
        templates, pools, 5, rank=r, cursor=cursor, **options))  # fmt: skip
    assert resumed_all == rest


def test_same_steps_in_a_fresh_process() -> None:
    code = (
        "import json, numpy as np; from collections import Counter;"
        "from seqpack_cli.epoch import EpochPlan;"
        "t = Counter({(4, 4): 30, (6, 2): 20, (8,): 5, (3, 3, 2): 12});"
        "p = {4: np.arange(60), 6: np.arange(60, 80), 2: np.arange(80, 112),"
        " 8: np.arange(112, 117), 3: np.arange(117, 141)};"
        "pl = EpochPlan(t, p, 2024, rank=1, world_size=3, rows_per_rank=2, balance='cost',"
        " cost_per_token=7.5, balance_window=3);"
        "print(json.dumps([list(pl), pl.cursor_after(4).to_state()]))"
    )
    stdout = run_in_fresh_process(code, hash_seed="321")
    templates = Counter({(4, 4): 30, (6, 2): 20, (8,): 5, (3, 3, 2): 12})
    pools = {4: np.arange(60), 6: np.arange(60, 80), 2: np.arange(80, 112),
             8: np.arange(112, 117), 3: np.arange(117, 141)}  # fmt: skip
    plan = EpochPlan(templates, pools, 2024, rank=1, world_size=3, rows_per_rank=2,
                     balance="cost", cost_per_token=7.5, balance_window=3)  # fmt: skip
    assert json.loads(stdout) == [list(plan), plan.cursor_after(4).to_state()]


def test_balancing_evens_the_ranks_on_a_long_tailed_mix() -> None:
    rng = np.random.default_rng(3)
    lengths = np.clip(rng.lognormal(5.5, 1.3, 20_000).astype(int), 1, 2048)
    from seqpack_cli.packing import pack_length_histogram_batched

    templates = pack_length_histogram_batched(dict(Counter(lengths.tolist())), 2048)
    pools, _ = make_pools(Counter(dict(templates)))
    ratios = {}
    for balance in (None, "cost"):
        plan = EpochPlan(templates, pools, 11, world_size=8, rows_per_rank=2, balance=balance,
                         cost_per_token=12 * 512, drop_last=True)  # fmt: skip
        costs = plan.step_costs(0, plan.num_steps)
        ratios[balance] = (costs.max(1) / costs.mean(1)).mean()
    assert ratios["cost"] < 1.01 < ratios[None]


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"balance": "tokens"}, "balance is 'tokens'"),
        ({"balance": "cost"}, "balance='cost' needs cost_per_token"),
        ({"balance": "cost", "cost_per_token": -1}, "cost_per_token is -1.0"),
        ({"balance": "cost", "cost_per_token": "big"}, "cost_per_token is 'big'"),
        ({"rows_per_rank": 0}, "rows_per_rank"),
        ({"balance_window": 0}, "balance_window"),
        ({"cursor": 5}, "cursor is a int"),
        ({"cursor": {"pending": [3, 1], "next_position": 9}}, "must ascend"),
        ({"cursor": {"pending": [], "next_position": 10_000}}, "the epoch has 4 bins"),
        ({"cursor": {"next_position": 1}}, "is not what EpochCursor.to_state() returns"),
    ],
)
def test_bad_step_options_are_named(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        EpochPlan(GOLDEN, GOLDEN_POOLS, **options)


def test_bad_steps_are_named() -> None:
    plan = EpochPlan(GOLDEN, GOLDEN_POOLS, world_size=2, rows_per_rank=2)
    with pytest.raises(ConfigError, match="step"):
        plan.step(1)
    with pytest.raises(ConfigError, match="steps"):
        plan.cursor_after(2)

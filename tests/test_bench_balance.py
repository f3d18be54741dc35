"""benchmarks/bench_balance.py: its --smoke run, its figures recomputed directly.

The benchmark computes imbalance from `EpochPlan.step_costs` (every rank's cost from one plan).
Here every rank's plan is built on its own, its bins taken with `plan.bins` (step s = bins
s*B .. s*B+B-1), each id looked up to its length and costed as `c*l + l**2`: the per-step
max/mean of those costs, averaged and at the worst step, must be the table's figures (to the 4
decimals printed), and so must the B = 1 floor of the worst step (from every bin's cost) and
the window sweep's distinct templates per step and step-cost spread. The smoke sizes, the cases
and the packer are built here too, not taken from the bench.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import load_benchmark

from seqpack_cli.epoch.dealing import DEFAULT_BALANCE_WINDOW
from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.packing.histogram import pack_length_histogram_batched
from seqpack_cli.seeding import seed_from_components

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
C = 24576.0
SEED = seed_from_components(0, 0)
SMOKE_SEQUENCES = 3000


bench = load_benchmark("bench_balance")
import distributions  # noqa: E402  (benchmarks/ is on sys.path once the bench is loaded)


def table(text: str, number: int) -> list[list[str]]:
    """The rows (cells split on spaces) of section `number`'s table in the printed output."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"== {number}."))
    rows = []
    for line in lines[start + 3 :]:  # title, header, rule
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def problem(distribution: str, max_seq_len: int) -> tuple[object, dict, np.ndarray]:
    counts = distributions.make_histogram(distribution, SMOKE_SEQUENCES, max_seq_len, seed=0)
    templates = pack_length_histogram_batched(counts, max_seq_len)
    pools, length_of_id, offset = {}, {}, 0
    for length in sorted(counts):
        pools[length] = np.arange(offset, offset + counts[length], dtype=np.int64)
        length_of_id.update(dict.fromkeys(range(offset, offset + counts[length]), length))
        offset += counts[length]
    lengths = np.array([length_of_id[i] for i in range(offset)], dtype=np.int64)
    return templates, pools, lengths


def rank_steps(
    templates: object, pools: dict, world_size: int, rows: int, balance: str | None, window: int
) -> list[list[list[list[int]]]]:
    """[rank][step] -> the rank's bins (id lists) of that step, each rank's plan on its own."""
    per_rank = []
    for rank in range(world_size):
        plan = EpochPlan(
            templates,
            pools,
            SEED,
            rank=rank,
            world_size=world_size,
            rows_per_rank=rows,
            balance=balance,
            cost_per_token=C,
            balance_window=window,
        )
        bins = plan.bins(0, len(plan))
        per_rank.append([bins[s * rows : (s + 1) * rows] for s in range(plan.num_steps)])
        assert per_rank[-1][:2] == [plan.step(s) for s in range(min(2, plan.num_steps))]
    assert len({len(steps) for steps in per_rank}) == 1  # every rank, as many steps
    return per_rank


def direct_costs(per_rank: list, lengths: np.ndarray) -> np.ndarray:
    """[steps, ranks]: the sum of c*l + l**2 over each rank's sequences in each step."""
    num_steps = len(per_rank[0])
    costs = np.zeros((num_steps, len(per_rank)))
    for rank, steps in enumerate(per_rank):
        for s, bins in enumerate(steps):
            for ids in bins:
                seq = lengths[np.asarray(ids, dtype=np.int64)].astype(np.float64)
                costs[s, rank] += float((C * seq + seq * seq).sum())
    return costs


def worst_step_floor(templates: object, pools: dict, lengths: np.ndarray, world: int) -> float:
    """W * c_(W) / (c_(1) + (W - 1) * c_(W)) over the costs of the epoch's bins, each costed
    from its ids' lengths, sorted ascending."""
    bins = EpochPlan(templates, pools, SEED).bins(0, None)
    costs = sorted(
        float((C * seq + seq * seq).sum())
        for seq in (lengths[np.asarray(ids)].astype(np.float64) for ids in bins)
    )
    return world * costs[world - 1] / (costs[0] + (world - 1) * costs[world - 1])


@pytest.fixture(scope="module")
def smoke_output() -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench.main(["--smoke"]) == 0
    return out.getvalue()


CASES = {"chat-1024": ("chat", 1024), "code-2048": ("code", 2048), "code-8192": ("code", 8192)}


def test_imbalance_table_equals_a_direct_computation(smoke_output: str) -> None:
    rows = table(smoke_output, 1)
    assert len(rows) == len(CASES) * 2 * 2  # cases x W in {2, 8} x B in {1, 4}
    problems = {name: problem(*spec) for name, spec in CASES.items()}
    for case, world, rows_per_rank, steps, *figures, floor, met in rows:
        templates, pools, lengths = problems[case]
        if rows_per_rank == "1":
            expected_floor = worst_step_floor(templates, pools, lengths, int(world))
            assert float(floor) == pytest.approx(expected_floor, abs=5.01e-5), (case, world)
        else:
            assert floor == "-"
        expected = []
        for balance in (None, "cost"):
            per_rank = rank_steps(
                templates, pools, int(world), int(rows_per_rank), balance, DEFAULT_BALANCE_WINDOW
            )
            costs = direct_costs(per_rank, lengths)
            ratios = costs.max(axis=1) / costs.mean(axis=1)
            assert len(ratios) == int(steps.replace(",", ""))
            expected += [ratios.mean(), ratios.max()]
        assert [float(f) for f in figures] == pytest.approx(expected, abs=5.01e-5), (case, world)
        cost_mean, cost_worst = expected[2:]
        assert met == ("yes" if cost_mean <= 1.01 and cost_worst <= 1.10 else "NO")


def test_window_sweep_equals_a_direct_computation(smoke_output: str) -> None:
    rows = table(smoke_output, 4)
    assert [row[0] for row in rows] == ["none", "1", "4", "16"]
    templates, pools, lengths = problem("code", 8192)
    for window, mean, worst, kinds, spread in rows:
        balance = None if window == "none" else "cost"
        size = DEFAULT_BALANCE_WINDOW if window == "none" else int(window)
        per_rank = rank_steps(templates, pools, 4, 1, balance, size)
        costs = direct_costs(per_rank, lengths)
        ratios = costs.max(axis=1) / costs.mean(axis=1)
        # A template is a bin's lengths, descending: distinct tuples among the step's bins.
        distinct = [
            len(
                {
                    tuple(sorted(lengths[ids].tolist(), reverse=True))
                    for steps in per_rank
                    for ids in steps[s]
                }
            )
            for s in range(len(ratios))
        ]
        totals = costs.sum(axis=1)
        expected = [ratios.mean(), ratios.max(), np.mean(distinct), totals.std() / totals.mean()]
        got = [float(mean), float(worst), float(kinds), float(spread)]
        tolerance = np.array([5.01e-5, 5.01e-5, 5.01e-3, 5.01e-5])  # 4 decimals; 2 for kinds
        assert np.all(np.abs(np.array(got) - expected) <= tolerance), (window, got, expected)


def test_step_time_and_memory_tables(smoke_output: str) -> None:
    timing = table(smoke_output, 2)
    assert [(row[0], row[1]) for row in timing] == [
        (case, balance) for case in CASES for balance in ("None", "cost")
    ]
    for _, _, steps, _, mean_ms, p99_ms, max_ms, met in timing:
        assert 0 < float(mean_ms) <= float(max_ms)
        assert float(p99_ms) <= float(max_ms)
        assert met == ("yes" if float(mean_ms) <= 1.0 else "NO")
        assert int(steps) > 0
    memory = table(smoke_output, 3)
    assert [row[1] for row in memory] == ["3,000", "30,000"]
    assert all(float(row[-1]) > 0 for row in memory)

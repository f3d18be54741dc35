"""Rank balance benchmark: today's plan (balance=None) and balance="cost", side by side (issue 23).

In data parallelism a step lasts as long as its most expensive rank; a rank's cost in a step is
the sum over its bins of `c*l + l**2` over their sequences. Per step the imbalance is
`max rank cost / mean rank cost` (1.0: no rank waits). Prints, in one run:
1. imbalance: its mean over the epoch's steps and its worst step, without and with balancing, on
   chat at 4,096 tokens, code at 8,192 and code at 32,768 (long context), 1e6 sequences each
   (`distributions.py`), packed by prepare's packer (`pack_length_histogram_batched`), at
   W in {8, 64} x B in {1, 4}, c = 24,576 (12 x hidden 2,048). Targets: balanced mean <= 1.01,
   worst <= 1.10. At B = 1 it also prints the floor of the worst step, what no deal of W bins a
   step can beat: the step holding the epoch's cheapest bin c_(1) holds W - 1 more, the costliest
   at least c_(W) (the W-th cheapest), so its max/mean is at least
   W * c_(W) / (c_(1) + (W - 1) * c_(W)). A packing whose last bin is nearly empty (the packer's
   leftover) has a floor above 1.10 at W = 8 (~8 / (7 + its fill)): then no deal meets the target;
2. the time to build a step, per rank per step, iterating `plan.step(s)` over a whole epoch on
   ranks 0 and W-1 at W=64, B=4 (target <= 1 ms): the mean, and the slowest step (the one that
   sorts and deals a window);
3. the peak memory of iterating a rank's plan (tracemalloc, after the plan is built), at N and
   10 x N sequences: it follows the largest window the plan deals at once (the last window
   takes the steps left over: up to 2 x window - 1 steps), not N;
4. the balancing window: mean and worst imbalance at windows 1, 4, 16, 64 and the default
   (`DEFAULT_BALANCE_WINDOW`) on code at 32,768, W=8, B=1 (the hardest case), with two
   measures of what the window costs in randomness: the distinct templates per step (today's
   order mixes them; a large window groups bins of like cost, so a step holds fewer kinds), and
   the spread of the steps' total cost (std / mean: sorted windows make expensive and cheap
   steps).

Every plan is epoch 0 of seed 0 (`seed_from_components(0, 0)`, as `PackedDataset(seed=0)` plans
it); pools are in-memory ranges of ids (id -> length is a range look-up). Times are wall seconds
(`time.perf_counter`) on a machine that may be shared.

    python benchmarks/bench_balance.py            # full run (1e6 sequences per case)
    python benchmarks/bench_balance.py --smoke    # tiny sizes (seconds): what the test runs
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # distributions

import distributions
import numpy as np
from tables import print_table

from seqpack_cli.epoch.dealing import DEFAULT_BALANCE_WINDOW
from seqpack_cli.epoch.plan import EpochPlan, template_costs
from seqpack_cli.packing.histogram import pack_length_histogram_batched
from seqpack_cli.seeding import seed_from_components

SEED = seed_from_components(0, 0)  # epoch 0 of seed 0, as the datasets plan it
COST_PER_TOKEN = 24576.0  # 12 x hidden 2,048: veRL's coefficient (seqpack_cli.hf.cost_per_token)
TARGET_MEAN, TARGET_WORST, TARGET_STEP_MS = 1.01, 1.10, 1.0
BALANCES = (None, "cost")
# Steps whose costs are held at once: bounds the memory of a plan of any size.
_CHUNK_BINS = 1 << 18


@dataclass(frozen=True)
class Case:
    """One length mix: `num_sequences` draws of `distribution`, packed at `max_seq_len`."""

    distribution: str
    max_seq_len: int
    num_sequences: int

    @property
    def name(self) -> str:
        return f"{self.distribution}-{self.max_seq_len}"


@dataclass(frozen=True)
class Sizes:
    cases: tuple[Case, ...]
    world_sizes: tuple[int, ...]
    rows_per_rank: tuple[int, ...]
    timing_layout: tuple[int, int]  # (W, B) of the step time
    memory_case: Case  # iterated at N and 10 x N
    sweep_case: Case
    sweep_layout: tuple[int, int]
    windows: tuple[int, ...]


FULL = Sizes(
    cases=(Case("chat", 4096, 10**6), Case("code", 8192, 10**6), Case("code", 32768, 10**6)),
    world_sizes=(8, 64),
    rows_per_rank=(1, 4),
    timing_layout=(64, 4),
    memory_case=Case("chat", 4096, 10**6),
    sweep_case=Case("code", 32768, 10**6),
    sweep_layout=(8, 1),
    windows=(1, 4, 16, 64, DEFAULT_BALANCE_WINDOW),
)
SMOKE = Sizes(
    cases=(Case("chat", 1024, 3000), Case("code", 2048, 3000), Case("code", 8192, 3000)),
    world_sizes=(2, 8),
    rows_per_rank=(1, 4),
    timing_layout=(8, 4),
    memory_case=Case("chat", 1024, 3000),
    sweep_case=Case("code", 8192, 3000),
    sweep_layout=(4, 1),
    windows=(1, 4, 16),
)


@dataclass(frozen=True)
class Problem:
    """A case packed: its templates, in-memory pools, and each id's length (ids are 0..N-1)."""

    case: Case
    templates: Counter[tuple[int, ...]]
    pools: dict[int, np.ndarray]
    length_of_id: np.ndarray

    @property
    def num_bins(self) -> int:
        return sum(self.templates.values())

    def plan(
        self,
        world_size: int,
        rows_per_rank: int,
        balance: str | None,
        *,
        rank: int = 0,
        balance_window: int = DEFAULT_BALANCE_WINDOW,
    ) -> EpochPlan:
        return EpochPlan(
            self.templates,
            self.pools,
            SEED,
            rank=rank,
            world_size=world_size,
            rows_per_rank=rows_per_rank,
            balance=balance,
            cost_per_token=COST_PER_TOKEN,
            balance_window=balance_window,
        )


def build_problem(case: Case) -> Problem:
    """The case's lengths (seed 0), packed as `seqpack prepare` packs them (its default packer);
    length L's pool holds a contiguous range of ids."""
    counts = distributions.make_histogram(
        case.distribution, case.num_sequences, case.max_seq_len, seed=0
    )
    templates = pack_length_histogram_batched(counts, case.max_seq_len)
    pools, offset = {}, 0
    for length in sorted(counts):
        pools[length] = np.arange(offset, offset + counts[length], dtype=np.int64)
        offset += counts[length]
    lengths = np.array(sorted(counts), dtype=np.int64)
    length_of_id = np.repeat(lengths, [counts[length] for length in lengths.tolist()])
    return Problem(case, templates, pools, length_of_id)


# ---------------------------------------------------------------- 1. imbalance


@dataclass(frozen=True)
class Imbalance:
    case: str
    world_size: int
    rows_per_rank: int
    balance: str | None
    num_steps: int
    mean: float  # mean over steps of max rank cost / mean rank cost
    worst: float
    floor: float | None  # B = 1: the least worst step of any deal (None at B > 1)


def worst_step_floor(problem: Problem, world_size: int) -> float | None:
    """The floor of the worst step at B = 1, W * c_(W) / (c_(1) + (W - 1) * c_(W)) over the
    epoch's bin costs sorted ascending (see the module docstring); None under W bins."""
    pairs = list(problem.templates.items())
    costs = template_costs([template for template, _ in pairs], COST_PER_TOKEN)
    counts = np.array([count for _, count in pairs], dtype=np.int64)
    order = np.argsort(costs, kind="stable")
    cheapest = np.repeat(costs[order], np.minimum(counts[order], world_size))[:world_size]
    if len(cheapest) < world_size:
        return None
    return float(world_size * cheapest[-1] / (cheapest[0] + (world_size - 1) * cheapest[-1]))


def step_ratios(plan: EpochPlan, window: int) -> np.ndarray:
    """max rank cost / mean rank cost of every step, from `plan.step_costs`, in chunks of whole
    windows (a balanced deal then sorts each window once)."""
    chunk = max(1, _CHUNK_BINS // (plan.world_size * plan.rows_per_rank))
    chunk = -(-chunk // window) * window
    ratios = []
    for first in range(0, plan.num_steps, chunk):
        costs = plan.step_costs(first, min(first + chunk, plan.num_steps))
        ratios.append(costs.max(axis=1) / costs.mean(axis=1))
    return np.concatenate(ratios) if ratios else np.zeros(0)


def measure_imbalance(
    problem: Problem,
    world_size: int,
    rows_per_rank: int,
    balance: str | None,
    window: int = DEFAULT_BALANCE_WINDOW,
) -> Imbalance:
    plan = problem.plan(world_size, rows_per_rank, balance, balance_window=window)
    ratios = step_ratios(plan, window)
    return Imbalance(
        problem.case.name,
        world_size,
        rows_per_rank,
        balance,
        plan.num_steps,
        math.fsum(ratios.tolist()) / len(ratios),
        float(ratios.max()),
        worst_step_floor(problem, world_size) if rows_per_rank == 1 else None,
    )


def imbalanceprint_table(problems: Sequence[Problem], sizes: Sizes) -> list[Imbalance]:
    return [
        measure_imbalance(problem, world_size, rows, balance)
        for problem in problems
        for world_size in sizes.world_sizes
        for rows in sizes.rows_per_rank
        for balance in BALANCES
    ]


def print_imbalance(rows: Sequence[Imbalance]) -> None:
    header = [
        "case",
        "W",
        "B",
        "steps",
        "none mean",
        "none worst",
        "cost mean",
        "cost worst",
        "floor",
        "met",
    ]
    lines = []
    for none, cost in zip(rows[::2], rows[1::2], strict=True):
        met = cost.mean <= TARGET_MEAN and cost.worst <= TARGET_WORST
        lines.append(
            [
                none.case,
                str(none.world_size),
                str(none.rows_per_rank),
                f"{none.num_steps:,}",
                f"{none.mean:.4f}",
                f"{none.worst:.4f}",
                f"{cost.mean:.4f}",
                f"{cost.worst:.4f}",
                "-" if cost.floor is None else f"{cost.floor:.4f}",
                "yes" if met else "NO",
            ]
        )
    print_table(
        f"1. imbalance (max/mean rank cost per step), c = {COST_PER_TOKEN:,.0f}, window "
        f"{DEFAULT_BALANCE_WINDOW}; target cost mean <= {TARGET_MEAN:.2f}, "
        f"worst <= {TARGET_WORST:.2f}; floor: the least worst step any deal reaches (B = 1)",
        header,
        lines,
    )


# ---------------------------------------------------------------- 2. step time


def time_steps(problem: Problem, world_size: int, rows: int, balance: str | None) -> list[str]:
    """Iterate ranks 0 and W-1 over the whole epoch, one `plan.step(s)` at a time: the mean and
    the slowest step in ms (the slowest computes a window), and the ids per step."""
    times, num_ids = [], 0
    for rank in sorted({0, world_size - 1}):
        plan = problem.plan(world_size, rows, balance, rank=rank)
        for s in range(plan.num_steps):
            start = time.perf_counter()
            bins = plan.step(s)
            times.append(time.perf_counter() - start)
            num_ids += sum(map(len, bins))
    ms = np.array(times) * 1e3
    return [
        problem.case.name,
        str(balance),
        f"{len(times):,}",
        f"{num_ids / len(times):.1f}",
        f"{ms.mean():.3f}",
        f"{np.percentile(ms, 99):.3f}",
        f"{ms.max():.3f}",
        "yes" if ms.mean() <= TARGET_STEP_MS else "NO",
    ]


# ---------------------------------------------------------------- 3. memory


def iteration_peak(problem: Problem, world_size: int, rows: int) -> list[str]:
    """Peak traced allocations (numpy arrays included) while rank 0 iterates its whole balanced
    epoch, the plan built beforehand."""
    plan = problem.plan(world_size, rows, "cost")
    tracemalloc.start()
    try:
        for s in range(plan.num_steps):
            plan.step(s)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The epoch's last window also takes the steps left over (seqpack_cli.epoch.dealing), so
    # the largest window dealt at once has up to 2 * window - 1 steps: what the peak follows.
    windows = max(1, plan.num_steps // plan.balance_window)
    largest = plan.num_steps - (windows - 1) * plan.balance_window
    return [
        problem.case.name,
        f"{problem.case.num_sequences:,}",
        f"{problem.num_bins:,}",
        f"{plan.num_steps:,}",
        f"{largest:,}",
        f"{peak / 2**20:.2f}",
    ]


# ---------------------------------------------------------------- 4. window sweep


@dataclass(frozen=True)
class WindowRow:
    window: int
    mean: float
    worst: float
    templates_per_step: float  # distinct templates among a step's W*B bins, mean over steps
    step_cost_cv: float  # std / mean of the steps' total costs


def measure_window(problem: Problem, world_size: int, rows: int, window: int | None) -> WindowRow:
    """window None: today's plan (balance=None)."""
    balance = None if window is None else "cost"
    size = window or DEFAULT_BALANCE_WINDOW
    plan = problem.plan(world_size, rows, balance, balance_window=size)
    ratios = step_ratios(plan, size)
    templates = plan.step_templates(0, plan.num_steps).reshape(plan.num_steps, -1)
    kinds = [np.unique(step[step >= 0]).size for step in templates]
    totals = plan.step_costs(0, plan.num_steps).sum(axis=1)
    return WindowRow(
        window or 0,
        math.fsum(ratios.tolist()) / len(ratios),
        float(ratios.max()),
        float(np.mean(kinds)),
        float(totals.std() / totals.mean()),
    )


def print_windows(problem: Problem, layout: tuple[int, int], rows: Sequence[WindowRow]) -> None:
    lines = [
        [
            "none" if row.window == 0 else str(row.window),
            f"{row.mean:.4f}",
            f"{row.worst:.4f}",
            f"{row.templates_per_step:.2f}",
            f"{row.step_cost_cv:.4f}",
        ]
        for row in rows
    ]
    world_size, rows_per_rank = layout
    print_table(
        f"4. balance_window on {problem.case.name}, W={world_size}, B={rows_per_rank} "
        f"({problem.case.num_sequences:,} sequences; 'none': today's plan)",
        ["window", "mean", "worst", "templates/step", "step cost cv"],
        lines,
    )


# ---------------------------------------------------------------- output


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    args = parser.parse_args(argv)
    sizes = SMOKE if args.smoke else FULL

    start = time.perf_counter()
    problems = [build_problem(case) for case in sizes.cases]
    print("cases (packed by pack_length_histogram_batched):")
    for problem in problems:
        print(
            f"  {problem.case.name}: {problem.case.num_sequences:,} sequences, "
            f"{problem.num_bins:,} bins, {len(problem.templates):,} templates"
        )
    print_imbalance(imbalanceprint_table(problems, sizes))

    world_size, rows = sizes.timing_layout
    print_table(
        f"2. building a step, per rank per step (ranks 0 and {world_size - 1} iterate a whole "
        f"epoch), W={world_size}, B={rows}; target mean <= {TARGET_STEP_MS} ms",
        ["case", "balance", "steps", "ids/step", "mean ms", "p99 ms", "max ms", "met"],
        [
            time_steps(problem, world_size, rows, balance)
            for problem in problems
            for balance in BALANCES
        ],
    )

    case = sizes.memory_case
    memory_cases = [case, Case(case.distribution, case.max_seq_len, 10 * case.num_sequences)]
    print_table(
        f"3. peak traced memory while rank 0 iterates its balanced epoch, W={world_size}, "
        f"B={rows} (the plan built beforehand)",
        ["case", "sequences", "bins", "steps", "largest window", "peak MiB"],
        [iteration_peak(build_problem(case), world_size, rows) for case in memory_cases],
    )

    sweep = build_problem(sizes.sweep_case)
    world_size, rows = sizes.sweep_layout
    windows: list[int | None] = [None, *sizes.windows]
    print_windows(
        sweep, sizes.sweep_layout, [measure_window(sweep, world_size, rows, w) for w in windows]
    )
    print(f"\ntotal {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

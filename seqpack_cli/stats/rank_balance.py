"""How unequal the ranks of a data-parallel step would be: what balancing by cost buys.

In data parallelism every rank waits for the slowest, so a step lasts as long as its most
expensive rank; a rank's cost in a step is the sum over its bins of `c*l + l**2` over their
sequences (`seqpack_cli.epoch.dealing`). `rank_balance` builds the epoch plan a training run would
use (`EpochPlan`, epoch 0 of `--seed`: `seed_from_components(seed, 0)`, as the datasets do) at
each world size W and rows per rank B, with `balance=None` (DistributedSampler's order) and with
`balance="cost"`, and reports per step the imbalance `max rank cost / mean rank cost` (1.0: no
rank waits): its mean over the epoch's steps and its worst step.

The figures are exactly `EpochPlan(templates, pools, ...).step_costs(...)` of the real plan:
the deal depends only on the templates and the seed, never on which ids fill a bin, so the plan
is built on pools that hold no memory (each a zero-stride array of the right size). Memory and
time grow with the number of bins (a few million per second), not with the sequences.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.epoch.dealing import DEFAULT_BALANCE_WINDOW
from seqpack_cli.epoch.plan import COST_PER_TOKEN_FIX, EpochPlan, check_cost_per_token
from seqpack_cli.epoch.tables import ids_needed
from seqpack_cli.epoch.tuning import EpochTuning
from seqpack_cli.errors import ConfigError, option
from seqpack_cli.progress import ProgressCallback
from seqpack_cli.seeding import check_required_seed, seed_from_components
from seqpack_cli.templates import canonical_templates

__all__ = [
    "BALANCE_NAMES",
    "PlanBalance",
    "RankBalanceOptions",
    "plan_balance",
    "rank_balance",
]

BALANCE_NAMES: Mapping[str | None, str] = {None: "none", "cost": "cost"}
"""How a report names each `EpochPlan(balance=...)` value."""

# The bins whose costs are held at once: bounds the memory of a plan of any size (~10 MiB).
_CHUNK_BINS = 1 << 18
# The epoch the figures describe: the datasets seed epoch e with seed_from_components(seed, e).
_EPOCH = 0
_PROGRESS_STEP = "rank balance plans"
_WORLD_SIZES = option("world_size", python="world_sizes")


@dataclass(frozen=True)
class RankBalanceOptions:
    """The plans to weigh, checked when built: every (world size, rows per rank) pair, each
    with and without balancing. `cost_per_token`: c of a bin's cost `c*l + l**2` (>= 0, see
    `seqpack_cli.hf.cost_per_token`); `balance_window`: steps per balancing window; `seed`: the
    run's seed (the plan of its epoch 0)."""

    world_sizes: Sequence[int]
    rows_per_rank: Sequence[int] = (1,)
    cost_per_token: float | None = None
    balance_window: int = DEFAULT_BALANCE_WINDOW
    seed: int = 0

    def __post_init__(self) -> None:
        world_sizes = _positive_ints(
            _WORLD_SIZES, self.world_sizes, "the data-parallel ranks, e.g. 8,64"
        )
        rows = _positive_ints(
            option("rows_per_rank"),
            self.rows_per_rank,
            "the rows each rank trains on per step, e.g. 1,4",
        )
        object.__setattr__(self, "world_sizes", world_sizes)
        object.__setattr__(self, "rows_per_rank", rows)
        object.__setattr__(self, "cost_per_token", _check_cost(self.cost_per_token))
        window = check_int(
            option("balance_window"),
            self.balance_window,
            minimum=1,
            fix=f"pass the steps per balancing window (default {DEFAULT_BALANCE_WINDOW})",
        )
        object.__setattr__(self, "balance_window", window)
        seed = check_required_seed(self.seed)
        object.__setattr__(self, "seed", seed)

    @property
    def epoch_seed(self) -> int:
        """The plan's seed: epoch 0 of `seed`, as `PackedDataset(seed=seed)` plans it."""
        return seed_from_components(self.seed, _EPOCH)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cost_per_token": self.cost_per_token,
            "balance_window": self.balance_window,
            "seed": self.seed,
            "epoch_seed": self.epoch_seed,
        }


@dataclass(frozen=True)
class PlanBalance:
    """The rank imbalance of one epoch plan: per step, its most expensive rank's cost over the
    mean rank's (1.0: no rank waits), averaged over the steps and at the worst step."""

    max_seq_len: int
    max_seqs_per_bin: int | None  # the cap the templates were packed with (None: none)
    world_size: int
    rows_per_rank: int
    balance: str | None  # EpochPlan's balance: None or "cost"
    num_steps: int
    mean_max_over_mean: float | None  # None: the plan has no step (nothing fits max_seq_len)
    worst_max_over_mean: float | None
    worst_step: int | None  # the first step at which the worst is reached

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_seq_len": self.max_seq_len,
            "max_seqs_per_bin": self.max_seqs_per_bin,
            "world_size": self.world_size,
            "rows_per_rank": self.rows_per_rank,
            "balance": self.balance,
            "num_steps": self.num_steps,
            "mean_max_over_mean": self.mean_max_over_mean,
            "worst_max_over_mean": self.worst_max_over_mean,
            "worst_step": self.worst_step,
        }


def _positive_ints(name: str, values: Any, what: str) -> tuple[int, ...]:
    """`values` (one int or several) as a tuple of unique ints >= 1, in the order given;
    `name` is the option as messages show it."""
    items = [values] if isinstance(values, int) else list(values)
    if not items:
        raise ConfigError(f"{name} is empty; expected {what}")
    checked = (check_int(name, value, minimum=1, fix=f"pass {what}") for value in items)
    return tuple(dict.fromkeys(checked))


def _check_cost(cost_per_token: Any) -> float:
    name = option("cost_per_token")
    if cost_per_token is None:
        raise ConfigError(
            f"{_WORLD_SIZES} needs {name}: the linear layers' work per token relative to "
            f"attention's per token pair; {COST_PER_TOKEN_FIX}"
        )
    return check_cost_per_token(cost_per_token, name)


def _empty_pools(templates: Sequence[tuple[tuple[int, ...], int]]) -> dict[int, np.ndarray]:
    """Pools of the sizes the templates need that hold no memory: the deal never reads an id."""
    return {
        length: np.broadcast_to(np.int64(0), (count,))
        for length, count in ids_needed(templates).items()
    }


def plan_balance(
    templates: Any,
    *,
    max_seq_len: int,
    max_seqs_per_bin: int | None,
    world_size: int,
    rows_per_rank: int,
    balance: str | None,
    options: RankBalanceOptions,
) -> PlanBalance:
    """The rank imbalance of epoch 0 of the plan of `templates` (a Counter or pairs) at
    `world_size` x `rows_per_rank`, with `balance` None or "cost"."""
    pairs = canonical_templates(templates)
    plan = EpochPlan(
        pairs,
        _empty_pools(pairs),
        options.epoch_seed,
        world_size=world_size,
        rows_per_rank=rows_per_rank,
        balance=balance,
        cost_per_token=options.cost_per_token,
        balance_window=options.balance_window,
        # merged_pool_ids=0: copy no pool (ours are zero-stride); the tuning never changes a bin.
        tuning=EpochTuning(merged_pool_ids=0),
    )
    num_steps = plan.num_steps
    # Whole windows per chunk, so a balanced deal computes each window once.
    window = options.balance_window
    chunk = max(1, _CHUNK_BINS // (world_size * rows_per_rank))
    chunk = -(-chunk // window) * window
    sums: list[float] = []
    worst, worst_step = 0.0, 0
    for first in range(0, num_steps, chunk):
        costs = plan.step_costs(first, min(first + chunk, num_steps))
        ratios = costs.max(axis=1) / costs.mean(axis=1)
        sums.append(math.fsum(ratios.tolist()))
        at = int(np.argmax(ratios))
        if ratios[at] > worst:
            worst, worst_step = float(ratios[at]), first + at
    return PlanBalance(
        max_seq_len=max_seq_len,
        max_seqs_per_bin=max_seqs_per_bin,
        world_size=world_size,
        rows_per_rank=rows_per_rank,
        balance=balance,
        num_steps=num_steps,
        mean_max_over_mean=math.fsum(sums) / num_steps if num_steps else None,
        worst_max_over_mean=worst if num_steps else None,
        worst_step=worst_step if num_steps else None,
    )


def rank_balance(
    packings: Sequence[tuple[int, int | None, Any]],
    options: RankBalanceOptions,
    *,
    progress: ProgressCallback | None = None,
) -> list[PlanBalance]:
    """The rank imbalance of every packing `(max_seq_len, max_seqs_per_bin, templates)` at every
    (world size, rows per rank) of `options`, without then with balancing: in that order."""
    results: list[PlanBalance] = []
    total = len(packings) * len(options.world_sizes) * len(options.rows_per_rank) * 2
    for max_seq_len, cap, templates in packings:
        pairs = canonical_templates(templates)
        for world_size in options.world_sizes:
            for rows in options.rows_per_rank:
                for balance in BALANCE_NAMES:
                    if progress is not None:
                        progress(_PROGRESS_STEP, len(results), total)
                    results.append(
                        plan_balance(
                            pairs,
                            max_seq_len=max_seq_len,
                            max_seqs_per_bin=cap,
                            world_size=world_size,
                            rows_per_rank=rows,
                            balance=balance,
                            options=options,
                        )
                    )
    if progress is not None:
        progress(_PROGRESS_STEP, total, total)
    return results

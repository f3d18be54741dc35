"""The rank balance of `seqpack stats --world-size ...` drawn: a rich table, and its wording.

Each (packing, world size, rows per rank) shows two rows, the plan without balancing (`none`,
DistributedSampler's order) and with it (`cost`): the steps of the epoch, the mean over them of
the most expensive rank's cost over the mean rank's, and the worst step. The figures come from
`seqpack_cli.stats.rank_balance`; the cells and the note are shared with the HTML report
(`seqpack_cli.stats.render.html`), so both read the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from seqpack_cli.stats.rank_balance import BALANCE_NAMES, PlanBalance, RankBalanceOptions
from seqpack_cli.stats.render.terminal import cap_text

__all__ = [
    "RANK_BALANCE_HEADERS",
    "RANK_BALANCE_TITLE",
    "format_ratio",
    "rank_balance_cells",
    "rank_balance_keys",
    "rank_balance_note",
    "rank_balance_rows",
    "render_rank_balance",
]

RANK_BALANCE_TITLE = "Rank balance (per step: the costliest rank over the mean rank)"
RANK_BALANCE_HEADERS = ("ranks", "rows/rank", "steps", "balance", "mean", "worst", "worst step")
"""The columns after the packing's key (max_seq_len, cap) where a report shows several."""


def format_ratio(ratio: float | None) -> str:
    """`1.0724...` -> `1.072`; `-` for a plan with no step."""
    return "-" if ratio is None else f"{ratio:.3f}"


def rank_balance_keys(plans: Sequence[PlanBalance]) -> tuple[bool, bool]:
    """Whether the table needs a max_seq_len column and a cap column: only where the plans come
    from several packings that differ in them (a sweep)."""
    max_seq_lens = {plan.max_seq_len for plan in plans}
    caps = {plan.max_seqs_per_bin for plan in plans}
    several = len({(plan.max_seq_len, plan.max_seqs_per_bin) for plan in plans}) > 1
    return several and len(max_seq_lens) > 1, several and len(caps) > 1


def rank_balance_cells(plan: PlanBalance, *, first: bool) -> list[str]:
    """One plan's cells after its key; the step shape only on the `first` row of its pair."""
    return [
        f"{plan.world_size:,}" if first else "",
        f"{plan.rows_per_rank:,}" if first else "",
        f"{plan.num_steps:,}",
        BALANCE_NAMES[plan.balance],
        format_ratio(plan.mean_max_over_mean),
        format_ratio(plan.worst_max_over_mean),
        "-" if plan.worst_step is None else f"{plan.worst_step:,}",
    ]


def _key_cells(plan: PlanBalance, keys: tuple[bool, bool], *, first: bool) -> list[str]:
    with_length, with_cap = keys
    cells = [f"{plan.max_seq_len:,}"] if with_length else []
    cells += [cap_text(plan.max_seqs_per_bin)] if with_cap else []
    return cells if first else [""] * len(cells)


def rank_balance_rows(plans: Sequence[PlanBalance]) -> list[tuple[list[str], bool]]:
    """Every row's cells, and whether it opens a new (packing, world size, rows) pair."""
    keys = rank_balance_keys(plans)
    rows = []
    previous = None
    for plan in plans:
        pair = (plan.max_seq_len, plan.max_seqs_per_bin, plan.world_size, plan.rows_per_rank)
        first = pair != previous
        previous = pair
        rows.append(
            (_key_cells(plan, keys, first=first) + rank_balance_cells(plan, first=first), first)
        )
    return rows


def rank_balance_note(options: RankBalanceOptions) -> str:
    """What the table's figures are, with the options they were computed at."""
    return (
        "Per step, every rank waits for the most expensive; mean: the mean over the epoch's "
        "steps of that rank's cost over the mean rank's (1.000: no rank waits; 1.100: the step "
        "lasts 10% longer than a balanced one), worst: the largest, at worst step. A rank's "
        "cost: the sum over its bins' sequences of c*l + l**2, c = "
        f"{options.cost_per_token:,g} (--cost-per-token; seqpack_cli.hf.cost_per_token("
        "model.config) derives it). The plans of epoch 0 of a run with seed "
        f"{options.seed}: balance none is DistributedSampler's order (balance=None), cost "
        "deals each step's bins so the ranks' costs are equal (balance='cost', windows of "
        f"{options.balance_window:,} steps)."
    )


def render_rank_balance(plans: Sequence[PlanBalance], options: RankBalanceOptions) -> Group:
    """The rank balance table and its note, for the terminal (fits 80 columns)."""
    with_length, with_cap = rank_balance_keys(plans)
    table = Table(title=RANK_BALANCE_TITLE, title_justify="left", box=None, pad_edge=False)
    if with_length:
        table.add_column("max_seq_len", justify="right", style="bold", overflow="fold")
    if with_cap:
        table.add_column("cap", justify="right", style="bold", overflow="fold")
    for header in RANK_BALANCE_HEADERS:
        table.add_column(
            header, justify="left" if header == "balance" else "right", overflow="fold"
        )
    for number, (cells, first) in enumerate(rank_balance_rows(plans)):
        if first and number:
            table.add_row()  # a blank line between pairs
        table.add_row(*cells)
    return Group(table, Text(), Text(rank_balance_note(options), style="dim"))

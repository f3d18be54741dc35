"""Reports on packings: the data `seqpack stats` prints, and how it is rendered.

- `describe`: `StatsRequest` -> `describe()` -> `StatsReport`, whose `to_dict()` is `--json`;
- `distribution`: the length histogram checked, summarised (`LengthSummary`) and bucketed, and
  what a cap costs (`CapCost`: tokens dropped or truncated, attention against padded rows);
- `baselines`: packing without seqpack (no packing; sequential next-fit on a seeded sample);
- `profile`: one packing (a prepared directory) described (`PackingProfile`);
- `sweep`: seqpack and both baselines at each candidate `max_seq_len` and per-bin cap
  (`SweepResult`);
- `left_out`: what prepare dropped or truncated, from a prepared directory's manifest;
- `multiple_cost`: the padding a length multiple costs (slots rounded up to a multiple m);
- `rank_balance`: how unequal the data-parallel ranks' costs would be in each step of a run's
  plan, without and with balancing by cost (`PlanBalance`; `seqpack stats --world-size`);
- `render` (subpackage): a `StatsReport` drawn, in the terminal (rich) or as the
  self-contained `--html` page.

`PackingStats` is defined in `seqpack_cli.packing.efficiency` (the prepare job needs it, and it
sits below the job) and is re-exported here under the reference's path, lazily: importing
`seqpack_cli.stats.describe` (which the CLI does for `--help`) must not cost numpy.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PackingStats"]


def __getattr__(name: str) -> Any:
    if name == "PackingStats":
        from seqpack_cli.packing.efficiency import PackingStats

        return PackingStats
    raise AttributeError(f"module 'seqpack_cli.stats' has no attribute {name!r}")

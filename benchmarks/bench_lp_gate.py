"""When the default packer runs the LP: its time and bins against the greedy engine's.

`pack_length_histogram_batched` (prepare's default) runs the greedy engine, then the LP only
where greedy is more than 0.01% and 2 bins above the cheap bound (or on a histogram of at most
64 lengths), with a work budget in proportion to that gap (all of it from 0.1% on). Per bench
distribution (`distributions.py`, at its default max_seq_len, and the published packedBERT
histograms) and cap, at the bench size (1e6 sequences; the published counts) and x100, this
prints greedy's bins and time, the default's, the bound the default returns with its templates
(the LP's where it ran, else the cheap one), the gaps, and, where the gate cut the LP's budget
or skipped it, the time and bins of the LP at its full budget (as before issue 21) for
comparison. The target: the default within 2x greedy's time wherever greedy is within 0.01% of
the bound, and within 0.1% of the bound everywhere.

    python benchmarks/bench_lp_gate.py                      # every set, caps none and 8 (minutes)
    python benchmarks/bench_lp_gate.py --sets power_law --caps none --scales 100
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))  # distributions, bench_packing

import distributions
from bench_packing import print_table

from seqpack_cli.packing import histogram
from seqpack_cli.packing.histogram import (
    lower_bound_bins,
    pack_length_histogram_batched,
    pack_length_histogram_greedy,
)

PACKEDBERT = Path(__file__).resolve().parent / "data" / "packedbert_histograms.json"
PUBLISHED = {"wikipedia": "wikipedia_512", "squad": "squad_384"}
SETS = (*PUBLISHED, *distributions.DISTRIBUTIONS)
BENCH_SIZE = 1_000_000


def load(name: str, scale: int) -> tuple[int, dict[int, int]]:
    """(max_seq_len, histogram) of a set, its counts times `scale` (x100: 1e8 sequences, the
    shape of issue 21's power law, where greedy ends a few bins above the bound)."""
    if name in PUBLISHED:
        entry = json.loads(PACKEDBERT.read_text())["histograms"][PUBLISHED[name]]
        counts = {i + 1: c * scale for i, c in enumerate(entry["counts"]) if c}
        return int(entry["max_seq_len"]), counts
    max_seq_len = distributions.DEFAULT_MAX_SEQ_LEN[name]
    counts = distributions.make_histogram(name, BENCH_SIZE, max_seq_len)
    return max_seq_len, {length: count * scale for length, count in counts.items()}


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    """The result and the time of `call`: the fastest of 3 runs where one takes under 0.5 s (a
    few milliseconds on a shared machine are noise)."""
    start = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - start
    if seconds < 0.5:
        for _ in range(2):
            start = time.perf_counter()
            call()
            seconds = min(seconds, time.perf_counter() - start)
    return result, seconds


def full_budget(greedy_bins: int, bound: int, num_lengths: int) -> float:
    """The gate before issue 21: the LP at its full budget wherever greedy misses the bound."""
    return 1.0 if greedy_bins > bound else 0.0


def row(name: str, scale: int, cap: int | None) -> list[Any]:
    max_seq_len, counts = load(name, scale)
    greedy, greedy_s = timed(
        lambda: pack_length_histogram_greedy(counts, max_seq_len, max_seqs_per_bin=cap)
    )
    packed, default_s = timed(
        lambda: pack_length_histogram_batched(counts, max_seq_len, max_seqs_per_bin=cap)
    )
    greedy_bins, bins = sum(greedy.values()), sum(packed.values())
    cheap = lower_bound_bins(counts, max_seq_len, max_seqs_per_bin=cap)
    bound = packed.bound.bound.value if packed.bound is not None else cheap
    share = histogram._lp_budget_share(greedy_bins, cheap, len(counts))
    before = "same"
    if share < 1.0 and greedy_bins > cheap:  # the gate changed something: the LP as before
        with mock.patch.object(histogram, "_lp_budget_share", full_budget):
            old, old_s = timed(
                lambda: pack_length_histogram_batched(counts, max_seq_len, max_seqs_per_bin=cap)
            )
        old_bound = old.bound.bound.value if old.bound is not None else cheap
        before = f"{sum(old.values()):,} in {old_s:.2f} s (bound {old_bound:,})"
    greedy_gap = greedy_bins / bound - 1.0
    return [
        name,
        f"{max_seq_len:,}",
        "none" if cap is None else str(cap),
        f"{sum(counts.values()):.0e}",
        f"{len(counts):,}",
        f"{greedy_bins:,}",
        f"{greedy_s:.3f}",
        f"{bins:,}",
        f"{default_s:.3f}",
        f"{default_s / greedy_s:.1f}x",
        f"{bound:,}" + (" LP" if packed.bound and packed.bound.bound.is_lp else ""),
        f"{greedy_gap:+.4%}",
        f"{bins / bound - 1.0:+.4%}",
        f"{share:.2f}",
        before,
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated set names")
    parser.add_argument("--caps", default="none,8", help="comma-separated caps, 'none' for none")
    parser.add_argument(
        "--scales", default="1,100", help="comma-separated multiples of the bench size"
    )
    args = parser.parse_args()
    import scipy.optimize  # noqa: F401  (imported once here: the LP's times are the packing's)

    rows = []
    for name in args.sets.split(","):
        for scale in (int(s) for s in args.scales.split(",")):
            for cap in args.caps.split(","):
                rows.append(row(name, scale, None if cap == "none" else int(cap)))
                print(" | ".join(map(str, rows[-1])), file=sys.stderr, flush=True)
    print_table(
        "default packer (pack_length_histogram_batched) against the greedy engine",
        [
            "set",
            "max_seq_len",
            "cap",
            "sequences",
            "lengths",
            "greedy bins",
            "greedy s",
            "default bins",
            "default s",
            "time vs greedy",
            "bound",
            "greedy over bound",
            "default over bound",
            "LP budget",
            "LP at full budget (before)",
        ],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

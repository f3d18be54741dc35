"""Repack benchmark (issue 24): `Prepared.repack` at 1e9 sequences, and the epoch's ids/s over a
plan packed with a length multiple (slot pools made of exact-length `ConcatPool` parts) against a
plain plan.

1. repack at `--repack-sequences` (default 1e9) sequences of each realistic distribution: a
   `Prepared` whose counts sum to that many is built without 1e9 ids: every pool is a
   zero-stride int64 array (`np.lib.stride_tricks.as_strided` of one zero: the right length, no
   memory), which repack never reads. Timed: the whole `repack(length_multiple=m)` (and one with
   a smaller max_seq_len under truncate), and the packer alone on the same slot histogram
   (`pack_slots`), so repack's own cost is the difference (target: <= 1 s plus the packer).
2. epoch ids/s at `--epoch-sequences` (default 1e7): in-RAM pools (one id per sequence), the
   plain plan (exact lengths) and the plan of `repack(length_multiple=m)` over the same pools,
   timed side by side, alternately, `--repeats` times each, the fastest kept (CPU seconds:
   the machine may be shared), through `plan.bin_arrays` slices and through `iter(plan)`
   (lists). Target: the multiple's ids/s >= 0.8x the plain plan's.

    python benchmarks/bench_repack.py            # 1e9 repack, 1e7 epoch
    python benchmarks/bench_repack.py --quick    # 1e8 repack, 1e6 epoch
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # distributions

import distributions
import numpy as np
from tables import print_table

from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.prepared.format import Prepared
from seqpack_cli.prepared.multiples import pack_slots

ARRAY_SLICE_BINS = 1 << 16


def _zero_stride(count: int) -> np.ndarray:
    """`count` ids that take no memory (all 0): a pool repack never reads."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.int64), shape=(count,), strides=(0,))


def _prepared(counts: dict[int, int], max_seq_len: int, pools: dict[int, Any]) -> Prepared:
    """A `Prepared` as load_prepared gives it, over `pools` (no directory behind it)."""
    templates = pack_slots(counts, max_seq_len, max_seqs_per_bin=None)
    manifest = {
        "config": {"max_seq_len": max_seq_len, "packer": "batched", "over_cap": "error"},
        "summary": {"num_truncated": 0},
    }
    return Prepared(Path("/nonexistent"), manifest, counts, Counter(templates), pools)


def _seconds(work: Any) -> tuple[Any, float]:
    started = time.process_time()
    result = work()
    return result, time.process_time() - started


def repack_at_scale(num_sequences: int, multiple: int) -> None:
    rows = []
    for name in distributions.REALISTIC:
        max_seq_len = distributions.DEFAULT_MAX_SEQ_LEN[name]
        counts = distributions.make_histogram(name, num_sequences, max_seq_len, seed=0)
        prepared = _prepared(counts, max_seq_len, {n: _zero_stride(c) for n, c in counts.items()})
        for options in (
            {"length_multiple": multiple},
            {"max_seq_len": max_seq_len // 2, "length_multiple": multiple, "over_cap": "truncate"},
        ):
            repacked, total = _seconds(lambda p=prepared, o=options: p.repack(**o))
            _, packer = _seconds(
                lambda repacked=repacked: pack_slots(
                    repacked.counts,
                    repacked.max_seq_len,
                    max_seqs_per_bin=None,
                    length_multiple=multiple,
                )
            )
            rows.append(
                [
                    name,
                    f"{sum(counts.values()):.3g}",
                    len(counts),
                    repacked.max_seq_len,
                    multiple,
                    f"{repacked.summary['num_bins']:,}",
                    f"{repacked.summary['efficiency']:.4f}",
                    f"{total:.3f}",
                    f"{packer:.3f}",
                    f"{total - packer:.3f}",
                ]
            )
    print_table(
        f"repack at {num_sequences:.3g} sequences (CPU s; zero-stride pools, never read)",
        [
            "dist",
            "N",
            "lengths",
            "max_seq_len",
            "m",
            "bins",
            "efficiency",
            "repack s",
            "packer s",
            "repack - packer s",
        ],
        rows,
    )


def _consume_arrays(plan: EpochPlan) -> int:
    num_ids = 0
    for first in range(0, len(plan), ARRAY_SLICE_BINS):
        ids, _ = plan.bin_arrays(first, first + ARRAY_SLICE_BINS)
        num_ids += len(ids)
    return num_ids


def _consume_lists(plan: EpochPlan) -> int:
    return sum(len(ids) for ids in plan)


def epoch_rates(num_sequences: int, multiple: int, repeats: int) -> None:
    rows = []
    for name in distributions.REALISTIC:
        max_seq_len = distributions.DEFAULT_MAX_SEQ_LEN[name]
        counts = distributions.make_histogram(name, num_sequences, max_seq_len, seed=0)
        pools, offset = {}, 0
        for length in sorted(counts):
            pools[length] = np.arange(offset, offset + counts[length], dtype=np.int64)
            offset += counts[length]
        plain = _prepared(counts, max_seq_len, pools)
        repacked = plain.repack(length_multiple=multiple)
        plans = {
            "plain": EpochPlan(plain.templates, plain.pools, 1),
            f"m={multiple}": EpochPlan(repacked.templates, repacked.pools, 1),
        }
        concat = sum(1 for slot in repacked.pools if len(repacked.pools.exact_lengths(slot)) > 1)
        for how, consume in (("bin_arrays", _consume_arrays), ("lists", _consume_lists)):
            best = dict.fromkeys(plans, float("inf"))
            ids = {}
            for _ in range(repeats):  # alternately, so both see the same machine load
                for key, plan in plans.items():
                    ids[key], seconds = _seconds(lambda p=plan, c=consume: c(p))
                    best[key] = min(best[key], seconds)
            assert ids["plain"] == ids[f"m={multiple}"] == offset
            rates = {key: offset / best[key] / 1e6 for key in plans}
            rows.append(
                [
                    name,
                    f"{offset:.3g}",
                    len(counts),
                    f"{len(repacked.pools)} ({concat} concat)",
                    how,
                    f"{rates['plain']:.2f}",
                    f"{rates[f'm={multiple}']:.2f}",
                    f"{rates[f'm={multiple}'] / rates['plain']:.2f}x",
                ]
            )
    print_table(
        f"epoch ids/s (millions, fastest of {repeats}, CPU time): plain plan vs length_multiple "
        f"{multiple} (target >= 0.8x)",
        ["dist", "ids", "lengths", "slot pools", "via", "plain", f"m={multiple}", "ratio"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1e8 repack, 1e6 epoch")
    parser.add_argument("--repack-sequences", type=float, default=None)
    parser.add_argument("--epoch-sequences", type=float, default=None)
    parser.add_argument("--multiple", type=int, default=8, help="length multiple (default 8)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    repack_n = int(args.repack_sequences or (1e8 if args.quick else 1e9))
    epoch_n = int(args.epoch_sequences or (1e6 if args.quick else 1e7))
    repack_at_scale(repack_n, args.multiple)
    epoch_rates(epoch_n, args.multiple, args.repeats)


if __name__ == "__main__":
    main()

"""Packing at the optimum: seqpack against Graphcore's histogram packers and the per-item peers.

Per data set and cap on the sequences per bin (none, 2, 3, 4, 8, 16): the packedBERT Wikipedia
(max_seq_len 512) and SQuAD 1.1 (384) histograms as Graphcore published them
(`data/packedbert_histograms.json`), and the realistic distributions of `distributions.py` (1e6
sequences). Packers: seqpack's greedy engine (`pack_length_histogram_greedy`) and its default
(`pack_length_histogram_batched`, LP-based where greedy misses the bound), Graphcore's SPFHP,
LPFHP and NNLSHP (rewritten in `reference_packers.py`) and the per-item peers. Every packing is
verified (it holds the histogram exactly, no bin over max_seq_len or the cap) before it is
counted; bins are compared with the LP bound (`seqpack_cli.packing.lp.lp_lower_bound`). NNLSHP
runs where its dense strategy matrix stays small (depth 2 up to max_seq_len 4096, depth 3 at 512
and 384); the per-item peers, which have no cap option, uncapped and up to 2e6 sequences
(binpacking up to 1e5). A call over `--timeout` is stopped. The LP imports `scipy.optimize` on
its first call in a process; that import is timed once, in a fresh interpreter, and printed
apart: the parent imports it before the timed children fork, so their times are the packing's.

    python benchmarks/bench_optimum.py                             # every set and cap (minutes)
    python benchmarks/bench_optimum.py --quick          # SQuAD, Wikipedia; caps none, 2, 8
    python benchmarks/bench_optimum.py --sets squad,chat --caps none,3
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # distributions, reference_packers

import binpacking
import distributions
import lightbinpack
import reference_packers
from bench_packing import measure, print_table

from seqpack_cli.packing.histogram import (
    lower_bound_bins,
    pack_length_histogram_batched,
    pack_length_histogram_greedy,
)
from seqpack_cli.packing.lp import lp_lower_bound

PACKEDBERT = Path(__file__).resolve().parent / "data" / "packedbert_histograms.json"
PUBLISHED = {"wikipedia": "wikipedia_512", "squad": "squad_384"}  # set name -> key in the file
SETS = (*PUBLISHED, *distributions.REALISTIC)
CAPS: tuple[int | None, ...] = (None, 2, 3, 4, 8, 16)
PER_ITEM_MAX = 2_000_000  # the per-item peers need N-item Python lists (16M on Wikipedia)
# `binpacking` is O(N x bins): 9 s at 2e4 sequences here, 3 min at 9e4 (SQuAD)
BINPACKING_MAX = {"quick": 20_000, "full": 100_000}
NNLS_MAX_ENTRIES = 20_000_000  # NNLSHP's dense matrix: max_seq_len x strategies (2 min at 3.4e7)


@dataclass
class DataSet:
    name: str
    about: str
    max_seq_len: int
    histogram: dict[int, int]


def load_set(name: str, num_sequences: int) -> DataSet:
    """A published packedBERT histogram, or `num_sequences` draws of a realistic distribution."""
    if name in PUBLISHED:
        entry = json.loads(PACKEDBERT.read_text())["histograms"][PUBLISHED[name]]
        histogram = {i + 1: count for i, count in enumerate(entry["counts"]) if count}
        if sum(histogram.values()) != entry["num_sequences"]:
            raise ValueError(f"{PACKEDBERT}: {name} does not add up to {entry['num_sequences']}")
        return DataSet(name, "packedBERT's published histogram", entry["max_seq_len"], histogram)
    max_seq_len = distributions.DEFAULT_MAX_SEQ_LEN[name]
    histogram = distributions.make_histogram(name, num_sequences)
    return DataSet(name, "synthetic (distributions.py)", max_seq_len, histogram)


def verified_bins(templates: Mapping[tuple[int, ...], int], data: DataSet, cap: int | None) -> int:
    """The number of bins of `templates`, after checking it packs `data` within the limits."""
    held: Counter[int] = Counter()
    for template, count in templates.items():
        shown = f"{template[:6]}{'...' if len(template) > 6 else ''} x {count}"
        too_many = cap is not None and len(template) > cap
        if count <= 0 or not template or min(template) < 1 or too_many:
            raise AssertionError(f"bin {shown} is not a bin of 1..{cap or 'any'} lengths")
        if sum(template) > data.max_seq_len:
            raise AssertionError(f"bin {shown} holds more than {data.max_seq_len} tokens")
        for length in template:
            held[length] += count
    wrong = sorted(
        k for k in held.keys() | data.histogram.keys() if held[k] != data.histogram.get(k, 0)
    )
    if wrong:
        raise AssertionError(f"the bins do not hold the histogram (lengths {wrong[:5]} differ)")
    return sum(templates.values())


def verified_item_bins(bins: list[list[int]], lengths: list[int], data: DataSet) -> int:
    """`verified_bins` for a per-item packing (indices into `lengths`): each index once."""
    placed = np.fromiter(itertools.chain.from_iterable(bins), dtype=np.int64)
    if not np.array_equal(np.sort(placed), np.arange(len(lengths))):
        raise AssertionError("the bins do not hold every sequence exactly once")
    return verified_bins(reference_packers.templates_of(bins, lengths), data, None)


def verified_value_bins(bins: list[list[int]], data: DataSet) -> int:
    """`verified_bins` for bins of lengths (what `binpacking` returns for a list of numbers)."""
    return verified_bins(Counter(tuple(sorted(b, reverse=True)) for b in bins), data, None)


def _histogram_packers(
    data: DataSet, cap: int | None, notes: list[str]
) -> list[tuple[str, Callable[[], Any], int]]:
    """(label, call, repeats) of each histogram packer that runs on `data` at `cap`."""
    h, m = data.histogram, data.max_seq_len
    seqpack = [
        ("seqpack greedy", pack_length_histogram_greedy),
        ("seqpack batched", pack_length_histogram_batched),
    ]
    batched = pack_length_histogram_batched
    # `batched` runs once: its LP solution is cached per histogram in-process, so a repeat would
    # time the cache (each measurement is a fresh fork of a parent that never solved the LP)
    packers = [
        (label, partial(f, h, m, max_seqs_per_bin=cap), 1 if f is batched else 3)
        for label, f in seqpack
    ]
    packers += [
        ("SPFHP", partial(reference_packers.spfhp, h, m, cap), 3),
        ("LPFHP", partial(reference_packers.lpfhp, h, m, cap), 3),
    ]
    if cap is None or cap < 2:
        notes.append(f"NNLSHP at cap {cap or 'none'}: not run (it needs a depth of at least 2)")
        return packers
    entries = reference_packers.nnlshp_num_strategies(m, cap) * m
    if entries <= NNLS_MAX_ENTRIES:
        packers.append((f"NNLSHP (depth {cap})", partial(reference_packers.nnlshp, h, m, cap), 1))
    else:  # it enumerates every exact fill of at most `cap` lengths
        notes.append(f"NNLSHP at cap {cap}: not run (its NNLS matrix: {entries:.1e} entries)")
    return packers


def _per_item_packers(
    data: DataSet, binpacking_max: int, notes: list[str]
) -> list[tuple[str, Callable[[], Any], Callable[[Any], int]]]:
    """(label, call, verify) of the per-item peers that run on `data` (uncapped: no cap option)."""
    notes.append("lightbinpack, binpacking: no cap on sequences per bin, so uncapped only")
    n = sum(data.histogram.values())
    if n > PER_ITEM_MAX:
        notes.append(f"per-item peers: not run on {n:,} sequences (over {PER_ITEM_MAX:,})")
        return []
    lengths = distributions.expand(data.histogram).tolist()
    peers: list[tuple[str, Callable[[], Any], Callable[[Any], int]]] = [
        (
            "lightbinpack.obfd",
            partial(lightbinpack.obfd, lengths, data.max_seq_len),
            partial(verified_item_bins, lengths=lengths, data=data),
        )
    ]
    if n <= binpacking_max:
        peers.append(
            (
                "binpacking",
                partial(binpacking.to_constant_volume, lengths, data.max_seq_len),
                partial(verified_value_bins, data=data),
            )
        )
    else:
        notes.append(f"binpacking: not run on {n:,} sequences (over {binpacking_max:,})")
    return peers


def _seconds(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _versus_row(
    cap: str, label: str, outcome: tuple[int, float] | str, bound: int, data: DataSet
) -> list[str]:
    if isinstance(outcome, str):  # the packing was refused, or it took too long
        return [cap, label, outcome, "", "", "", ""]
    bins, seconds = outcome
    tokens = sum(length * count for length, count in data.histogram.items())
    return [
        cap,
        label,
        f"{bins:,}",
        f"{bins - bound:+,}",
        f"{bins / bound:.5f}",
        f"{100 * tokens / (bins * data.max_seq_len):.3f}%",
        _seconds(seconds),
    ]


def _run(
    label: str,
    call: Callable[[], Any],
    verify: Callable[[Any], int],
    repeats: int,
    timeout: float,
    notes: list[str],
) -> tuple[int, float] | str:
    """(bins, best seconds) of `call`; "INVALID" or "TIMEOUT" (and why, in `notes`) if not."""
    try:
        bins, seconds, _ = measure(call, verify, repeats, timeout)
    except AssertionError as error:
        notes.append(f"{label}: INVALID packing: {error}")
        return "INVALID"
    except TimeoutError as error:
        notes.append(f"{label}: {error}")
        return "TIMEOUT"
    return bins, seconds


def versus_table(
    data: DataSet, caps: list[int | None], binpacking_max: int, timeout: float
) -> None:
    """Table 4 for one data set: every packer at every cap, against the LP bound."""
    rows, notes = [], []
    m = data.max_seq_len
    bound_name = "LP"
    for cap in caps:
        cap_cell = "none" if cap is None else str(cap)
        lb = measure(partial(lower_bound_bins, data.histogram, m, max_seqs_per_bin=cap), int)
        rows.append(_versus_row(cap_cell, "lower bound (LB)", (lb[0], lb[1]), lb[0], data))
        bound = lb[0]
        call = partial(lp_lower_bound, data.histogram, m, max_seqs_per_bin=cap)
        lp = _run(f"LP bound, cap {cap_cell}", call, int, 1, timeout, notes)
        bound = lp[0] if isinstance(lp, tuple) else bound
        rows.append(_versus_row(cap_cell, "LP bound", lp, bound, data))
        if not isinstance(lp, tuple):
            notes.append(f"cap {cap_cell}: no LP bound (stopped), so its rows compare with LB")
        verify = partial(verified_bins, data=data, cap=cap)
        for label, call, repeats in _histogram_packers(data, cap, notes):
            outcome = _run(f"{label}, cap {cap_cell}", call, verify, repeats, timeout, notes)
            rows.append(_versus_row(cap_cell, label, outcome, bound, data))
        if cap is None:
            for label, call, check in _per_item_packers(data, binpacking_max, notes):
                outcome = _run(f"{label}, cap {cap_cell}", call, check, 1, timeout, notes)
                rows.append(_versus_row(cap_cell, label, outcome, bound, data))
    n = sum(data.histogram.values())
    print_table(
        f"{data.name}: {data.about}, max_seq_len {m}, {n:,} sequences, "
        f"{len(data.histogram):,} lengths",
        ["cap", "packer", "bins", f"vs {bound_name}", f"bins/{bound_name}", "eff", "time"],
        rows,
        left=2,
    )
    for note in dict.fromkeys(notes):
        print(f"   {note}")


def scipy_import_seconds() -> float:
    """Seconds a fresh interpreter takes to import `scipy.optimize` (numpy already loaded), the
    one-time cost of the first LP in a process; then imported here, so that the forked children
    time the packing alone."""
    script = (
        "import time, numpy; began = time.perf_counter(); import scipy.optimize; "
        "print(time.perf_counter() - began)"
    )
    taken = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    import scipy.optimize  # noqa: F401  (the children inherit it)

    return float(taken.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="SQuAD and Wikipedia, caps none,2,8")
    parser.add_argument(
        "--sets",
        help=f"data sets, comma-separated, from {','.join(SETS)} or any distribution "
        "(default: all of those; --quick: squad,wikipedia)",
    )
    parser.add_argument(
        "--caps",
        help="caps on sequences per bin, comma-separated, 'none' for no cap "
        "(default: none,2,3,4,8,16; --quick: none,2,8)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600,
        help="seconds one packer or bound may take before it is stopped (default 600)",
    )
    parser.add_argument(
        "--num-sequences",
        type=float,
        help="sequences drawn from each synthetic distribution (default 1e6; --quick 1e5)",
    )
    args = parser.parse_args()
    sets = (args.sets or ("squad,wikipedia" if args.quick else ",".join(SETS))).split(",")
    unknown = sorted(set(sets) - set(PUBLISHED) - set(distributions.DISTRIBUTIONS))
    if unknown:
        parser.error(f"unknown sets {unknown}; choose from {sorted(SETS)} or a distribution")
    try:
        caps = [
            None if cap == "none" else int(cap)
            for cap in (args.caps or ("none,2,8" if args.quick else "none,2,3,4,8,16")).split(",")
        ]
    except ValueError:
        parser.error(f"--caps {args.caps!r}: expected numbers or 'none', e.g. none,2,3")
    if any(cap is not None and cap < 1 for cap in caps):
        parser.error(f"--caps {args.caps!r}: every cap is at least 1")
    num_sequences = int(args.num_sequences or (1e5 if args.quick else 1e6))
    began = time.perf_counter()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
        f"lightbinpack {lightbinpack.__version__}, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"importing scipy.optimize (once per process, on the first LP; not in the times "
        f"below): {scipy_import_seconds():.2f} s"
    )
    for name in sets:
        data = load_set(name, num_sequences)
        versus_table(data, caps, BINPACKING_MAX["quick" if args.quick else "full"], args.timeout)
    print(f"\ntotal benchmark time: {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Packing benchmark: seqpack's packers against the peers and the plain per-item algorithms.

Prints, in one run:
1. per-sequence packers on every distribution at N = 1e4 ... 1e7: seqpack greedy/heap
   (tolerance 1), lightbinpack (C++: ffd, bfd, obfd), the `binpacking` package (N = 1e4 only,
   it is O(N x bins)), and the plain per-item FFD/BFD/MFFD of `reference_packers.py` (FFD and
   BFD up to 1e6, MFFD up to 1e5: they are pure Python);
2. the histogram packer (`pack_length_histogram_batched`) at N up to 1e9, with the exact
   grouped BFD/FFD/MFFD on the same histogram (equal to the per-item versions, see
   tests/test_histogram.py): seqpack's bins must be <= each of them;
3. the 1e9-sequence, max_seq_len 8192 histogram pack time on every distribution;
4. against Graphcore's histogram packers (SPFHP, LPFHP, NNLSHP, rewritten in
   `reference_packers.py`) and the per-item peers, per data set and cap on the sequences per bin
   (none, 2, 3, 4, 8, 16): the packedBERT Wikipedia (max_seq_len 512) and SQuAD 1.1 (384)
   histograms as Graphcore published them (`data/packedbert_histograms.json`), and the realistic
   distributions (1e6 sequences). Every packing is verified (it holds the histogram exactly, no
   bin over max_seq_len or the cap) before it is counted; bins are compared with the LP bound
   (`seqpack_cli.packing.lp`; LB where that is missing). NNLSHP runs where its dense strategy
   matrix stays small (depth 2 up to max_seq_len 4096, depth 3 at 512 and 384); the per-item
   peers, which have no cap option, uncapped and up to 2e6 sequences (binpacking up to 1e5).
   `--quick`: SQuAD and Wikipedia at caps none, 2, 8. A call over `--timeout` is stopped.

Columns: bins, LB (lower bound: the largest of ceil(tokens / max_seq_len), Martello-Toth L2 and
the "at most k lengths > M/(k+1) per bin" bound), bins/LB, efficiency (tokens / capacity),
time (best of the repeats, seconds) and peak memory (extra RSS of a forked child, MiB).

    python benchmarks/bench_packing.py                   # full run (tens of minutes)
    python benchmarks/bench_packing.py --quick           # small sizes (seconds)
    python benchmarks/bench_packing.py --histogram-only  # tables 2 and 3 only (under a minute)
    python benchmarks/bench_packing.py --vs-graphcore --sets squad,chat --caps none,3
                                                         # table 4 only, some data sets and caps
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import pickle
import resource
import select
import signal
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

from seqpack_cli.packing import greedy_pack_sequences, heap_pack_sequences
from seqpack_cli.packing import histogram as engine
from seqpack_cli.packing.histogram import (
    lower_bound_bins,
    pack_length_histogram_batched,
    pack_length_histogram_bfd,
    pack_length_histogram_ffd,
    pack_length_histogram_mffd,
)

try:  # the LP bound and the greedy engine under its own name (issue 14), where they exist
    from seqpack_cli.packing.lp import lp_lower_bound
except ImportError:
    lp_lower_bound = None
greedy_engine = getattr(engine, "pack_length_histogram_greedy", None)


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def measure(
    call: Callable[[], Any],
    count: Callable[[Any], int],
    repeats: int = 1,
    timeout: float | None = None,
) -> tuple[int, float, float]:
    """(bins, best seconds, peak extra MiB) of `call`, run in a forked child (isolated memory).

    TimeoutError when the child has not answered within `timeout` seconds (it is killed)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_end)
        try:
            gc.collect()
            start_rss = _rss_mib()
            best = float("inf")
            bins = 0
            spent = 0.0
            for _ in range(repeats):
                if spent > 2.0:  # slow calls: the best of fewer repeats
                    break
                began = time.perf_counter()
                result = call()
                best = min(best, time.perf_counter() - began)
                spent += time.perf_counter() - began
                bins = count(result)
                del result
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - start_rss
            payload = pickle.dumps((bins, best, max(peak, 0.0)))
        except BaseException as error:  # report, never hang the parent
            payload = pickle.dumps(error)
        os.write(write_end, payload)
        os._exit(0)
    os.close(write_end)
    data = b""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if not select.select([read_end], [], [], wait)[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_end)
            raise TimeoutError(f"stopped after {timeout:g} s")
        chunk = os.read(read_end, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    outcome = pickle.loads(data)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _num_bins(templates: Any) -> int:
    return sum(templates.values())


def _row(cells: list[str], widths: list[int], left: int = 1) -> str:
    return "  ".join(
        cell.ljust(width) if i < left else cell.rjust(width)
        for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
    )


def _print_table(title: str, header: list[str], rows: list[list[str]], left: int = 1) -> None:
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) for i in range(len(header))]
    print(f"\n== {title}")
    print(_row(header, widths, left))
    print(_row(["-" * width for width in widths], widths, left))
    for row in rows:
        print(_row(row, widths, left))
    sys.stdout.flush()


def _num(n: int) -> str:
    exponent = len(str(n)) - 1
    return f"1e{exponent}" if n == 10**exponent else f"{n:,}"


def _quality(bins: int, bound: int, tokens: int, max_seq_len: int) -> list[str]:
    return [
        f"{bins:,}",
        f"{bound:,}",
        f"{bins / bound:.5f}" if bound else "-",
        f"{100 * tokens / (bins * max_seq_len):.3f}%" if bins else "-",
    ]


def per_sequence_tables(sizes: list[int], names: list[str]) -> dict[str, list[list[str]]]:
    """Table 1, one per distribution; returns the rows keyed by distribution."""
    out: dict[str, list[list[str]]] = {}
    for name in names:
        max_seq_len = distributions.DEFAULT_MAX_SEQ_LEN[name]
        rows = []
        for n in sizes:
            histogram = distributions.make_histogram(name, n)
            lengths = distributions.expand(histogram)
            as_list = lengths.tolist()
            bound = lower_bound_bins(histogram, max_seq_len)
            tokens = sum(length * count for length, count in histogram.items())
            packers: list[tuple[str, Callable[[], Any]]] = [
                ("seqpack greedy (tol=1)", partial(greedy_pack_sequences, lengths, max_seq_len)),
                ("seqpack heap (tol=1)", partial(heap_pack_sequences, lengths, max_seq_len)),
                (
                    "seqpack greedy seed=1",
                    partial(greedy_pack_sequences, lengths, max_seq_len, seed=1),
                ),
                ("lightbinpack.obfd", partial(lightbinpack.obfd, as_list, max_seq_len)),
            ]
            if n <= 10**6:
                packers += [
                    ("lightbinpack.ffd", partial(lightbinpack.ffd, as_list, max_seq_len)),
                    ("lightbinpack.bfd", partial(lightbinpack.bfd, as_list, max_seq_len)),
                    ("per-item FFD (python)", partial(reference_packers.ffd, as_list, max_seq_len)),
                    ("per-item BFD (python)", partial(reference_packers.bfd, as_list, max_seq_len)),
                ]
            if n <= 10**5:
                packers.append(
                    (
                        "per-item MFFD (python)",
                        partial(reference_packers.mffd, as_list, max_seq_len),
                    )
                )
            if n <= 10**4:
                packers.append(
                    (
                        "binpacking (WFD)",
                        partial(binpacking.to_constant_volume, as_list, max_seq_len),
                    )
                )
            for label, call in packers:
                bins, seconds, peak = measure(call, len)
                rows.append(
                    [
                        _num(n),
                        label,
                        *_quality(bins, bound, tokens, max_seq_len),
                        f"{seconds:.3f}",
                        f"{peak:.0f}",
                    ]
                )
        header = ["N", "packer", "bins", "LB", "bins/LB", "eff", "time s", "peak MiB"]
        _print_table(f"per-sequence packers: {name} (max_seq_len {max_seq_len})", header, rows)
        out[name] = rows
    return out


def _pack_histogram(
    histogram: dict[int, int], max_seq_len: int, repeats: int
) -> tuple[int, list[str]]:
    """Time the engine on `histogram` (best of `repeats`): its bins, and the table cells
    lengths, bins, LB, bins/LB, eff, time ms, peak MiB."""
    bound = lower_bound_bins(histogram, max_seq_len)
    tokens = sum(length * count for length, count in histogram.items())
    bins, seconds, peak = measure(
        partial(pack_length_histogram_batched, histogram, max_seq_len), _num_bins, repeats
    )
    cells = [
        f"{len(histogram):,}",
        *_quality(bins, bound, tokens, max_seq_len),
        f"{seconds * 1e3:.1f}",
        f"{peak:.0f}",
    ]
    return bins, cells


def histogram_tables(sizes: list[int], names: list[str], repeats: int) -> None:
    """Tables 2: the histogram engine, and its bins against the exact grouped BFD/FFD/MFFD."""
    rows, versus = [], []
    for name in names:
        max_seq_len = distributions.DEFAULT_MAX_SEQ_LEN[name]
        for n in sizes:
            histogram = distributions.make_histogram(name, n)
            bins, cells = _pack_histogram(histogram, max_seq_len, repeats)
            rows.append([name, str(max_seq_len), _num(n), *cells])
            classic = {
                label: sum(packer(histogram, max_seq_len).values())
                for label, packer in (
                    ("BFD", pack_length_histogram_bfd),
                    ("FFD", pack_length_histogram_ffd),
                    ("MFFD", pack_length_histogram_mffd),
                )
            }
            ok = all(bins <= other for other in classic.values())
            versus.append(
                [
                    name,
                    _num(n),
                    f"{bins:,}",
                    *(f"{classic[k]:,}" for k in ("BFD", "FFD", "MFFD")),
                    f"{bins - min(classic.values()):+,}",
                    "yes" if ok else "NO",
                ]
            )
    _print_table(
        "histogram packer: pack_length_histogram_batched",
        [
            "distribution",
            "M",
            "N",
            "lengths",
            "bins",
            "LB",
            "bins/LB",
            "eff",
            "time ms",
            "peak MiB",
        ],
        rows,
    )
    _print_table(
        "seqpack bins vs exact grouped BFD / FFD / MFFD on the same histogram (must be <=)",
        ["distribution", "N", "seqpack", "BFD", "FFD", "MFFD", "vs best", "<= all"],
        versus,
    )


def billion_table(names: list[str], num_sequences: int, repeats: int) -> None:
    """Table 3: the N = 1e9, max_seq_len 8192 histogram pack on every distribution."""
    rows = []
    max_seq_len = 8192
    for name in names:
        histogram = distributions.make_histogram(name, num_sequences, max_seq_len)
        _, cells = _pack_histogram(histogram, max_seq_len, repeats)
        rows.append([name, _num(num_sequences), *cells])
    _print_table(
        f"histogram pack time at N = {_num(num_sequences)}, max_seq_len {max_seq_len} "
        f"(best of {repeats})",
        ["distribution", "N", "lengths", "bins", "LB", "bins/LB", "eff", "time ms", "peak MiB"],
        rows,
    )


# ---- table 4: against Graphcore's histogram packers and the per-item peers --------------------

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
    seqpack = [("seqpack batched", pack_length_histogram_batched)]
    if greedy_engine is not None:
        seqpack.insert(0, ("seqpack greedy", greedy_engine))
    else:
        seqpack = [("seqpack (greedy)", pack_length_histogram_batched)]
    # `batched` runs once: its LP solution is cached per histogram in-process, so a repeat would
    # time the cache (each measurement is a fresh fork of a parent that never solved the LP)
    packers = [
        (label, partial(f, h, m, max_seqs_per_bin=cap), 3 if f is greedy_engine else 1)
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
    bound_name = "LP" if lp_lower_bound is not None else "LB"
    for cap in caps:
        cap_cell = "none" if cap is None else str(cap)
        lb = measure(partial(lower_bound_bins, data.histogram, m, max_seqs_per_bin=cap), int)
        rows.append(_versus_row(cap_cell, "lower bound (LB)", (lb[0], lb[1]), lb[0], data))
        bound = lb[0]
        if lp_lower_bound is not None:
            call = partial(lp_lower_bound, data.histogram, m, max_seqs_per_bin=cap)
            lp = _run(f"LP bound, cap {cap_cell}", call, int, 1, timeout, notes)
            bound = lp[0] if isinstance(lp, tuple) else bound
            rows.append(_versus_row(cap_cell, "LP bound", lp, bound, data))
            if not isinstance(lp, tuple):
                notes.append(f"cap {cap_cell}: no LP bound, so its rows compare with LB")
        verify = partial(verified_bins, data=data, cap=cap)
        for label, call, repeats in _histogram_packers(data, cap, notes):
            outcome = _run(f"{label}, cap {cap_cell}", call, verify, repeats, timeout, notes)
            rows.append(_versus_row(cap_cell, label, outcome, bound, data))
        if cap is None:
            for label, call, check in _per_item_packers(data, binpacking_max, notes):
                outcome = _run(f"{label}, cap {cap_cell}", call, check, 1, timeout, notes)
                rows.append(_versus_row(cap_cell, label, outcome, bound, data))
    n = sum(data.histogram.values())
    _print_table(
        f"{data.name}: {data.about}, max_seq_len {m}, {n:,} sequences, "
        f"{len(data.histogram):,} lengths",
        ["cap", "packer", "bins", f"vs {bound_name}", f"bins/{bound_name}", "eff", "time"],
        rows,
        left=2,
    )
    if lp_lower_bound is None:
        notes.append("seqpack_cli.packing.lp is not there yet: bins compared with LB, not LP")
    for note in dict.fromkeys(notes):
        print(f"   {note}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (seconds)")
    parser.add_argument(
        "--histogram-only",
        action="store_true",
        help="only the histogram packer tables (2 and 3), not the per-sequence packers",
    )
    parser.add_argument(
        "--distributions",
        default=",".join(distributions.DISTRIBUTIONS),
        help="comma-separated names from benchmarks/distributions.py (default: all)",
    )
    parser.add_argument(
        "--vs-graphcore",
        action="store_true",
        help="only table 4: against Graphcore's histogram packers and the per-item peers",
    )
    parser.add_argument(
        "--sets",
        help=f"table 4's data sets, comma-separated, from {','.join(SETS)} or any distribution "
        "(default: all of those; --quick: squad,wikipedia)",
    )
    parser.add_argument(
        "--caps",
        help="table 4's caps on sequences per bin, comma-separated, 'none' for no cap "
        "(default: none,2,3,4,8,16; --quick: none,2,8)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600,
        help="table 4: seconds one packer or bound may take before it is stopped (default 600)",
    )
    parser.add_argument(
        "--num-sequences",
        type=float,
        help="table 4: sequences drawn from each synthetic distribution (default 1e6; --quick 1e5)",
    )
    args = parser.parse_args()
    names = args.distributions.split(",")
    unknown = sorted(set(names) - set(distributions.DISTRIBUTIONS))
    if unknown:
        parser.error(
            f"unknown distributions {unknown}; choose from {sorted(distributions.DISTRIBUTIONS)}"
        )
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
    quick = args.quick
    if not args.vs_graphcore:
        if not args.histogram_only:
            per_sequence_tables([10**4, 10**5] if quick else [10**4, 10**5, 10**6, 10**7], names)
        histogram_tables([10**4, 10**6] if quick else [10**4, 10**6, 10**8, 10**9], names, 3)
        billion_table(names, 10**7 if quick else 10**9, repeats=3 if quick else 5)
    if args.vs_graphcore or not args.histogram_only:
        for name in sets:
            data = load_set(name, num_sequences)
            versus_table(data, caps, BINPACKING_MAX["quick" if quick else "full"], args.timeout)
    print(f"\ntotal benchmark time: {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

Columns: bins, LB (lower bound: the largest of ceil(tokens / max_seq_len), Martello-Toth L2 and
the "at most k lengths > M/(k+1) per bin" bound), bins/LB, efficiency (tokens / capacity),
time (best of the repeats, seconds) and peak memory (extra RSS of a forked child, MiB).

    python benchmarks/bench_packing.py                   # full run (tens of minutes)
    python benchmarks/bench_packing.py --quick           # small sizes (seconds)
    python benchmarks/bench_packing.py --histogram-only  # tables 2 and 3 only (under a minute)
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import resource
import select
import signal
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # distributions, reference_packers

import binpacking
import distributions
import lightbinpack
import reference_packers

from seqpack_cli.packing import greedy_pack_sequences, heap_pack_sequences
from seqpack_cli.packing.histogram import (
    lower_bound_bins,
    pack_length_histogram_batched,
    pack_length_histogram_bfd,
    pack_length_histogram_ffd,
    pack_length_histogram_mffd,
)


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


def print_table(title: str, header: list[str], rows: list[list[str]], left: int = 1) -> None:
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
        print_table(f"per-sequence packers: {name} (max_seq_len {max_seq_len})", header, rows)
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
    print_table(
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
    print_table(
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
    print_table(
        f"histogram pack time at N = {_num(num_sequences)}, max_seq_len {max_seq_len} "
        f"(best of {repeats})",
        ["distribution", "N", "lengths", "bins", "LB", "bins/LB", "eff", "time ms", "peak MiB"],
        rows,
    )


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
    args = parser.parse_args()
    names = args.distributions.split(",")
    unknown = sorted(set(names) - set(distributions.DISTRIBUTIONS))
    if unknown:
        parser.error(
            f"unknown distributions {unknown}; choose from {sorted(distributions.DISTRIBUTIONS)}"
        )
    began = time.perf_counter()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
        f"lightbinpack {lightbinpack.__version__}, load average {os.getloadavg()[0]:.1f}"
    )
    quick = args.quick
    if not args.histogram_only:
        per_sequence_tables([10**4, 10**5] if quick else [10**4, 10**5, 10**6, 10**7], names)
    histogram_tables([10**4, 10**6] if quick else [10**4, 10**6, 10**8, 10**9], names, 3)
    billion_table(names, 10**7 if quick else 10**9, repeats=3 if quick else 5)
    print(f"\ntotal benchmark time: {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Epoch benchmark: EpochPlan throughput, random access, and memory at 1e8 sequences.

Prints, in one run:
1. ids per second of iterating a seeded (and an unseeded) EpochPlan on one core, including
   building the Python lists, for the realistic length distributions of `distributions.py`
   packed with `pack_length_histogram_batched`; with N, distinct lengths, distinct templates
   and ids per bin;
2. on the first distribution, the reference's naive epoch (one `rng.permutation` per pool,
   seed-shuffled template types, a cursor per length) in the same run: its literal per-slot
   loop, and a vectorised variant (one block per template type), with their peak allocations;
   plus `plan[k]` random access and `iter(start)` resume latency;
3. the memory test: pools for 1e8 sequences written to disk as .npy files (open_memmap, in a
   temporary directory under /tmp, ~800 MB) and memory-mapped read-only; a fresh child process
   iterates the whole epoch (timed), then two slices under tracemalloc (peak traced allocations,
   numpy arrays included, must not grow with the slice), reports ru_maxrss, the peak anonymous
   RSS (sampled from /proc/self/status; ru_maxrss also counts the file pages of the memory-mapped
   pools that were read) and checks that every id came exactly once.

Sections 1 and 3 also time `plan.bin_arrays` (flat int64 ids and CSR offsets, no Python object
per id) over the whole epoch, in slices of 65,536 bins.

With `--baseline PATH` (the plan module of an older version: its `epoch/plan.py`, or the
`epoch.py` of a version from before the `seqpack_cli.epoch` package), that version's EpochPlan is
timed side by side: in section 1 in the same process, in section 3 in a fresh child process of
its own. PATH's directory goes on sys.path; a plan that imports its own package needs that
package under another name, outside the repository, on PYTHONPATH (the child inherits it):

    mkdir /tmp/old && git archive HEAD seqpack_cli | tar -x -C /tmp/old
    mv /tmp/old/seqpack_cli /tmp/old/base
    grep -rl seqpack_cli /tmp/old/base | xargs sed -i 's/seqpack_cli/base/g'
    PYTHONPATH=/tmp/old python benchmarks/bench_epoch.py --baseline /tmp/old/base/epoch/plan.py

Times are CPU seconds of the process (time.process_time: the machine may be shared) and wall
seconds; numpy runs these operations on one core.

    python benchmarks/bench_epoch.py            # full run (1e7 per distribution, 1e8 memory test)
    python benchmarks/bench_epoch.py --quick    # small sizes (seconds)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # distributions

import distributions
import numpy as np
from tables import print_table

from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.packing.histogram import pack_length_histogram_batched
from seqpack_cli.seeding import seed_from_components

SEED = seed_from_components(0)
ARRAY_SLICE_BINS = 1 << 16


def load_epoch_module(path: str | None) -> Any:
    """The plan module at `path` (an older version's, to compare with), or
    seqpack_cli.epoch.plan."""
    if not path:
        import seqpack_cli.epoch.plan

        return seqpack_cli.epoch.plan
    source = Path(path).resolve()
    sys.path.insert(0, str(source.parent))
    spec = importlib.util.spec_from_file_location("baseline_epoch", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- helpers


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _problem(name: str, num_sequences: int) -> tuple[Counter, dict[int, int]]:
    """The distribution's histogram at its usual max_seq_len, packed."""
    max_seq_len = distributions.DEFAULT_MAX_SEQ_LEN[name]
    counts = distributions.make_histogram(name, num_sequences, max_seq_len, seed=0)
    return pack_length_histogram_batched(counts, max_seq_len), counts


def _memory_pools(counts: dict[int, int]) -> dict[int, np.ndarray]:
    """In-RAM pools: length L holds a contiguous range of ids (the ids' values do not matter)."""
    pools, offset = {}, 0
    for length in sorted(counts):
        pools[length] = np.arange(offset, offset + counts[length], dtype=np.int64)
        offset += counts[length]
    return pools


def _consume(bins: Iterator[list[int]]) -> tuple[int, float, float]:
    """Iterate, counting ids; return (ids, cpu seconds, wall seconds)."""
    cpu, wall = time.process_time(), time.perf_counter()
    num_ids = 0
    for ids in bins:
        num_ids += len(ids)
    return num_ids, time.process_time() - cpu, time.perf_counter() - wall


def _rate(num_ids: int, seconds: float) -> str:
    return f"{num_ids / seconds / 1e6:.2f}" if seconds > 0 else "inf"


def _consume_arrays(plan: EpochPlan) -> tuple[int, float]:
    """The whole epoch through `bin_arrays`; return (ids, cpu seconds)."""
    cpu = time.process_time()
    num_ids = 0
    for first in range(0, len(plan), ARRAY_SLICE_BINS):
        ids, offsets = plan.bin_arrays(first, first + ARRAY_SLICE_BINS)
        num_ids += len(ids)
        assert len(offsets) == min(ARRAY_SLICE_BINS, len(plan) - first) + 1
    return num_ids, time.process_time() - cpu


# ---------------------------------------------------------------- the reference's naive epoch


def naive_epoch(templates: Counter, pools: dict, seed: int) -> Iterator[list[int]]:
    """The reference's materialize_epoch as documented: permute every pool (a full copy), visit
    template types in a seed-shuffled order, pull one id per slot from a cursor per length."""
    rng = np.random.default_rng(seed)
    shuffled = {length: rng.permutation(pool) for length, pool in pools.items()}
    cursor = dict.fromkeys(pools, 0)
    types = list(templates)
    for index in rng.permutation(len(types)).tolist():
        template = types[index]
        for _ in range(templates[template]):
            ids = []
            for length in template:
                ids.append(int(shuffled[length][cursor[length]]))
                cursor[length] += 1
            yield ids


def naive_epoch_vectorised(templates: Counter, pools: dict, seed: int) -> Iterator[list[int]]:
    """The same permuted pools and cursors, but each template type's bins cut as one block:
    the fastest the naive design gets (its bins still come in runs of one template)."""
    rng = np.random.default_rng(seed)
    shuffled = {length: rng.permutation(pool) for length, pool in pools.items()}
    cursor = dict.fromkeys(pools, 0)
    types = list(templates)
    for index in rng.permutation(len(types)).tolist():
        template = types[index]
        multiplicity = templates[template]
        columns = []
        for length, slots in Counter(template).items():
            start = cursor[length]
            cursor[length] += multiplicity * slots
            block = shuffled[length][start : cursor[length]].reshape(multiplicity, slots)
            columns.append(block)
        yield from np.hstack(columns).tolist()


# ---------------------------------------------------------------- sections 1 and 2


def throughput(names: list[str], num_sequences: int, baseline: Any) -> None:
    rows = []
    for name in names:
        templates, counts = _problem(name, num_sequences)
        pools = _memory_pools(counts)
        seeded = EpochPlan(templates, pools, SEED)
        num_ids, cpu, wall = _consume(iter(seeded))
        assert num_ids == seeded.num_sequences
        _, cpu_plain, _ = _consume(iter(EpochPlan(templates, pools)))
        _, cpu_arrays = _consume_arrays(EpochPlan(templates, pools, SEED))
        row = [
            name,
            distributions.DEFAULT_MAX_SEQ_LEN[name],
            f"{num_ids:,}",
            len(counts),
            len(templates),
            f"{num_ids / len(seeded):.2f}",
            f"{cpu:.2f}",
            f"{wall:.2f}",
            _rate(num_ids, cpu),
            _rate(num_ids, cpu_plain),
            _rate(num_ids, cpu_arrays),
        ]
        if baseline is not None:
            old_plan = baseline.EpochPlan(templates, pools, SEED)
            _, cpu_old, _ = _consume(iter(old_plan))
            row += [_rate(num_ids, cpu_old), f"{cpu_old / cpu:.2f}x"]
        rows.append(row)
    header = [
        "distribution",
        "max_seq_len",
        "N",
        "lengths",
        "templates",
        "ids/bin",
        "cpu s",
        "wall s",
        "M ids/s seeded",
        "M ids/s no seed",
        "M ids/s arrays",
    ]
    if baseline is not None:
        header += ["M ids/s baseline", "speed-up"]
    print_table(
        "EpochPlan iteration, one core (bins as lists of Python ints; cpu time)", header, rows
    )


def against_naive(name: str, num_sequences: int) -> None:
    templates, counts = _problem(name, num_sequences)
    pools = _memory_pools(counts)
    rows = []
    for label, make in (
        ("EpochPlan (seeded)", lambda: iter(EpochPlan(templates, pools, SEED))),
        ("reference naive, per-slot loop", lambda: naive_epoch(templates, pools, SEED)),
        ("reference naive, vectorised", lambda: naive_epoch_vectorised(templates, pools, SEED)),
    ):
        tracemalloc.start()
        bins = make()
        first = next(bins)  # the naive designs permute every pool before the first bin
        peak_setup = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        num_ids, cpu, _ = _consume(bins)
        num_ids += len(first)
        # the timed pass runs without tracemalloc; setup is timed separately
        cpu0 = time.process_time()
        next(make())
        setup = time.process_time() - cpu0
        rows.append(
            [
                label,
                f"{setup:.2f}",
                f"{cpu + setup:.2f}",
                _rate(num_ids, cpu + setup),
                f"{peak_setup / 2**20:.1f}",
            ]
        )
    print_table(
        f"one epoch of {name}, N = {num_sequences:,}: EpochPlan against the reference's design",
        ["method", "setup cpu s", "total cpu s", "M ids/s", "peak alloc to 1st bin MiB"],
        rows,
    )

    plan = EpochPlan(templates, pools, SEED)
    rng = np.random.default_rng(1)
    ks = rng.integers(0, len(plan), size=2000).tolist()
    cpu0 = time.process_time()
    for k in ks:
        plan[k]
    random_access = (time.process_time() - cpu0) / len(ks)
    cpu0 = time.process_time()
    next(plan.iter(len(plan) // 2))
    resume = time.process_time() - cpu0
    cpu0 = time.process_time()
    plan.bins(1000, 1256)
    batch = time.process_time() - cpu0
    print_table(
        "random access (same plan)",
        ["operation", "cpu"],
        [
            ["plan[k], random k (mean of 2000)", f"{random_access * 1e6:.1f} us"],
            ["first bin of plan.iter(len // 2)", f"{resume * 1e3:.2f} ms"],
            ["plan.bins(1000, 1256)", f"{batch * 1e3:.2f} ms"],
        ],
    )


# ---------------------------------------------------------------- section 3: memory


def write_pools(counts: dict[int, int], directory: Path) -> int:
    """pools/{length}.npy holding contiguous id ranges, written in chunks; returns bytes."""
    offset, chunk = 0, 1 << 22
    for length in sorted(counts):
        pool = np.lib.format.open_memmap(
            directory / f"{length}.npy", mode="w+", dtype=np.int64, shape=(counts[length],)
        )
        for first in range(0, counts[length], chunk):
            last = min(first + chunk, counts[length])
            pool[first:last] = np.arange(offset + first, offset + last, dtype=np.int64)
        pool.flush()
        del pool
        offset += counts[length]
    return sum(path.stat().st_size for path in directory.iterdir())


def memory_child(
    directory: Path, templates_path: Path, slice_bins: int, module_path: str
) -> dict[str, Any]:
    """Run in a fresh process: iterate the epoch over memory-mapped pools and measure. With a
    `module_path` (a baseline plan module), only the whole epoch is timed."""
    rss_start = _status_kib("VmRSS")
    module = load_epoch_module(module_path)
    pairs = json.loads(templates_path.read_text())
    templates = Counter({tuple(template): count for template, count in pairs})
    pools = {int(path.stem): np.load(path, mmap_mode="r") for path in directory.glob("*.npy")}
    cpu0 = time.process_time()
    plan = module.EpochPlan(templates, pools, SEED)
    build = time.process_time() - cpu0

    # 1. the whole epoch, timed, sampling the anonymous RSS every ~100k bins
    anon_peak = _status_kib("RssAnon")
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cpu0, wall0 = time.process_time(), time.perf_counter()
    num_ids = 0
    for number, ids in enumerate(plan):
        num_ids += len(ids)
        if number % 100_000 == 0:
            anon_peak = max(anon_peak, _status_kib("RssAnon"))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    result = {
        "num_sequences": plan.num_sequences,
        "epoch_ids": num_ids,
        "epoch_cpu_s": cpu,
        "epoch_wall_s": wall,
        "epoch_minor_faults": faults,
    }
    if module_path:
        return result

    # 2. the whole epoch again as arrays
    array_ids, array_cpu = _consume_arrays(plan)
    assert array_ids == num_ids

    # 3. tracemalloc peaks of a slice and of a slice 4x longer: flat if nothing grows
    peaks = []
    for length in (slice_bins, 4 * slice_bins):
        tracemalloc.start()
        tracemalloc.reset_peak()
        for _ in _take(plan, length):
            pass
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()

    # 4. every id exactly once (ids are 0..N-1): a bitmap, after the measurements
    seen = np.zeros(plan.num_sequences, dtype=bool)
    count = 0
    for first in range(0, len(plan), ARRAY_SLICE_BINS):
        ids, _ = plan.bin_arrays(first, first + ARRAY_SLICE_BINS)
        seen[ids] = True
        count += len(ids)
    exactly_once = bool(count == plan.num_sequences and seen.all())

    return {
        **result,
        "num_bins": len(plan),
        "num_lengths": len(pools),
        "num_templates": len(templates),
        "build_cpu_s": build,
        "arrays_cpu_s": array_cpu,
        "tracemalloc_peaks": peaks,
        "slice_bins": [slice_bins, 4 * slice_bins],
        "rss_start_kib": rss_start,
        "rss_anon_peak_kib": anon_peak,
        "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "exactly_once": exactly_once,
    }


def _take(plan: EpochPlan, num_bins: int) -> Iterator[list[int]]:
    """num_bins bins from the middle of the epoch (resumed there)."""
    start = min(len(plan) // 3, max(0, len(plan) - num_bins))
    for number, ids in enumerate(plan.iter(start)):
        if number == num_bins:
            return
        yield ids


def _run_child(directory: Path, templates_path: Path, slice_bins: int, module: str) -> dict:
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            "--memory-child",
            str(directory),
            str(templates_path),
            str(slice_bins),
            module,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(child.stdout)


def memory_test(name: str, num_sequences: int, slice_bins: int, baseline_path: str) -> None:
    templates, counts = _problem(name, num_sequences)
    with tempfile.TemporaryDirectory(prefix="seqpack-bench-epoch-", dir="/tmp") as scratch:
        directory = Path(scratch) / "pools"
        directory.mkdir()
        wall0 = time.perf_counter()
        disk = write_pools(counts, directory)
        write = time.perf_counter() - wall0
        templates_path = Path(scratch) / "templates.json"
        templates_path.write_text(json.dumps([[list(t), c] for t, c in templates.items()]))
        result = _run_child(directory, templates_path, slice_bins, "")
        old = (
            _run_child(directory, templates_path, slice_bins, baseline_path)
            if baseline_path
            else None
        )
    n = result["num_sequences"]
    peaks = result["tracemalloc_peaks"]

    def epoch_row(label: str, run: dict[str, Any]) -> list[str]:
        rate = _rate(run["epoch_ids"], run["epoch_cpu_s"])
        return [
            label,
            f"{run['epoch_cpu_s']:.1f} s / {run['epoch_wall_s']:.1f} s = {rate} M ids/s (cpu), "
            f"{run['epoch_minor_faults']:,} minor page faults",
        ]

    print_table(
        f"memory test: {name}, {n:,} sequences, pools memory-mapped from disk",
        ["measure", "value"],
        [
            [
                "pools on disk",
                f"{disk / 2**20:,.0f} MiB ({len(counts)} files, written in {write:.1f} s)",
            ],
            ["an int64 array of N ids would be", f"{n * 8 / 2**20:,.0f} MiB"],
            [
                "distinct lengths / templates",
                f"{result['num_lengths']} / {result['num_templates']}",
            ],
            ["bins", f"{result['num_bins']:,}"],
            ["EpochPlan build (cpu)", f"{result['build_cpu_s'] * 1e3:.0f} ms"],
            epoch_row("whole epoch as lists, cpu / wall", result),
            *([epoch_row("  baseline (fresh process), cpu / wall", old)] if old else []),
            [
                "whole epoch as arrays (bin_arrays), cpu",
                f"{result['arrays_cpu_s']:.1f} s = "
                f"{_rate(result['epoch_ids'], result['arrays_cpu_s'])} M ids/s",
            ],
            *[
                [f"tracemalloc peak, {bins:,} bins", f"{peak / 2**20:.1f} MiB"]
                for bins, peak in zip(result["slice_bins"], peaks, strict=True)
            ],
            ["RSS before loading", f"{result['rss_start_kib'] / 1024:.0f} MiB"],
            ["peak anonymous RSS (sampled)", f"{result['rss_anon_peak_kib'] / 1024:.0f} MiB"],
            [
                "ru_maxrss (incl. mapped pool pages read)",
                f"{result['ru_maxrss_kib'] / 1024:.0f} MiB",
            ],
            ["every id exactly once", str(result["exactly_once"])],
        ],
    )


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--full", action="store_true", help="full sizes (the default)")
    parser.add_argument("--num-sequences", type=int, help="N per distribution (sections 1, 2)")
    parser.add_argument("--memory-sequences", type=int, help="N of the memory test (section 3)")
    parser.add_argument(
        "--baseline",
        help="an older version's epoch/plan.py to time side by side (outside the repository)",
    )
    parser.add_argument("--memory-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        directory, templates_path, slice_bins, module = args.memory_child
        result = memory_child(Path(directory), Path(templates_path), int(slice_bins), module)
        print(json.dumps(result))
        return 0
    baseline = load_epoch_module(args.baseline) if args.baseline else None
    num_sequences = args.num_sequences or (1_000_000 if args.quick else 10_000_000)
    memory_sequences = args.memory_sequences or (2_000_000 if args.quick else 100_000_000)
    slice_bins = 20_000 if args.quick else 200_000
    began = time.perf_counter()
    print(f"numpy {np.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    throughput(list(distributions.REALISTIC), num_sequences, baseline)
    against_naive(distributions.REALISTIC[0], num_sequences)
    memory_test(distributions.REALISTIC[0], memory_sequences, slice_bins, args.baseline or "")
    print(f"\ntotal benchmark time: {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`seqpack prepare --engine dask --workers 2` against `--engine local`, the Dask engine's costs
per task, and its time for 1e10 rows projected from them.

The dataset is bench_prepare's (lengths 1..8192, a dense shuffled `doc_id`, a sparse `sparse_id`),
written once into a cache folder, here in 64 files. Then:

1. End to end, as users run it: `seqpack prepare ... --json` with `--engine local`, then with
   `--engine dask --workers 2` (the local cluster's start included), interleaved, best of
   --repeat; the job's seconds (`--json`), the CPU seconds of the process tree (wait4: the
   workers included; on a shared machine the wall time follows the others' load, the CPU time
   much less), and the peak RSS (VmHWM, sampled from /proc) of the driver and of each worker
   process. Outputs are compared byte for byte (counts, templates, pools). Targets: dask within
   1.5x local, each worker < 1 GiB.
2. Costs per task: the Dask engine in this process on a `LocalCluster` of 2 workers, its task
   stream recorded: per phase, the tasks, their summed compute seconds (per row: the cost that
   grows with the data), the phase's wall time; Dask's own overhead per task (no-op tasks
   submitted and gathered) and seqpack's fixed cost per task (a histogram task on a one-row
   file: a DuckDB connection and a query); the driver's own work, at the size of 1e10 rows.
3. The projection for 1e10 rows on 8, 32 and 128 workers of 2 cores (2 tasks at a time each),
   with the assumptions printed: each phase takes whole waves of tasks (the measured compute per
   row times the rows of a task, plus the overhead per task) or the shared filesystem's time for
   its bytes, whichever is longer (`dask_projection`).

    python benchmarks/bench_dask.py                       # 1e8 rows, dense ids and row indexes
    python benchmarks/bench_dask.py --rows 1e7 --repeat 2
    python benchmarks/bench_dask.py --quick               # 1e6 rows in 16 files, a smoke test
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from bench_prepare import MAX_SEQ_LEN, generate
from dask_projection import print_projection

from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.prepare.engines.dask.client import local_cluster

TARGET_RATIO = 1.5
TARGET_WORKER_MIB = 1024
ID_COLUMNS = {"dense": "doc_id", "sparse": "sparse_id", "rows": None}
SEQPACK = str(Path(sys.executable).parent / "seqpack")


# ---- 1. end to end ---------------------------------------------------------------------------


def _peak_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _sample_peaks(root: int, peaks: dict[int, tuple[str, float]], stop: threading.Event) -> None:
    """Every 50 ms, the peak RSS of `root` and its descendants (kept after they exit)."""
    import psutil

    try:
        root_command = psutil.Process(root).cmdline()
    except psutil.Error:
        return
    while not stop.is_set():
        try:
            processes = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
        except psutil.Error:
            return
        for process in processes:
            peak = _peak_mib(process.pid)
            if peak is None:
                continue
            try:
                command = process.cmdline()
            except psutil.Error:
                continue
            # A spawned worker runs multiprocessing's spawn_main; a forked one, the driver's
            # command line.
            spawned = "spawn_main" in " ".join(command)
            kind = "worker" if spawned or command == root_command else "other"
            kind = "driver" if process.pid == root else kind
            peaks[process.pid] = (kind, max(peak, peaks.get(process.pid, ("", 0.0))[1]))
        stop.wait(0.05)


def run_cli(folder: Path, output: Path, id_column: str | None, extra: list[str]) -> dict:
    command = [
        SEQPACK,
        "prepare",
        str(folder),
        "--length-column",
        "num_tokens",
        "--max-seq-len",
        str(MAX_SEQ_LEN),
        "--output",
        str(output),
        "--json",
        *extra,
    ]
    if id_column:
        command += ["--id-column", id_column]
    shutil.rmtree(output, ignore_errors=True)
    os.sync()
    peaks: dict[int, tuple[str, float]] = {}
    stop = threading.Event()
    started = time.perf_counter()
    # stderr to a file and stdout read to its end, then wait4: its rusage counts the CPU time
    # of the process and of the children it reaped (the Dask workers).
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log)
        sampler = threading.Thread(
            target=_sample_peaks, args=(process.pid, peaks, stop), daemon=True
        )
        sampler.start()
        assert process.stdout is not None
        out = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        stop.set()
        sampler.join()
        if os.waitstatus_to_exitcode(status):
            log.seek(0)
            raise SystemExit(f"{' '.join(command)} failed:\n{log.read().decode()}")
    return {
        "job": json.loads(out)["seconds"],
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "driver": max((mib for kind, mib in peaks.values() if kind == "driver"), default=0.0),
        "workers": sorted(mib for kind, mib in peaks.values() if kind == "worker"),
    }


def _same_bytes(a: Path, b: Path) -> bool:
    def files(root: Path) -> dict[str, bytes]:
        return {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*")
            if p.is_file() and p.name != "manifest.json"
        }

    return files(a) == files(b)


# ---- 2. costs per task -----------------------------------------------------------------------


def task_costs(folder: Path, id_column: str | None, workers: int, out: Path) -> dict[str, Any]:
    """The Dask engine in this process, its task stream recorded; Dask's and seqpack's fixed
    costs per task."""
    import distributed

    with local_cluster(workers) as cluster, distributed.Client(cluster) as client:
        config = PrepareConfig(
            inputs=[folder],
            length_column="num_tokens",
            id_column=id_column,
            max_seq_len=MAX_SEQ_LEN,
            output=out,
            engine="dask",
            scheduler=cluster.scheduler_address,
            threads=1,
        )
        shutil.rmtree(out, ignore_errors=True)
        started = time.time()
        with distributed.get_task_stream(client) as stream:
            prepared = prepare_dataset(config)
        wall = time.time() - started
        phases: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, math.inf, 0.0])
        for record in stream.data:
            phase = str(record["key"]).split("-")[2].replace("_", " ")
            for step in record["startstops"]:
                if step["action"] == "compute":
                    entry = phases[phase]
                    entry[0] += 1
                    entry[1] += step["stop"] - step["start"]
                    entry[2] = min(entry[2], step["start"])
                    entry[3] = max(entry[3], step["stop"])
        return {
            "wall": wall,
            "rows": prepared.manifest["inputs"]["num_rows"],
            "phases": {
                name: (int(n), busy, stop - start)
                for name, (n, busy, start, stop) in phases.items()
            },
            "dask_overhead": _dask_overhead(client),
            "fixed": _fixed_task_cost(client, out.parent),
        }


def _noop(x: int) -> int:
    return x


def _dask_overhead(client: Any, count: int = 2000) -> float:
    """Seconds per no-op task, submitted and gathered in bulk (the scheduler's throughput)."""
    client.gather(client.map(_noop, range(50), pure=False))
    started = time.perf_counter()
    client.gather(client.map(_noop, range(count), pure=False))
    return (time.perf_counter() - started) / count


def _fixed_task_cost(client: Any, scratch: Path) -> float:
    """Median seconds of a histogram task on a one-row file: what every task pays whatever its
    size (a DuckDB connection, a query's setup, the footers' paths checked)."""
    from seqpack_cli.prepare.engines.dask.groups import plan_groups
    from seqpack_cli.prepare.engines.dask.tasks import TaskSettings, group_histogram
    from seqpack_cli.prepare.footers import inspect_inputs

    path = scratch / "one-row.parquet"
    pq.write_table(pa.table({"num_tokens": pa.array([5], pa.int32())}), path)
    group = plan_groups(inspect_inputs([path], "num_tokens"), 1)[0]

    def timed(_: int) -> float:
        started = time.perf_counter()
        group_histogram(group, "num_tokens", TaskSettings(threads=1))
        return time.perf_counter() - started

    return float(np.median(client.gather(client.map(timed, range(40), pure=False))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e8)
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ids", nargs="+", choices=list(ID_COLUMNS), default=["dense", "rows"])
    parser.add_argument("--repeat", type=int, default=1, help="end-to-end runs of each engine")
    parser.add_argument("--quick", action="store_true", help="1e6 rows in 16 files")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/seqpack_bench"))
    args = parser.parse_args(argv)
    num_rows, num_files = (1_000_000, 16) if args.quick else (int(args.rows), args.files)
    folder = args.cache / f"rows-{num_rows}-files-{num_files}"
    started = time.perf_counter()
    generate(folder, num_rows, num_files)
    print(
        f"{num_rows:,} rows in {num_files} files ready in {time.perf_counter() - started:.1f} s; "
        f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    scratch = Path(tempfile.mkdtemp(prefix="bench-dask-", dir=args.cache))
    dask_args = ["--engine", "dask", "--workers", str(args.workers)]
    results = []
    try:
        for kind in args.ids:
            column = ID_COLUMNS[kind]
            runs: dict[str, list[dict]] = {"local": [], "dask": []}
            for _ in range(args.repeat):
                runs["local"].append(run_cli(folder, scratch / "local", column, []))
                runs["dask"].append(run_cli(folder, scratch / "dask", column, dask_args))
            same = _same_bytes(scratch / "local", scratch / "dask")
            best = {engine: min(done, key=lambda run: run["job"]) for engine, done in runs.items()}
            worker_peak = max(max(run["workers"], default=0.0) for run in runs["dask"])
            results.append((kind, best, worker_peak, same))
            print(
                f"  {kind}: local {[r['job'] for r in runs['local']]} s, dask "
                f"{[r['job'] for r in runs['dask']]} s, identical output: {same}",
                flush=True,
            )
        costs = task_costs(folder, ID_COLUMNS[args.ids[0]], args.workers, scratch / "costs")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _print_end_to_end(results, args.workers)
    _print_costs(costs, args.ids[0])
    print_projection(costs, folder, ID_COLUMNS[args.ids[0]])
    return 0 if all(r[3] for r in results) else 1


def _print_end_to_end(results: list, workers: int) -> None:
    header = (
        f"{'ids':>6} | {'local job':>9} {'dask job':>9} {'ratio':>6} | {'local CPU':>9} "
        f"{'dask CPU':>9} {'ratio':>6} | {'local RSS':>9} {'driver RSS':>10} {'worker RSS':>10} | "
        "same"
    )
    print(f"\nend to end: seqpack prepare, --engine local vs --engine dask --workers {workers}")
    print(header)
    print("-" * len(header))
    for kind, best, worker_peak, same in results:
        local, dask = best["local"], best["dask"]
        print(
            f"{kind:>6} | {local['job']:>8.2f}s {dask['job']:>8.2f}s "
            f"{dask['job'] / local['job']:>5.2f}x | {local['cpu']:>8.1f}s {dask['cpu']:>8.1f}s "
            f"{dask['cpu'] / local['cpu']:>5.2f}x | {local['driver']:>5.0f} MiB "
            f"{dask['driver']:>6.0f} MiB {worker_peak:>6.0f} MiB | "
            f"{'yes' if same else 'NO'}"
        )
    print(
        "job: the --json seconds (best run); CPU: user + system seconds of the whole process "
        "tree (the workers included), which other load on the machine changes little"
    )
    print(
        f"targets: dask job <= {TARGET_RATIO}x local; each worker's peak RSS < "
        f"{TARGET_WORKER_MIB} MiB"
    )


def _print_costs(costs: dict[str, Any], kind: str) -> None:
    rows = costs["rows"]
    print(
        f"\ncosts per task ({kind} ids, in-process driver, {rows:,} rows, wall "
        f"{costs['wall']:.2f} s):"
    )
    header = (
        f"{'phase':>12} | {'tasks':>5} {'compute':>9} {'per task':>9} {'ns/row':>7} {'span':>7}"
    )
    print(header)
    print("-" * len(header))
    for phase, (count, busy, span) in costs["phases"].items():
        print(
            f"{phase:>12} | {count:>5} {busy:>8.2f}s {busy / count:>8.3f}s "
            f"{busy / rows * 1e9:>7.1f} {span:>6.2f}s"
        )
    print(
        f"Dask's overhead per task: {costs['dask_overhead'] * 1e3:.2f} ms (no-op tasks); "
        f"seqpack's fixed cost per task: {costs['fixed'] * 1e3:.1f} ms (a one-row histogram)"
    )


if __name__ == "__main__":
    sys.exit(main())

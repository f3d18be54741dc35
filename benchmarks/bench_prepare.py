"""How fast is `seqpack prepare`, against DuckDB reading the same columns?

For each size: parquet files (~8k distinct lengths, three unique id columns) generated once into a
cache folder, written in row groups so generation stays bounded in memory. The id columns are the
kinds real datasets have, and each takes its own path through the pools pass:

- `doc_id` (dense): a shuffled 0..n-1, the id map's counting sort;
- `sparse_id`: shuffled ids spread over 3x the row count (the id map up to 2**27 / 3 rows, the
  scatter path with an exact duplicate bitmap beyond);
- `hashed_id`: splitmix64 of the row number, spread over all of int64 (e.g. hashed document ids):
  the scatter path with a hashed duplicate bitmap.

The "vs dense" column is each kind's prepare time over the dense one's on the same rows (target:
at most 1.5x). Then, in one run, each side measured the same way:

- in-process: DuckDB's time to read the columns prepare needs (`SELECT sum(len), sum(id)`, on an
  open connection, best of 3) against the prepare job's own time (`seconds` of `--json`: the
  library call, from the inputs to a loaded prepared/ directory);
- as processes: a fresh `python -c "import duckdb; ..."` running that query, against the
  `seqpack prepare` command end to end (interpreter start and imports included), whose peak RSS
  (ru_maxrss from wait4) is reported. With --repeat: the fastest runs and the largest peak;
- the histogram pass alone against DuckDB's scan of the length column.

Dirty pages are flushed (`sync`) before every timed run, so writeback left by the data generation
or by an earlier run does not throttle the next one. Outputs are deleted only at the end (on ext4
without a journal, creating files right after thousands were deleted is quadratic). Two figures
of the machine itself come last, as they can dominate prepare's time on a VM: creating the 8,192
pool files (each run's own, from its log) and 8,192 empty files, and the first touch of 1 GiB of
fresh memory (a VM whose host hands memory back lazily charges each new page a fault).

Targets: prepare within 6x DuckDB's read, sparse or hashed ids within 1.5x dense ids, peak RSS
under 1 GiB at every size.

    python benchmarks/bench_prepare.py                 # 1e7 and 1e8 rows, every id kind
    python benchmarks/bench_prepare.py --rows 5e7 --ids dense sparse   # one size, two kinds
    python benchmarks/bench_prepare.py --quick         # 1e6 rows, a smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from seqpack_cli.prepare.db import connect
from seqpack_cli.prepare.footers import inspect_inputs
from seqpack_cli.prepare.inputs import resolve_inputs
from seqpack_cli.prepare.scan import length_histogram

MAX_SEQ_LEN = 8192
ROW_GROUP = 1 << 20
TARGET_RATIO = 6.0
TARGET_SPARSE_RATIO = 1.5
ID_COLUMNS = {"dense": "doc_id", "sparse": "sparse_id", "hashed": "hashed_id"}
TARGET_RSS_MIB = 1024


def generate(folder: Path, num_rows: int, num_files: int, seed: int = 0) -> list[Path]:
    """Write `num_rows` rows (the three id columns, num_tokens) over `num_files` files, once
    (cached)."""
    marker = folder / ".complete-v2"
    if marker.exists():
        return sorted(folder.glob("*.parquet"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    # Shuffled unique ids without a permutation array in memory: i -> (a*i + b) mod n is a
    # bijection on [0, n) when gcd(a, n) == 1.
    multiplier = _coprime(2_654_435_761, num_rows)
    sparse_multiplier = _coprime(2_654_435_761, 3 * num_rows)
    schema = pa.schema(
        [(name, pa.int64()) for name in ID_COLUMNS.values()] + [("num_tokens", pa.int32())]
    )
    bounds = np.linspace(0, num_rows, num_files + 1).astype(np.int64)
    for number in range(num_files):
        with pq.ParquetWriter(folder / f"part-{number:03d}.parquet", schema) as writer:
            for start in range(int(bounds[number]), int(bounds[number + 1]), ROW_GROUP):
                stop = min(start + ROW_GROUP, int(bounds[number + 1]))
                index = np.arange(start, stop, dtype=np.int64)
                columns = {
                    "doc_id": (index * multiplier + 12_345) % num_rows,
                    "sparse_id": (index * sparse_multiplier + 12_345) % (3 * num_rows),
                    "hashed_id": _splitmix64(index),
                }
                # SFT-like body plus a long tail: every length 1..8192 occurs at these sizes.
                lengths = np.clip(rng.lognormal(6.2, 1.1, stop - start), 1, MAX_SEQ_LEN)
                table = pa.table({**columns, "num_tokens": lengths.astype(np.int32)}, schema)
                writer.write_table(table, row_group_size=ROW_GROUP)
    marker.touch()
    return sorted(folder.glob("*.parquet"))


def _coprime(multiplier: int, modulus: int) -> int:
    # i -> (a*i + b) mod m is a bijection on [0, m) when gcd(a, m) == 1.
    while math.gcd(multiplier, modulus) != 1:
        multiplier += 2
    return multiplier


def _splitmix64(index: np.ndarray) -> np.ndarray:
    """A bijection of uint64 (so unique ids), spread over all of int64."""
    x = index.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (x ^ (x >> np.uint64(31))).view(np.int64)


def best_of(runs: int, function) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def duckdb_read(paths: list[Path], columns: str, threads: int | None) -> float:
    con = duckdb.connect(config={"threads": threads} if threads else {})
    sql = f"SELECT {columns} FROM read_parquet($paths)"
    params = {"paths": [p.as_posix() for p in paths]}
    os.sync()
    seconds = best_of(3, lambda: con.sql(sql, params=params).fetchall())
    con.close()
    return seconds


def duckdb_process(paths: list[Path], id_column: str, threads: int | None) -> float:
    """Wall seconds of a fresh Python process that imports DuckDB and reads both columns."""
    config = {"threads": threads} if threads else {}
    script = (
        "import duckdb, sys; "
        f"duckdb.connect(config={config!r}).sql('SELECT sum(num_tokens), sum({id_column}) "
        "FROM read_parquet($p)', params={'p': sys.argv[1:]}).fetchall()"
    )
    command = [sys.executable, "-c", script, *(p.as_posix() for p in paths)]

    def run() -> None:
        subprocess.run(command, check=True)

    os.sync()
    return best_of(3, run)


def histogram_time(paths: list[Path], threads: int | None) -> tuple[float, int]:
    files = inspect_inputs(paths, "num_tokens")
    con = connect(threads=threads)
    result: dict[int, int] = {}

    def run() -> None:
        result.update(length_histogram(con, files, "num_tokens"))

    seconds = best_of(3, run)
    con.close()
    return seconds, len(result)


def prepare_run(
    folder: Path, output: Path, id_column: str, threads: int | None
) -> tuple[float, float, float, float]:
    """(job seconds, process wall seconds, peak RSS in MiB, seconds to create the pool files) of
    `seqpack prepare` in its own process; the job's seconds are those its `--json` summary
    reports, the pool files' those its log (`LOGLEVEL=INFO`) reports."""
    command = [
        str(Path(sys.executable).parent / "seqpack"), "prepare", str(folder),
        "--length-column", "num_tokens", "--id-column", id_column,
        "--max-seq-len", str(MAX_SEQ_LEN), "--output", str(output), "--json",
    ]  # fmt: skip
    if threads:
        command += ["--threads", str(threads)]
    os.sync()
    started = time.perf_counter()
    environment = {**os.environ, "LOGLEVEL": "INFO"}
    # The log goes to a file: reading two pipes would need communicate(), which reaps the
    # process before wait4 can report its peak RSS.
    with tempfile.TemporaryFile() as log_file:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log_file, env=environment
        )
        assert process.stdout is not None
        summary = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        log_file.seek(0)
        log = log_file.read()
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        sys.stderr.write(log.decode(errors="replace"))
        raise SystemExit(f"prepare failed with exit code {process.returncode}")
    job = float(json.loads(summary)["seconds"])
    created = re.search(rb"created \d+ pool files in ([0-9.]+)s", log)
    creation = float(created.group(1)) if created else math.nan
    return job, seconds, usage.ru_maxrss / 1024, creation  # Linux reports KiB


def file_creation_seconds(folder: Path, count: int) -> float:
    """Seconds to create `count` empty files in a new folder (left for the final clean-up)."""
    folder.mkdir(parents=True)
    started = time.perf_counter()
    for number in range(count):
        os.close(os.open(folder / f"{number}.npy", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    return time.perf_counter() - started


def memory_touch_seconds() -> float:
    """Seconds for a fresh process to write 1 GiB of newly allocated memory (its own interpreter
    start-up excluded), so this process's heap stays as it was."""
    script = (
        "import time, numpy as np; started = time.perf_counter(); "
        "np.ones(1 << 27, dtype=np.int64); print(time.perf_counter() - started)"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    )
    return float(completed.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", type=float, default=[1e7, 1e8])
    parser.add_argument("--quick", action="store_true", help="1e6 rows only")
    parser.add_argument("--files", type=int, default=8, help="parquet files per dataset")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/seqpack_bench"))
    parser.add_argument(
        "--output", type=Path, help="folder for the prepared dirs (default: --cache)"
    )
    parser.add_argument("--threads", type=int, help="DuckDB (and prepare) threads")
    parser.add_argument(
        "--repeat", type=int, default=1, help="prepare runs per size; the fastest is reported"
    )
    parser.add_argument(
        "--ids",
        nargs="+",
        choices=list(ID_COLUMNS),
        default=list(ID_COLUMNS),
        help="id kinds to prepare with (dense first: the others are compared with it)",
    )
    args = parser.parse_args(argv)
    sizes = [1_000_000] if args.quick else [int(rows) for rows in args.rows]
    outputs = args.output or args.cache
    # Outputs are deleted only at the end: ext4 skips inodes deleted in the last 30 s when it
    # creates files, so deleting thousands of pools right before a run slows that run down.
    for stale in outputs.glob("prepared-*"):
        shutil.rmtree(stale)

    load = os.getloadavg()[0]
    print(f"cores: {os.cpu_count()}, load average: {load:.2f}, duckdb {duckdb.__version__}")
    rows_out = []
    for num_rows in sizes:
        folder = args.cache / f"rows-{num_rows}"
        started = time.perf_counter()
        paths = generate(folder, num_rows, args.files)
        print(f"{num_rows:,} rows: data ready in {time.perf_counter() - started:.1f} s", flush=True)
        paths = resolve_inputs([folder])
        read_length = duckdb_read(paths, "sum(num_tokens)", args.threads)
        hist_seconds, distinct = histogram_time(paths, args.threads)
        dense_job = math.nan
        for kind in args.ids:
            column = ID_COLUMNS[kind]
            read_both = duckdb_read(paths, f"sum(num_tokens), sum({column})", args.threads)
            read_process = duckdb_process(paths, column, args.threads)
            runs = [
                prepare_run(folder, outputs / f"prepared-{num_rows}-{kind}-{run}", column,
                            args.threads)
                for run in range(args.repeat)
            ]  # fmt: skip
            job = min(run[0] for run in runs)
            dense_job = job if kind == "dense" else dense_job
            rows_out.append(
                (num_rows, kind, distinct, read_both, job, job / dense_job, read_process,
                 min(run[1] for run in runs), max(run[2] for run in runs), read_length,
                 hist_seconds)
            )  # fmt: skip
            print(
                f"  {kind} ids: prepare job {', '.join(f'{run[0]:.2f}' for run in runs)} s, "
                f"process {', '.join(f'{run[1]:.2f}' for run in runs)} s, peak RSS "
                f"{max(run[2] for run in runs):.0f} MiB, creating its {distinct:,} pool files "
                f"{', '.join(f'{run[3]:.2f}' for run in runs)} s",
                flush=True,
            )

    header = (
        f"{'rows':>13} {'ids':>6} | {'duckdb read':>11} {'prepare':>8} {'ratio':>6} "
        f"{'vs dense':>8} | {'duckdb proc':>11} {'seqpack':>8} {'ratio':>6} {'peak RSS':>9} | "
        f"{'duckdb len':>10} {'histogram':>9} {'ratio':>6}"
    )
    print("\n" + f"{'':>20} | {'in-process (job)':^38} | {'as processes (end to end)':^39} |")
    print(header)
    print("-" * len(header))
    for row in rows_out:
        num_rows, kind, _, both, job, vs_dense, both_process, process, rss, length, hist = row
        print(
            f"{num_rows:>13,} {kind:>6} | {both:>10.3f}s {job:>7.2f}s {job / both:>5.1f}x "
            f"{vs_dense:>7.2f}x | {both_process:>10.3f}s {process:>7.2f}s "
            f"{process / both_process:>5.1f}x {rss:>5.0f} MiB | {length:>9.3f}s {hist:>8.3f}s "
            f"{hist / length:>5.1f}x"
        )
    empty_files = file_creation_seconds(outputs / f"prepared-probe-{time.time_ns()}", 8192)
    print(
        f"this machine: 8,192 empty files created in {empty_files:.2f} s; 1 GiB of fresh memory "
        f"first written in {memory_touch_seconds():.2f} s"
    )
    for done in outputs.glob("prepared-*"):
        shutil.rmtree(done)
    print(
        f"targets: prepare <= {TARGET_RATIO:.0f}x DuckDB's read of the length and id columns; "
        f"sparse or hashed ids <= {TARGET_SPARSE_RATIO}x dense ids; peak RSS < {TARGET_RSS_MIB} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

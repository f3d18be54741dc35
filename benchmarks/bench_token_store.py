"""The token store: `seqpack prepare --tokens-column` against DuckDB reading the token column,
and packed rows per second from the store.

A TRL-style dataset (parquet, an `input_ids` list column, lognormal lengths up to 8192, ~540
tokens per row on average) is generated once into a cache folder, in row groups. Then, in one run:

- DuckDB's time to read the token column (`SELECT sum(len(input_ids))`, a fresh process)
  against `seqpack prepare --length-column input_ids --tokens-column input_ids` as a process,
  --repeat rounds of both, interleaved (a machine shared with other work slows both alike): the
  best of each, the ratio of each round, the CPU time (user + system) and the peak RSS
  (ru_maxrss from wait4), and the job's phases (its LOGLEVEL=INFO lines); with --two-passes,
  the same for the two-pass path (DuckDB's histogram and pools passes, then the store), which
  prepare takes without a token store;
- rows per second of `PackedDataset(prepared, seed=0,
  collate=CollateOptions(pad_token_id=0, format=...))` over the
  store (8192-token rows, one row per item, one core; each format its own rows, read twice:
  as the page cache has them, then again from memory), and the growth of the process's RSS
  over the reads, anonymous memory only (the store is memory-mapped: its pages are the page
  cache's, and what the process allocates should not follow the dataset's size).

Targets (issue 12): prepare within 3x DuckDB's read, peak RSS < 2 GiB; >= 5,000 rows/s.

    python benchmarks/bench_token_store.py                # 1e6 rows
    python benchmarks/bench_token_store.py --rows 2e5     # smaller
    python benchmarks/bench_token_store.py --quick        # 2e4 rows, a smoke test
    python benchmarks/bench_token_store.py --two-passes   # the two-pass path too
    python benchmarks/bench_token_store.py --rows 1e7 --repeat 1 --keep   # ~11 GB + ~11 GB
    python benchmarks/bench_token_store.py --rows 1e7 --read-only         # read the kept store
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from processes import Run, run_process

MAX_SEQ_LEN = 8192
ROW_GROUP = 1 << 16
TARGET_RATIO = 3.0
TARGET_RSS_MIB = 2048
TARGET_ROWS_PER_SECOND = 5000
DUCKDB_READ = (
    "import duckdb, sys; duckdb.connect().sql('SELECT sum(len(input_ids)) FROM "
    "read_parquet($p)', params={'p': sys.argv[1:]}).fetchall()"
)
TWO_PASSES = (  # `seqpack prepare` with the one pass giving up at once: the two DuckDB passes
    "import sys; from seqpack_cli.prepare import one_pass as m; "
    "m.read_in_one_pass = lambda *a, **k: m.Fallback(m.Fault('benchmark')); "
    "from seqpack_cli.cli import app; sys.argv[0] = 'seqpack'; app()"
)


def generate(folder: Path, num_rows: int, num_files: int = 4) -> None:
    marker = folder / ".complete"
    if marker.exists():
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    bounds = np.linspace(0, num_rows, num_files + 1).astype(np.int64)
    for number in range(num_files):
        path = folder / f"part-{number:03d}.parquet"
        with pq.ParquetWriter(path, pa.schema([("input_ids", pa.list_(pa.int32()))])) as writer:
            for start in range(int(bounds[number]), int(bounds[number + 1]), ROW_GROUP):
                stop = min(start + ROW_GROUP, int(bounds[number + 1]))
                lengths = np.clip(rng.lognormal(5.9, 0.9, stop - start), 1, MAX_SEQ_LEN)
                lengths = lengths.astype(np.int64)
                offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
                values = rng.integers(0, 50_257, int(offsets[-1]), dtype=np.int32)
                column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
                writer.write_table(pa.table({"input_ids": column}))
    marker.touch()


def anonymous_rss_mib() -> float:
    """The process's anonymous resident memory: what it allocated, not the pages of the store
    it has mapped (those are the page cache's, shared and reclaimable)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rows_per_second(
    prepared_dir: Path, fmt: str, first: int, num_rows: int
) -> tuple[float, float, float]:
    """(rows/s reading rows first .. first + num_rows - 1 once, rows/s reading them again, the
    growth of anonymous RSS over both): the first read finds the store's pages wherever the page
    cache has them (a just-written store: in memory; a cold one: on disk), the second in memory."""
    from seqpack_cli import load_prepared
    from seqpack_cli.collate import CollateOptions
    from seqpack_cli.data import PackedDataset

    dataset = PackedDataset(
        load_prepared(prepared_dir), collate=CollateOptions(pad_token_id=0, format=fmt), seed=0
    )
    first = min(first, max(0, len(dataset) - num_rows))
    rows = range(first, min(first + num_rows, len(dataset)))
    for k in range(min(200, len(dataset))):  # warm-up: imports, allocator
        dataset[k]
    before = anonymous_rss_mib()
    rates = []
    for _ in range(2):
        started = time.perf_counter()
        for k in rows:
            dataset[k]
        rates.append(len(rows) / (time.perf_counter() - started))
    return rates[0], rates[1], anonymous_rss_mib() - before


def time_prepare(data: Path, output: Path, *, repeat: int, two_passes: bool) -> None:
    """DuckDB's read against `seqpack prepare` (and the two passes), interleaved; the table."""
    files = sorted(str(p) for p in data.glob("*.parquet"))
    duckdb_read = [sys.executable, "-c", DUCKDB_READ, *files]
    prepare_args = [
        "prepare", str(data), "--length-column", "input_ids", "--tokens-column", "input_ids",
        "--max-seq-len", str(MAX_SEQ_LEN), "--output", str(output), "--overwrite", "--quiet",
    ]  # fmt: skip
    commands = {"one pass": [str(Path(sys.executable).parent / "seqpack"), *prepare_args]}
    if two_passes:
        commands["two passes"] = [sys.executable, "-c", TWO_PASSES, *prepare_args]
    env = {**os.environ, "LOGLEVEL": "INFO"}
    runs: dict[str, list[Run]] = {"duckdb": [], **{name: [] for name in commands}}
    # Interleaved, so that a machine shared with other work slows every command alike.
    for _ in range(repeat):
        runs["duckdb"].append(run_process(duckdb_read))
        for name, command in commands.items():
            runs[name].append(run_process(command, env))
    print(
        f"\n{'':<36} {'seconds':>8} {'CPU s':>7} {'vs DuckDB':>9} {'each round':>18} "
        f"{'peak RSS':>9}"
    )
    duckdb = runs["duckdb"]
    best_read = min(run.seconds for run in duckdb)
    print(
        f"{'DuckDB sum(len(input_ids))':<36} {best_read:>8.2f} "
        f"{min(run.cpu for run in duckdb):>7.2f} {'1.0x':>9}"
    )
    for name in commands:
        best = min(runs[name], key=lambda run: run.seconds)
        rounds = " ".join(
            f"{run.seconds / read.seconds:.1f}x"
            for run, read in zip(runs[name], duckdb, strict=True)
        )
        print(
            f"{'seqpack prepare (' + name + ')':<36} {best.seconds:>8.2f} "
            f"{min(run.cpu for run in runs[name]):>7.2f} {best.seconds / best_read:>8.1f}x "
            f"{rounds:>18} {max(run.peak_mib for run in runs[name]):>5.0f} MiB"
        )
    for name in commands:
        best = min(runs[name], key=lambda run: run.seconds)
        lines = [line for line in best.log.splitlines() if line.startswith("INFO")]
        print(f"\nphases of the fastest {name} run (LOGLEVEL=INFO):")
        print("\n".join(f"  {line[5:]}" for line in lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--quick", action="store_true", help="2e4 rows")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/seqpack_bench_tokens"))
    parser.add_argument("--repeat", type=int, default=3, help="rounds of DuckDB and prepare")
    parser.add_argument("--read-rows", type=int, default=20_000, help="rows read per format")
    parser.add_argument(
        "--two-passes", action="store_true", help="also time the two-pass path (no one pass)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the prepared directory")
    parser.add_argument(
        "--read-only", action="store_true", help="only read the kept prepared directory"
    )
    args = parser.parse_args()
    num_rows = 20_000 if args.quick else int(args.rows)
    data = args.cache / f"rows-{num_rows}"
    started = time.perf_counter()
    generate(data, num_rows)
    size = sum(p.stat().st_size for p in data.glob("*.parquet")) / 2**20
    seconds = time.perf_counter() - started
    print(f"{num_rows:,} rows ({size:,.0f} MiB of parquet) ready in {seconds:.1f} s")

    output = args.cache / f"prepared-{num_rows}"
    if args.read_only:
        if not output.is_dir():
            raise SystemExit(f"{output} does not exist: run without --read-only first (--keep)")
    else:
        time_prepare(data, output, repeat=args.repeat, two_passes=args.two_passes)
    print(
        f"\n{'PackedDataset from the store':<34} {'rows/s':>8} {'again':>8} {'anon RSS growth':>16}"
    )
    for number, fmt in enumerate(("padding_free", "hf", "padded")):
        # Each format reads rows of its own, so none finds pages another one read.
        first, again, growth = rows_per_second(
            output, fmt, (number + 1) * args.read_rows, args.read_rows
        )
        print(f"  format={fmt!r:<25} {first:>8,.0f} {again:>8,.0f} {growth:>12.0f} MiB")
    print(
        f"\ntargets: prepare <= {TARGET_RATIO:.0f}x DuckDB's read, peak RSS < {TARGET_RSS_MIB} "
        f"MiB; >= {TARGET_ROWS_PER_SECOND:,} rows/s of {MAX_SEQ_LEN} tokens"
    )
    if not (args.keep or args.read_only):
        shutil.rmtree(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

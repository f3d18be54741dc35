"""The token store: `seqpack prepare --tokens-column` against DuckDB reading the token column,
and packed rows per second from the store.

A TRL-style dataset (parquet, an `input_ids` list column, lognormal lengths up to 8192, ~540
tokens per row on average) is generated once into a cache folder, in row groups. Then, in one run:

- DuckDB's time to read the token column (`SELECT sum(len(input_ids))`, a fresh process, best
  of 3) against `seqpack prepare --length-column input_ids --tokens-column input_ids` as a
  process (best of --repeat), and that command's peak RSS (ru_maxrss from wait4);
- rows per second of `PackedDataset(prepared, pad_token_id=0, seed=0, format=...)` over the
  store (8192-token rows, one row per item, one core), and the growth of the process's RSS
  over the pass, anonymous memory only (the store is memory-mapped: its pages are the page
  cache's, and what the process allocates should not follow the dataset's size).

Targets (issue 12): prepare within 3x DuckDB's read, peak RSS < 2 GiB; >= 5,000 rows/s.

    python benchmarks/bench_token_store.py                # 1e6 rows
    python benchmarks/bench_token_store.py --rows 2e5     # smaller
    python benchmarks/bench_token_store.py --quick        # 2e4 rows, a smoke test
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MAX_SEQ_LEN = 8192
ROW_GROUP = 1 << 16
TARGET_RATIO = 3.0
TARGET_RSS_MIB = 2048
TARGET_ROWS_PER_SECOND = 5000


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


def best_process(command: list[str], repeat: int) -> tuple[float, float]:
    """(best wall seconds, largest peak RSS in MiB) of `command` run `repeat` times."""
    best, peak = float("inf"), 0.0
    for _ in range(repeat):
        os.sync()
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"failed: {' '.join(command)}")
        best = min(best, time.perf_counter() - started)
        peak = max(peak, usage.ru_maxrss / 1024)
    return best, peak


def anonymous_rss_mib() -> float:
    """The process's anonymous resident memory: what it allocated, not the pages of the store
    it has mapped (those are the page cache's, shared and reclaimable)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rows_per_second(prepared_dir: Path, fmt: str, num_rows: int) -> tuple[float, float]:
    from seqpack_cli import load_prepared
    from seqpack_cli.data import PackedDataset

    dataset = PackedDataset(load_prepared(prepared_dir), pad_token_id=0, seed=0, format=fmt)
    rows = min(num_rows, len(dataset))
    for k in range(min(200, rows)):  # warm-up: imports, allocator
        dataset[k]
    before = anonymous_rss_mib()
    started = time.perf_counter()
    for k in range(rows):
        dataset[k]
    seconds = time.perf_counter() - started
    return rows / seconds, anonymous_rss_mib() - before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--quick", action="store_true", help="2e4 rows")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/seqpack_bench_tokens"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--read-rows", type=int, default=20_000, help="rows read per format")
    args = parser.parse_args()
    num_rows = 20_000 if args.quick else int(args.rows)
    data = args.cache / f"rows-{num_rows}"
    started = time.perf_counter()
    generate(data, num_rows)
    size = sum(p.stat().st_size for p in data.glob("*.parquet")) / 2**20
    seconds = time.perf_counter() - started
    print(f"{num_rows:,} rows ({size:,.0f} MiB of parquet) ready in {seconds:.1f} s")

    files = sorted(str(p) for p in data.glob("*.parquet"))
    duckdb_read = (
        "import duckdb, sys; duckdb.connect().sql('SELECT sum(len(input_ids)) FROM "
        "read_parquet($p)', params={'p': sys.argv[1:]}).fetchall()"
    )
    read_seconds, _ = best_process([sys.executable, "-c", duckdb_read, *files], 3)
    output = args.cache / f"prepared-{num_rows}"
    seqpack = str(Path(sys.executable).parent / "seqpack")
    prepare = [
        seqpack, "prepare", str(data), "--length-column", "input_ids", "--tokens-column",
        "input_ids", "--max-seq-len", str(MAX_SEQ_LEN), "--output", str(output), "--overwrite",
        "--quiet",
    ]  # fmt: skip
    prepare_seconds, peak = best_process(prepare, args.repeat)
    print(
        f"\n{'':<34} {'seconds':>8} {'vs DuckDB':>9} {'peak RSS':>9}\n"
        f"{'DuckDB sum(len(input_ids))':<34} {read_seconds:>8.2f} {'1.0x':>9}\n"
        f"{'seqpack prepare --tokens-column':<34} {prepare_seconds:>8.2f} "
        f"{prepare_seconds / read_seconds:>8.1f}x {peak:>5.0f} MiB"
    )
    print(f"\n{'PackedDataset from the store':<34} {'rows/s':>8} {'anon RSS growth':>16}")
    for fmt in ("padding_free", "hf", "padded"):
        rate, growth = rows_per_second(output, fmt, args.read_rows)
        print(f"  format={fmt!r:<25} {rate:>8,.0f} {growth:>12.0f} MiB")
    print(
        f"\ntargets: prepare <= {TARGET_RATIO:.0f}x DuckDB's read, peak RSS < {TARGET_RSS_MIB} "
        f"MiB; >= {TARGET_ROWS_PER_SECOND:,} rows/s of {MAX_SEQ_LEN} tokens"
    )
    shutil.rmtree(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

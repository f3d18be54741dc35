"""The capped `seqpack stats` sweep against the uncapped one (issue 21: at most 3x).

Runs `seqpack stats INPUT --length-column COLUMN --max-seq-len M` with no cap, then with each
cap of --caps, side by side in one process tree (these machines are noisy: each command runs
--repeats times and the fastest is kept), and prints each time, its ratio to the uncapped one,
and seqpack's bins and bound per row from the --json output. Without inputs it writes --rows
chat-like lengths (lognormal, median 490 tokens, up to 16,384: the shape of issue 21's 8M rows)
to a temporary parquet file first.

    python benchmarks/bench_sweep.py                                  # 8M generated rows
    python benchmarks/bench_sweep.py /tmp/p3data/d8m --length-column num_tokens
    python benchmarks/bench_sweep.py data/ --length-column num_tokens --max-seq-len 4096 --caps 8

Measured (2-core dev machine, issue 21's 8M rows at 8,192 tokens, fastest of 3): no cap 0.95 s;
8 per bin 1.15 s (1.2x; before: 5.0 s), 16 per bin 2.2 s (2.3x; before: 6.7 s); the sweep
8,16,none 2.7 s (2.9x; before: 13.4 s). Bins: 993,607 and 747,542 (before: 993,679 and 747,755).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_packing

from bench_packing import print_table

TARGET_RATIO = 3.0


def run_stats(args: argparse.Namespace, cap: str | None) -> tuple[float, dict[str, Any]]:
    """The fastest of `args.repeats` runs of `seqpack stats` at `cap`, and its JSON output."""
    seqpack = shutil.which("seqpack") or str(Path(sys.executable).with_name("seqpack"))
    command = [seqpack, "stats", *args.inputs, "--length-column", args.length_column]
    command += ["--max-seq-len", str(args.max_seq_len), "--json", "--quiet"]
    if cap is not None:
        command += ["--max-seqs-per-bin", cap]
    best, output = float("inf"), ""
    for _ in range(args.repeats):
        start = time.perf_counter()
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        best = min(best, time.perf_counter() - start)
    return best, json.loads(output)


def write_lengths(directory: Path, num_rows: int) -> Path:
    """A parquet file of `num_rows` chat-like lengths (seeded) in `directory`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(21)
    lengths = np.clip(np.ceil(rng.lognormal(np.log(490), 1.0, num_rows)), 1, 16_384)
    path = directory / "lengths.parquet"
    pq.write_table(pa.table({"num_tokens": lengths.astype(np.int64)}), path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="*")
    parser.add_argument("--length-column", default="num_tokens")
    parser.add_argument("--rows", type=int, default=8_000_000, help="generated, without inputs")
    parser.add_argument("--max-seq-len", type=int, default=8192)
    parser.add_argument("--caps", default="8,16,8;16;none", help="';' joins caps into one sweep")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.inputs:
        compare(args)
        return
    with tempfile.TemporaryDirectory() as directory:
        args.inputs = [str(write_lengths(Path(directory), args.rows))]
        compare(args)


def compare(args: argparse.Namespace) -> None:
    """Time the uncapped run and each cap of `args.caps`, and print the table."""
    uncapped, _ = run_stats(args, None)
    rows: list[list[str]] = [["none", f"{uncapped:.2f}", "1.00x", "", ""]]
    for cap in args.caps.split(","):
        cap = cap.replace(";", ",")
        seconds, report = run_stats(args, cap)
        bins = [f"{row['seqpack']['num_bins']:,}" for row in report["rows"]]
        bounds = [f"{row['seqpack']['lower_bound_bins']:,}" for row in report["rows"]]
        ratio = seconds / uncapped
        verdict = "" if ratio <= TARGET_RATIO else f" (over {TARGET_RATIO:g}x)"
        rows.append(
            [cap, f"{seconds:.2f}", f"{ratio:.2f}x{verdict}", " ".join(bins), " ".join(bounds)]
        )
    title = f"seqpack stats, max_seq_len {args.max_seq_len}, fastest of {args.repeats} runs"
    print_table(title, ["cap", "seconds", "vs uncapped", "bins", "bound"], rows)


if __name__ == "__main__":
    main()

"""`seqpack prepare s3://...` against the same files on local disk, with a local S3 server.

moto's standalone S3 server (`python -m moto.server`, the dev extra) runs on 127.0.0.1, started
as the tests start it (`tests/remote_servers.py`); the parquet files are written locally and
uploaded through the S3 API. Then, side by side in one run (rounds alternate, best of
`--repeat`), each as a process (wall, CPU, peak RSS from wait4):

- the length path: `prepare s3://bench/lengths/ --length-column n --id-column doc` against
  `prepare LOCAL_DIR ...` on the same files (1e7 rows by default, 16 objects);
- peak memory of the remote prepare at a quarter of the rows and at all of them, and at 4x the
  objects for the same rows: it should follow neither;
- the token-store path: `prepare --tokens-column input_ids` from S3 and from local disk, with
  tokens/s.

moto keeps objects in the memory of a Python process and serves them from it: a real object
store (or MinIO) is faster, so the ratio here is an upper bound of what the S3 protocol costs.

Target (issue 27): prepare of 1e7 rows from the local S3 server within 1.5x the same files from
local disk; peak memory independent of the number of objects and rows.

    python benchmarks/bench_remote.py               # 1e7 rows, 2e5 token rows
    python benchmarks/bench_remote.py --quick       # 1e6 rows, 2e4 token rows
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from processes import Run, run_process
from tables import print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from remote_servers import aws_credentials, moto_server, s3_client

SEQPACK = [sys.executable, "-m", "seqpack_cli"]
BUCKET = "bench"


def upload(client: Any, folder: Path, prefix: str) -> None:
    """Every parquet file of `folder` as an object `s3://bench/{prefix}/{name}`."""
    for path in sorted(folder.glob("*.parquet")):
        client.upload_file(str(path), BUCKET, f"{prefix}/{path.name}")


def write_lengths(folder: Path, rows: int, files: int) -> Path:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    step = -(-rows // files)
    for i in range(files):
        count = min(step, rows - i * step)
        lengths = np.clip(rng.lognormal(6.0, 1.0, size=count), 1, 8192).astype(np.int32)
        ids = np.arange(i * step, i * step + count, dtype=np.int64) * 3 + 7
        table = pa.table({"n": lengths, "doc": ids, "text": pa.array(["x" * 24] * count)})
        pq.write_table(table, folder / f"part-{i:05d}.parquet", row_group_size=1 << 18)
    return folder


def write_tokens(folder: Path, rows: int, files: int) -> tuple[Path, int]:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    step = -(-rows // files)
    tokens = 0
    for i in range(files):
        count = min(step, rows - i * step)
        lengths = np.clip(rng.lognormal(5.0, 0.8, size=count), 1, 4096).astype(np.int64)
        values = rng.integers(0, 50_000, size=int(lengths.sum()), dtype=np.int32)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        lists = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
        pq.write_table(pa.table({"input_ids": lists}), folder / f"part-{i:05d}.parquet")
        tokens += int(lengths.sum())
    return folder, tokens


def prepare(inputs: str, output: Path, endpoint: str, *extra: str) -> list[str]:
    command = [*SEQPACK, "prepare", inputs, "--max-seq-len", "8192", "-o", str(output),
               "--overwrite", "-q", *extra]  # fmt: skip
    if inputs.startswith("s3://"):
        command += ["--storage-option", f"endpoint_url={endpoint}"]
    return command


def best(runs: list[Run]) -> Run:
    return min(runs, key=lambda run: run.seconds)


def row(name: str, run: Run, base: Run | None, extra: str = "") -> list[str]:
    ratio = "" if base is None else f"{run.seconds / base.seconds:.2f}x"
    return [name, f"{run.seconds:.2f}", f"{run.cpu:.1f}", f"{run.peak_mib:,.0f}", ratio, extra]


HEADER = ["what", "seconds", "cpu s", "peak MiB", "vs local", ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--token-rows", type=float, default=2e5)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1e6 rows, 2e4 token rows")
    args = parser.parse_args()
    rows = int(1e6 if args.quick else args.rows)
    token_rows = int(2e4 if args.quick else args.token_rows)
    with (
        tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp,
        aws_credentials(),  # moto's dummy credentials, for this process and the prepares
        moto_server() as endpoint,
    ):
        env = dict(os.environ)
        folder = Path(tmp)
        client = s3_client(endpoint)
        client.create_bucket(Bucket=BUCKET)
        lengths = write_lengths(folder / "lengths", rows, args.files)
        upload(client, lengths, "lengths")
        many = write_lengths(folder / "many", rows, 4 * args.files)
        upload(client, many, "many")
        quarter = write_lengths(folder / "quarter", rows // 4, args.files)
        upload(client, quarter, "quarter")
        tokens, num_tokens = write_tokens(folder / "tokens", token_rows, args.files)
        upload(client, tokens, "tokens")
        size = sum(p.stat().st_size for p in lengths.iterdir())
        length_args = ["--length-column", "n", "--id-column", "doc"]
        local_runs, remote_runs = [], []
        for _ in range(args.repeat):  # alternate: a busy moment slows both alike
            local_runs.append(run_process(prepare(str(lengths), folder / "a", endpoint,
                                                  *length_args), env))  # fmt: skip
            remote_runs.append(run_process(prepare(f"s3://{BUCKET}/lengths/", folder / "b",
                                                   endpoint, *length_args), env))  # fmt: skip
        local, remote = best(local_runs), best(remote_runs)
        print_table(
            f"lengths: {rows:,} rows in {args.files} objects ({size / 2**20:.0f} MiB of parquet)",
            HEADER,
            [row("prepare LOCAL_DIR", local, None), row("prepare s3://", remote, local)],
        )
        memory = [
            ("a quarter of the rows", "quarter", rows // 4, args.files),
            ("all the rows", "lengths", rows, args.files),
            ("all the rows in 4x the objects", "many", rows, 4 * args.files),
        ]
        table = []
        for name, prefix, count, files in memory:
            here = run_process(prepare(str(folder / prefix), folder / "m", endpoint,
                                       *length_args), env)  # fmt: skip
            there = run_process(prepare(f"s3://{BUCKET}/{prefix}/", folder / "m", endpoint,
                                        *length_args), env)  # fmt: skip
            extra = there.peak_mib - here.peak_mib
            table.append([name, f"{count:,}", str(files), f"{here.peak_mib:,.0f}",
                          f"{there.peak_mib:,.0f}", f"{extra:+,.0f}"])  # fmt: skip
        header = ["rows", "count", "objects", "local", "s3://", "s3:// - local"]
        print_table("peak memory (MiB) of prepare, local and from s3://", header, table)
        store_args = ["--length-column", "input_ids", "--tokens-column", "input_ids"]
        local_store = run_process(prepare(str(tokens), folder / "c", endpoint, *store_args), env)
        remote_store = run_process(prepare(f"s3://{BUCKET}/tokens/", folder / "d", endpoint,
                                           *store_args), env)  # fmt: skip
        rate = [
            f"{num_tokens / run.seconds / 1e6:.1f}M tokens/s" for run in (local_store, remote_store)
        ]
        print_table(
            f"token store: {token_rows:,} rows, {num_tokens:,} tokens",
            HEADER,
            [row("prepare --tokens-column LOCAL_DIR", local_store, None, rate[0]),
             row("prepare --tokens-column s3://", remote_store, local_store, rate[1])],
        )  # fmt: skip
        same = all(
            (folder / "a" / name).read_bytes() == (folder / "b" / name).read_bytes()
            for name in ("counts.json", "templates.json")
        )
        print(f"\nremote and local outputs equal (counts, templates): {same}")


if __name__ == "__main__":
    main()

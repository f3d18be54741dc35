"""Reading two columns of parquet files from a local S3 server (and HTTP) against local disk.

The basis of issue 27's target (`prepare` from the local S3 server within 1.5x the same files
from local disk): what the read itself costs. Parquet files of 20 int64 columns (`length`,
`id` and 18 others; random values, no compression: the bytes are what is moved) are written to
a temporary folder, uploaded to moto's standalone S3 server started on 127.0.0.1 for the run,
and served by a local HTTP server with range requests. Then, for each source, the best of
--repeat rounds (run in turn) of `pyarrow.parquet.read_table(paths, columns=["length", "id"])`:

- local disk: paths on disk (the page cache holds them after the first round);
- s3: `seqpack_cli.remote.arrow_filesystem` (pyarrow's S3FileSystem on the moto server);
- https: the same call on the HTTP server (fsspec's HTTPFileSystem through pyarrow);

and the bytes each remote read fetched (one more read through a byte-counting relay for s3,
the server's own count for https) against the files' size, plus the time of
`resolve_remote` (the listing and one HEAD per object).

moto is a test server, not a fast one: it reads a whole object to answer a range request, so
its time per request grows with the object's size (the last table: a 1 KiB range of objects of
1, 16 and 64 MiB). The s3 row measures moto as much as the reader; the bytes fetched are the
reader's alone. Smaller objects (--files) bring the s3 time closer to what a real store gives.

    python benchmarks/bench_remote_read.py               # 1e6 rows in 4 files (~160 MB)
    python benchmarks/bench_remote_read.py --quick       # 1e5 rows in 2 files
    python benchmarks/bench_remote_read.py --rows 1e7 --files 16
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tables import print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from remote_servers import (
    ByteCountingProxy,
    aws_credentials,
    moto_server,
    s3_client,
    serve_folder,
)

from seqpack_cli.remote import arrow_filesystem, parse_storage_options, resolve_remote

COLUMNS = ["length", "id"]
BUCKET = "bench"


def write_files(folder: Path, num_rows: int, num_files: int) -> list[Path]:
    """`num_files` parquet files of 20 int64 columns splitting `num_rows` rows."""
    rng = np.random.default_rng(0)
    paths = []
    for index, rows in enumerate(np.array_split(np.arange(num_rows), num_files)):
        columns = {
            "length": rng.integers(1, 8192, len(rows)),
            "id": rows.astype(np.int64),
            **{f"x{k:02d}": rng.integers(0, 1 << 62, len(rows)) for k in range(18)},
        }
        path = folder / f"part-{index:03d}.parquet"
        pq.write_table(pa.table(columns), path, compression="none", row_group_size=128 * 1024)
        paths.append(path)
    return paths


def best_of(repeat: int, reads: dict[str, Callable[[], pa.Table]]) -> dict[str, float]:
    """The best time of each read over `repeat` rounds, the reads run in turn in each round."""
    best = dict.fromkeys(reads, float("inf"))
    for _ in range(repeat):
        for name, read in reads.items():
            started = time.perf_counter()
            table = read()
            best[name] = min(best[name], time.perf_counter() - started)
            assert table.num_columns == len(COLUMNS)
    return best


def range_cost(filesystem: pa.fs.FileSystem, client: object) -> dict[int, float]:
    """Milliseconds moto takes for a 1 KiB range read of objects of 1, 16 and 64 MiB."""
    cost = {}
    for mebibytes in (1, 16, 64):
        key = f"range/{mebibytes}.bin"
        client.put_object(Bucket=BUCKET, Key=key, Body=bytes(mebibytes << 20))  # type: ignore[attr-defined]
        with filesystem.open_input_file(f"{BUCKET}/{key}") as handle:
            times = []
            for _ in range(5):
                started = time.perf_counter()
                handle.read_at(1024, 0)
                times.append(time.perf_counter() - started)
        cost[mebibytes] = min(times) * 1000
    return cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1e5 rows in 2 files")
    args = parser.parse_args()
    num_rows, num_files = (100_000, 2) if args.quick else (int(args.rows), args.files)

    with tempfile.TemporaryDirectory() as scratch, aws_credentials(), moto_server() as endpoint:
        folder = Path(scratch)
        paths = write_files(folder, num_rows, num_files)
        total_bytes = sum(path.stat().st_size for path in paths)
        client = s3_client(endpoint)
        client.create_bucket(Bucket=BUCKET)
        for path in paths:
            client.upload_file(str(path), BUCKET, f"data/{path.name}")
        options = parse_storage_options([f"endpoint_url={endpoint}"])

        started = time.perf_counter()
        files = resolve_remote([f"s3://{BUCKET}/data/"], options)
        listing_s = time.perf_counter() - started
        s3_fs, _ = arrow_filesystem(files[0].url, options)
        s3_paths = [arrow_filesystem(file.url, options)[1] for file in files]

        with serve_folder(folder) as http:
            urls = [f"{http.url}/{path.name}" for path in paths]
            http_fs, _ = arrow_filesystem(urls[0])
            reads = {
                "local disk": lambda: pq.read_table([str(p) for p in paths], columns=COLUMNS),
                "s3 (moto)": lambda: pq.read_table(s3_paths, filesystem=s3_fs, columns=COLUMNS),
                "https": lambda: pq.read_table(urls, filesystem=http_fs, columns=COLUMNS),
            }
            best = best_of(args.repeat, reads)
            http.reset()
            reads["https"]()
            http_bytes = http.bytes_served

        port = int(endpoint.rsplit(":", 1)[1])
        with ByteCountingProxy(port) as proxy:
            counted = parse_storage_options([f"endpoint_url={proxy.endpoint}"])
            proxy_fs, _ = arrow_filesystem(files[0].url, counted)
            proxy.reset()
            pq.read_table(s3_paths, filesystem=proxy_fs, columns=COLUMNS)
            s3_bytes = proxy.bytes_down

        range_ms = range_cost(s3_fs, client)

    fetched = {"local disk": None, "s3 (moto)": s3_bytes, "https": http_bytes}
    rows = []
    for name, seconds in best.items():
        moved = fetched[name]
        rows.append(
            [
                name,
                f"{seconds:.3f}",
                f"{seconds / best['local disk']:.2f}x",
                f"{num_rows / seconds / 1e6:.1f}",
                "-" if moved is None else f"{moved / 1e6:.1f}",
                "-" if moved is None else f"{moved / total_bytes:.1%}",
            ]
        )
    print_table(
        f"Reading {COLUMNS} of {num_rows:,} rows in {num_files} parquet files of 20 int64 "
        f"columns ({total_bytes / 1e6:.0f} MB), best of {args.repeat}",
        ["source", "seconds", "vs local", "M rows/s", "MB fetched", "of the files"],
        rows,
    )
    print_table(
        "moto's time for a 1 KiB range read, by object size (best of 5)",
        ["object MiB", "ms per read"],
        [[size, f"{ms:.1f}"] for size, ms in range_ms.items()],
    )
    print_table(
        "Resolving the S3 prefix (one listing, one HEAD per object)",
        ["objects", "seconds"],
        [[len(files), f"{listing_s:.3f}"]],
    )


if __name__ == "__main__":
    main()

"""`python examples/demo.py` (`make demo`): seqpack on a realistic dataset, start to finish.

1. Writes a few million rows of fine-tuning data to `demo_out/data/` (several parquet files):
   an SFT-like mixture (prompt + response) and a code-like one (wide, long-tailed), shuffled,
   each row with a stable `doc_id` and its length in tokens. Made once, reused afterwards.
2. Runs the real commands, printing each: `seqpack prepare` (parquet -> demo_out/prepared) and
   `seqpack stats` (its efficiency against packing without seqpack).
3. Loads the prepared directory and prints the first bins of two epochs: the same templates,
   new pairings of documents each epoch, no re-packing.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["main", "write_demo_dataset"]

MAX_SEQ_LEN = 4096
_CHUNK_ROWS = 1 << 20  # rows generated at a time, so generation memory stays bounded


def _mixture(
    rng: np.random.Generator, size: int, code_fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """Lengths in tokens (some above MAX_SEQ_LEN, as real data has) and each row's source."""
    is_code = rng.random(size) < code_fraction
    prompt = rng.lognormal(np.log(120), 0.9, size)
    response = rng.lognormal(np.log(280), 1.0, size)
    code = rng.lognormal(np.log(600), 1.3, size)
    lengths = np.ceil(np.where(is_code, code, prompt + response)).astype(np.int64)
    return np.clip(lengths, 1, 4 * MAX_SEQ_LEN), is_code


def write_demo_dataset(
    root: Path, num_rows: int, *, num_files: int = 6, seed: int = 0, code_fraction: float = 0.3
) -> list[Path]:
    """Write `num_rows` shuffled rows (doc_id, source, num_tokens) over `num_files` parquet files.

    doc_ids are a seeded permutation of a sparse id space (as ids from a real corpus would be),
    so a file's rows are in no particular id order.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    doc_ids = rng.permutation(num_rows).astype(np.int64) * 13 + 1_000_000
    paths = []
    for number, rows in enumerate(np.array_split(np.arange(num_rows), num_files)):
        path = root / f"part-{number:03d}.parquet"
        schema = pa.schema(
            [("doc_id", pa.int64()), ("source", pa.string()), ("num_tokens", pa.int32())]
        )
        with pq.ParquetWriter(path, schema) as writer:
            for start in range(0, len(rows), _CHUNK_ROWS):
                part = rows[start : start + _CHUNK_ROWS]
                lengths, is_code = _mixture(rng, len(part), code_fraction)
                source = pa.DictionaryArray.from_arrays(
                    pa.array(is_code.astype(np.int8)), pa.array(["sft", "code"])
                ).cast(pa.string())
                table = pa.table(
                    {
                        "doc_id": doc_ids[part],
                        "source": source,
                        "num_tokens": lengths.astype(np.int32),
                    },
                    schema=schema,
                )
                writer.write_table(table, row_group_size=256 * 1024)
        paths.append(path)
    return paths


def _seqpack() -> list[str]:
    """The installed `seqpack` command next to this Python (else `python -m seqpack_cli`)."""
    script = Path(sys.executable).parent / "seqpack"
    return [str(script)] if script.exists() else [sys.executable, "-m", "seqpack_cli"]


def _run(args: list[str]) -> None:
    shown = ["seqpack", *args[len(_seqpack()) :]]
    print(f"\n$ {shlex.join(shown)}", flush=True)
    started = time.perf_counter()
    subprocess.run(args, check=True)
    print(f"  ({time.perf_counter() - started:.1f} s)", flush=True)


def _show_epochs(prepared_dir: Path, num_bins: int = 3) -> None:
    from seqpack_cli.epoch.plan import EpochPlan, materialize_epoch
    from seqpack_cli.prepared import load_prepared
    from seqpack_cli.seeding import seed_from_components

    manifest, _counts, templates, pools = load_prepared(prepared_dir)
    print(f"\n>>> manifest, counts, templates, pools = load_prepared({str(prepared_dir)!r})")
    print(f"{len(templates):,} templates, {manifest['n_bins']:,} bins per epoch")
    plans = {}
    for epoch in (0, 1):
        seed = seed_from_components(epoch)
        plans[epoch] = EpochPlan(templates, pools, seed=seed)
        print(f"\n>>> materialize_epoch(templates, pools, seed=seed_from_components({epoch}))")
        bins = materialize_epoch(templates, pools, seed=seed)
        for k, ids in zip(range(num_bins), bins, strict=False):
            print(f"  bin {k}: lengths {list(plans[epoch].lengths(k))} <- doc_ids {ids}")
    # The same template in both epochs holds other documents: find epoch 0's first template
    # among epoch 1's bins.
    wanted = plans[0].lengths(0)
    later = next(k for k in range(len(plans[1])) if plans[1].lengths(k) == wanted)
    print(f"\nTemplate {list(wanted)} in both epochs, with new documents:")
    print(f"  epoch 0, bin 0: doc_ids {plans[0][0]}")
    print(f"  epoch 1, bin {later}: doc_ids {plans[1][later]}")
    print(
        "The packing is computed once, by prepare; every epoch visits the same templates in a "
        "new order and pairs new documents in them, with no re-packing."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python examples/demo.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rows", type=int, default=3_000_000, help="rows of demo data")
    parser.add_argument("--out", type=Path, default=Path("demo_out"), help="where everything goes")
    args = parser.parse_args(argv)

    data = args.out / "data"
    marker = data / f".complete-{args.rows}"
    if marker.exists():
        print(f"Reusing the demo dataset in {data}/ ({args.rows:,} rows).")
    else:
        print(
            f"Writing {args.rows:,} rows of SFT-like and code-like data to {data}/ ...", flush=True
        )
        started = time.perf_counter()
        # Only what an earlier demo wrote: the folder may hold other files of the user's.
        for old in [*data.glob("part-*.parquet"), *data.glob(".complete-*")]:
            old.unlink()
        paths = write_demo_dataset(data, args.rows)
        marker.touch()
        size = sum(p.stat().st_size for p in paths) / 1e6
        print(f"  {len(paths)} files, {size:.0f} MB ({time.perf_counter() - started:.1f} s)")

    prepared = args.out / "prepared"
    seqpack = _seqpack()
    _run(
        [
            *seqpack,
            "prepare",
            str(data),
            "--length-column",
            "num_tokens",
            "--id-column",
            "doc_id",
            "--max-seq-len",
            str(MAX_SEQ_LEN),
            "--over-cap",
            "drop",
            "--output",
            str(prepared),
            "--overwrite",
        ]
    )
    _run([*seqpack, "stats", str(prepared)])
    _show_epochs(prepared)
    return 0


if __name__ == "__main__":
    sys.exit(main())

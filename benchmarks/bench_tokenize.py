"""`seqpack prepare --tokenizer` against its limit and against what users run today.

One byte-level BPE (8,000 ids, trained here on generated text: nothing is downloaded; the
tokenizer of `bench_tokenize_kernel.py`) and generated rows written as 4 parquet files. In one
run, side by side:

- text (pretraining, `--text-column`): the tokenizer's bare `encode_batch` over the same texts in
  this process, in batches of 1,024 (texts already in memory: the limit of this machine, every
  core in the tokenizer's own threads); `seqpack prepare --tokenizer` as a process (reads the
  parquet, tokenizes, writes the store, the pools and the manifest); and the route of today:
  `datasets.Dataset.from_parquet(...).map(tokenize, batched=True, num_proc=2)`, `to_parquet`, then
  `seqpack prepare --tokens-column input_ids`, end to end;
- chats (`--messages-column`): `seqpack prepare --tokenizer` against `datasets.map` of
  transformers' `apply_chat_template(..., return_assistant_tokens_mask=True)` (num_proc=2),
  `to_parquet`, then `prepare --tokens-column input_ids --loss-mask-column assistant_masks`;
- peak memory (ru_maxrss) of `prepare --tokenizer` at N and 4N rows: it should not follow N.

Each process's wall time, CPU time (user + system) and peak RSS come from wait4.

Target (issue 26): prepare --tokenizer >= 0.8x the bare encode_batch's tokens/s; faster end to
end than the datasets route; peak memory independent of the number of rows.

    python benchmarks/bench_tokenize.py                 # 100,000 texts, 20,000 chats
    python benchmarks/bench_tokenize.py --quick         # 20,000 texts, 4,000 chats
    python benchmarks/bench_tokenize.py --rows 1000000  # bigger
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from bench_tokenize_kernel import build_tokenizer, conversations, paragraph
from processes import Run, run_process
from tables import print_table

SEQPACK = [sys.executable, "-m", "seqpack_cli"]
FILES = 4


def write_files(folder: Path, table: pa.Table) -> Path:
    """`table` as FILES parquet files of consecutive rows in `folder`."""
    folder.mkdir(parents=True)
    step = -(-table.num_rows // FILES)
    for i in range(FILES):
        pq.write_table(table.slice(i * step, step), folder / f"part-{i}.parquet")
    return folder


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [paragraph(rng) for _ in range(n)]


def bare_encode_batch(tokenizer: Path, rows: list[str]) -> tuple[float, int]:
    """Seconds and tokens of the tokenizer's own `encode_batch` over `rows`, 1,024 at a time."""
    from tokenizers import Tokenizer

    built = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    started, tokens = time.perf_counter(), 0
    for start in range(0, len(rows), 1024):
        tokens += sum(len(e.ids) for e in built.encode_batch(rows[start : start + 1024]))
    return time.perf_counter() - started, tokens


_DATASETS_SCRIPT = textwrap.dedent(
    """
    import sys
    from datasets import Dataset
    from transformers import AutoTokenizer
    inputs, output, tokenizer, kind = sys.argv[1:5]
    tok = AutoTokenizer.from_pretrained(tokenizer)
    files = sorted(str(p) for p in __import__("pathlib").Path(inputs).glob("*.parquet"))
    ds = Dataset.from_parquet(files)
    if kind == "text":
        ds = ds.map(lambda b: tok(b["text"]), batched=True, num_proc=2, remove_columns=["text"])
    else:
        def chat(row):
            out = tok.apply_chat_template(row["messages"], tokenize=True, return_dict=True,
                                          return_assistant_tokens_mask=True)
            return {"input_ids": out["input_ids"], "assistant_masks": out["assistant_masks"]}
        ds = ds.map(chat, num_proc=2, remove_columns=["messages"])
    ds.to_parquet(output)
    """
)


def datasets_route(folder: Path, inputs: Path, tokenizer: Path, kind: str) -> tuple[Run, Run]:
    """datasets.map + to_parquet (one process), then prepare --tokens-column (another)."""
    tokenized = folder / f"{kind}-tokenized"
    tokenized.mkdir()
    env = {**os.environ, "HF_DATASETS_CACHE": str(folder / "hf-cache"), "HF_HUB_OFFLINE": "1"}
    script = [sys.executable, "-c", _DATASETS_SCRIPT, str(inputs), str(tokenized / "data.parquet")]
    mapped = run_process([*script, str(tokenizer), kind], env)
    store = ["--tokens-column", "input_ids"]
    if kind == "messages":
        store += ["--loss-mask-column", "assistant_masks"]
    prepared = run_process([*SEQPACK, "prepare", str(tokenized), "--length-column", "input_ids",
                            *store, "--max-seq-len", "4096", "--over-cap", "truncate",
                            "-o", str(folder / f"{kind}-route"), "-q"])  # fmt: skip
    return mapped, prepared


def prepare_tokenizer(inputs: Path, output: Path, tokenizer: Path, *column: str) -> Run:
    return run_process([*SEQPACK, "prepare", str(inputs), "--tokenizer", str(tokenizer), *column,
                        "--max-seq-len", "4096", "--over-cap", "truncate", "-o", str(output),
                        "-q"])  # fmt: skip


def stored_tokens(output: Path) -> int:
    from seqpack_cli import load_prepared

    return int(load_prepared(output).manifest["summary"]["num_input_tokens"])


def row(name: str, run: Run | float, tokens: int, rows: int, limit: float | None) -> list[str]:
    seconds = run if isinstance(run, float) else run.seconds
    cpu = "" if isinstance(run, float) else f"{run.cpu:.1f}"
    peak = "" if isinstance(run, float) else f"{run.peak_mib:,.0f}"
    rate = tokens / seconds
    return [
        name,
        f"{seconds:.2f}",
        cpu,
        peak,
        f"{rate / 1e6:.2f}M",
        f"{rows / seconds:,.0f}",
        "" if limit is None else f"{rate / limit:.2f}x",
    ]


HEADER = ["what", "seconds", "cpu s", "peak MiB", "tokens/s", "rows/s", "vs bare"]


def print_against_the_route(
    title: str,
    first: list[list[str]],
    ours: Run,
    route: tuple[Run, Run],
    mapped_name: str,
    figures: tuple[int, int, float | None],
) -> None:
    """The table of `prepare --tokenizer` (`ours`) beside the datasets route's two processes
    (`route`: the map and to_parquet, then prepare --tokens-column) and their sum."""
    mapped, prepared = route
    total = Run(mapped.seconds + prepared.seconds, mapped.cpu + prepared.cpu,
                max(mapped.peak_mib, prepared.peak_mib))  # fmt: skip
    tokens, n, limit = figures
    rows = [
        *first,
        row("seqpack prepare --tokenizer", ours, tokens, n, limit),
        row(mapped_name, mapped, tokens, n, limit),
        row("  + prepare --tokens-column", prepared, tokens, n, limit),
        row("  = the datasets route", total, tokens, n, limit),
    ]
    print_table(title, HEADER, rows)
    print(f"prepare --tokenizer: {total.seconds / ours.seconds:.2f}x faster than the route")


def bench_text(folder: Path, tokenizer: Path, n: int) -> None:
    rows = texts(n, seed=0)
    inputs = write_files(folder / "text", pa.table({"text": rows}))
    bare_seconds, tokens = bare_encode_batch(tokenizer, rows)
    limit = tokens / bare_seconds
    ours = prepare_tokenizer(inputs, folder / "text-out", tokenizer, "--text-column", "text")
    assert stored_tokens(folder / "text-out") == tokens, "the store holds other tokens"
    print_against_the_route(
        f"text: {n:,} rows, {tokens:,} tokens ({os.cpu_count()} cores)",
        [row("encode_batch (bare, in memory)", bare_seconds, tokens, n, limit)],
        ours,
        datasets_route(folder, inputs, tokenizer, "text"),
        "datasets.map(num_proc=2) + to_parquet",
        (tokens, n, limit),
    )


def bench_messages(folder: Path, tokenizer: Path, n: int) -> None:
    chats = conversations(n, seed=1)
    inputs = write_files(folder / "chats", pa.table({"messages": chats}))
    ours = prepare_tokenizer(
        inputs, folder / "chats-out", tokenizer, "--messages-column", "messages"
    )
    tokens = stored_tokens(folder / "chats-out")
    print_against_the_route(
        f"chats: {n:,} conversations, {tokens:,} tokens",
        [],
        ours,
        datasets_route(folder, inputs, tokenizer, "messages"),
        "datasets.map(apply_chat_template, 2 procs)",
        (tokens, n, None),
    )


def bench_memory(folder: Path, tokenizer: Path, n: int) -> None:
    table = []
    for size in (n, 4 * n):
        rows = texts(size, seed=2)
        inputs = write_files(folder / f"mem-{size}", pa.table({"text": rows}))
        run = prepare_tokenizer(inputs, folder / f"mem-{size}-out", tokenizer,
                                "--text-column", "text")  # fmt: skip
        table.append([f"{size:,}", f"{run.seconds:.2f}", f"{run.peak_mib:,.0f}"])
        shutil.rmtree(inputs)
    print_table("peak memory of prepare --tokenizer (text)", ["rows", "seconds", "peak MiB"], table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="texts (chats: a fifth)")
    parser.add_argument("--quick", action="store_true", help="20,000 texts, 4,000 chats")
    args = parser.parse_args()
    n = 20_000 if args.quick else args.rows
    with tempfile.TemporaryDirectory(prefix="bench-tokenize-") as tmp:
        folder = Path(tmp)
        tokenizer = build_tokenizer(Path(tempfile.mkdtemp(dir=tmp)))
        bench_text(folder, tokenizer, n)
        bench_messages(folder, tokenizer, max(1, n // 5))
        bench_memory(folder, tokenizer, max(1, n // 4))


if __name__ == "__main__":
    main()

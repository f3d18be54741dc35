"""Cost of the attention-input builders and of collation, on CPU.

Builders: time and memory of the dense bias (bfloat16, causal), cu_seqlens, position ids,
segment ids and the FlexAttention block mask, for B packed rows of L tokens (default B=8,
L=8192: the dense bias alone is B*L*L*2 bytes = 1 GiB). Memory is the output's size and the
process's peak resident memory above its level before the call, sampled every millisecond from
/proc/self/statm by a helper thread (torch's CPU allocations are invisible to tracemalloc).

Collation: rows per second of `PackedCollator` for each format and for two token sources (one
memory-mapped flat array with offsets, and a list of numpy arrays), next to the peer that builds
the same padding-free batch: transformers' `DataCollatorWithFlattening` (with
`return_flash_attn_kwargs=True, return_seq_idx=True`, the keys of `format="hf"`), fed the same
sequences as Python lists (what it takes).

    python benchmarks/bench_masking.py            # B=8, L=8192 (needs ~2 GiB free)
    python benchmarks/bench_masking.py --quick    # B=2, L=2048
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqpack_cli.collate import FlatTokenSource, PackedCollator
from seqpack_cli.masking import (
    build_flex_block_mask,
    build_packing_attention_bias,
    build_packing_cu_seqlens,
    build_position_ids,
    build_segment_ids,
)

PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


class PeakRss:
    """Peak resident memory above the starting level while the block runs (1 ms sampling)."""

    def __enter__(self) -> PeakRss:
        self.base = self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())

    @property
    def delta(self) -> int:
        return self.peak - self.base


def make_lengths(num_rows: int, max_seq_len: int, seed: int = 0) -> tuple[np.ndarray, list]:
    """Lengths from a long-tailed distribution, filled row by row into bins (sequential fill)."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(6.0, 1.0, size=num_rows * max_seq_len // 64), 8, max_seq_len)
    lengths = lengths.astype(np.int64)
    bins: list[list[int]] = [[]]
    used = 0
    for seq_id, n in enumerate(lengths.tolist()):  # setup only, not measured
        if used + n > max_seq_len:
            if len(bins) == num_rows:
                break
            bins.append([])
            used = 0
        bins[-1].append(seq_id)
        used += n
    return lengths, bins


def measure(call: Callable[[], Any], repeats: int) -> tuple[float, int, int]:
    """(median seconds, output bytes, peak RSS delta bytes) of `call`."""
    times, peak, out_bytes = [], 0, 0
    for _ in range(repeats):
        with PeakRss() as rss:
            start = time.perf_counter()
            out = call()
            times.append(time.perf_counter() - start)
        peak = max(peak, rss.delta)
        out_bytes = output_bytes(out)
        del out
    return statistics.median(times), out_bytes, peak


def output_bytes(out: Any) -> int:
    if isinstance(out, torch.Tensor):
        return out.numel() * out.element_size()
    if isinstance(out, tuple):
        return sum(output_bytes(o) for o in out)
    if isinstance(out, dict):
        return sum(output_bytes(o) for o in out.values())
    if not hasattr(out, "__dict__"):
        return 0  # an int such as max_seqlen
    tensors = [v for v in vars(out).values() if isinstance(v, torch.Tensor)]  # BlockMask
    tensors += [t for v in vars(out).values() if isinstance(v, tuple) for t in v]
    return sum(output_bytes(t) for t in tensors if isinstance(t, torch.Tensor))


def bench_builders(num_rows: int, max_seq_len: int, repeats: int) -> None:
    lengths, bins = make_lengths(num_rows, max_seq_len)
    source = [np.zeros(n, dtype=np.int32) for n in lengths.tolist()]
    batch = PackedCollator(source, max_seq_len, 0)(bins)
    ids, mask = batch["sequence_ids"], batch["attention_mask"]
    num_seqs = sum(len(b) for b in bins)
    print(
        f"\nbuilders: B={num_rows}, L={max_seq_len}, {num_seqs} sequences, "
        f"{int(mask.sum())} real tokens, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    cases: list[tuple[str, Callable[[], Any], int]] = [
        ("cu_seqlens (+mask)", lambda: build_packing_cu_seqlens(ids, mask), repeats),
        (
            "cu_seqlens fixed K=256",
            lambda: build_packing_cu_seqlens(ids, mask, max_num_seqs=256),
            repeats,
        ),
        ("position_ids (+mask)", lambda: build_position_ids(ids, mask), repeats),
        ("segment_ids (+mask)", lambda: build_segment_ids(ids, mask), repeats),
        ("flex block mask (causal)", lambda: build_flex_block_mask(ids, causal=True), 1),
        (
            "dense bias bf16 (causal)",
            lambda: build_packing_attention_bias(ids, torch.bfloat16, causal=True),
            1,
        ),
    ]
    print(f"{'builder':<26} {'time ms':>10} {'output MiB':>11} {'peak RSS +MiB':>14}")
    # Warm-up on a small slice: first calls pay one-off imports and tracing (FlexAttention's
    # vmap over the mask_mod), which are not the builders' cost.
    small_ids, small_mask = ids[:1, :256], mask[:1, :256]
    build_flex_block_mask(small_ids, causal=True)
    build_packing_attention_bias(small_ids, torch.bfloat16, causal=True)
    build_packing_cu_seqlens(small_ids, small_mask)
    build_position_ids(small_ids, small_mask)
    for name, call, runs in cases:
        seconds, out_bytes, peak = measure(call, runs)
        print(f"{name:<26} {seconds * 1e3:>10.2f} {out_bytes / MIB:>11.3f} {peak / MIB:>14.1f}")


def bench_collation(num_rows: int, max_seq_len: int, num_batches: int) -> None:
    lengths, bins = make_lengths(num_rows * num_batches, max_seq_len, seed=1)
    rng = np.random.default_rng(2)
    flat = rng.integers(0, 50_000, size=int(lengths.sum()), dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    batches = [bins[i : i + num_rows] for i in range(0, len(bins) - num_rows + 1, num_rows)]
    num_tokens = int(sum(lengths[b].sum() for batch in batches for b in batch))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokens.npy"
        np.save(path, flat)
        sources = {
            "memmap flat+offsets": FlatTokenSource(np.load(path, mmap_mode="r"), offsets),
            "list of numpy arrays": [flat[a:b] for a, b in itertools.pairwise(offsets)],
        }
        print(
            f"\ncollation: {len(batches)} batches of B={num_rows} rows, L={max_seq_len} "
            f"(~{sum(map(len, bins)) / len(bins):.1f} sequences per row)"
        )
        print(f"{'source':<22} {'format':<13} {'rows/s':>10} {'Mtokens/s':>10} {'ms/batch':>9}")
        for source_name, source in sources.items():
            for fmt in ("padded", "padding_free", "hf", "maxtext"):
                collator = PackedCollator(source, max_seq_len, 0, format=fmt)
                for batch_bins in batches:  # warm-up pass: page in the memmap, allocator
                    collator(batch_bins)
                seconds = _timed(collator, batches)
                _collation_row(source_name, fmt, seconds, len(batches), num_rows, num_tokens)

        _bench_hf_peer(batches, flat, offsets, num_rows, num_tokens)


def _bench_hf_peer(
    batches: list, flat: np.ndarray, offsets: np.ndarray, num_rows: int, num_tokens: int
) -> None:
    try:
        from transformers import DataCollatorWithFlattening
    except ImportError:
        print("transformers is not installed: no DataCollatorWithFlattening row")
        return
    peer = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_seq_idx=True)
    # Its input: one dict per sequence, token lists (built outside the timing).
    features = [
        [{"input_ids": flat[offsets[s] : offsets[s + 1]].tolist()} for b in batch for s in b]
        for batch in batches
    ]
    peer(features[0])  # warm-up
    seconds = _timed(peer, features)
    _collation_row(
        "lists (its input)", "HF flattening", seconds, len(batches), num_rows, num_tokens
    )


def _timed(collate: Callable[[Any], Any], batches: list) -> float:
    start = time.perf_counter()
    for batch in batches:
        collate(batch)
    return time.perf_counter() - start


def _collation_row(
    source: str, method: str, seconds: float, num_batches: int, num_rows: int, num_tokens: int
) -> None:
    rows = num_batches * num_rows
    print(
        f"{source:<22} {method:<13} {rows / seconds:>10.0f} "
        f"{num_tokens / seconds / 1e6:>10.1f} {seconds / num_batches * 1e3:>9.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="B=2, L=2048 (seconds)")
    args = parser.parse_args()
    num_rows, max_seq_len = (2, 2048) if args.quick else (8, 8192)
    warnings.filterwarnings("ignore", message=".*flex_attention")
    bench_builders(num_rows, max_seq_len, repeats=5)
    bench_collation(num_rows, max_seq_len, num_batches=10 if args.quick else 50)


if __name__ == "__main__":
    main()

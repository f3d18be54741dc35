"""Online packing: `pack_stream` at several buffer sizes against offline and streaming peers.

For each length distribution of `benchmarks/distributions.py` (the four realistic ones and the
adversarial `bimodal`), the same sequences, in a seeded random arrival order, are packed by:

- `pack_stream` (best-fit decreasing over a bounded buffer) at several `buffer_size`s;
- ms-swift's streaming packer: `binpacking.to_constant_volume` over chunks of `buffer_size`
  items, the last bin of each chunk carried into the next (its `IterablePackingDataset`);
- naive next-fit: concatenate until the next item does not fit (lmms-engine's streaming path);
- the offline histogram packer (`pack_length_histogram_batched`), which sees the whole dataset:
  the ceiling for any streaming packer.

Efficiency is tokens / (bins * max_seq_len); "gap" is bins over the lower bound, minus one; the
lower bound is the larger of ceil(tokens / max_seq_len) and the number of sequences longer than
max_seq_len / 2 (no two of them share a bin). Throughput is items per second through the packer
alone (lengths are plain ints, `length_fn=int`), single-threaded; for the offline packer it is
sequences per second of packing their histogram (the scan that makes it is not counted).

    python benchmarks/bench_streaming.py            # 1,000,000 sequences per distribution
    python benchmarks/bench_streaming.py --quick    # 100,000
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterator

from distributions import DEFAULT_MAX_SEQ_LEN, REALISTIC, expand, make_histogram

from seqpack_cli.packing.histogram import pack_length_histogram_batched
from seqpack_cli.packing.online import pack_stream

DISTRIBUTIONS = (*REALISTIC, "bimodal")  # benchmarks/distributions.py; bimodal is adversarial
BUFFER_SIZES = (64, 256, 1024, 4096, 16384)
# ms-swift's packing_interval is in this range; binpacking costs O(items x bins) per chunk, so a
# 4096 chunk would take minutes per million items.
SWIFT_BUFFER_SIZES = (256, 1024)


def _next_fit(lengths: list[int], max_seq_len: int) -> Iterator[list[int]]:
    current: list[int] = []
    used = 0
    for length in lengths:
        if used + length > max_seq_len:
            yield current
            current, used = [], 0
        current.append(length)
        used += length
    if current:
        yield current


def _swift_chunked(lengths: list[int], max_seq_len: int, buffer_size: int) -> Iterator[list[int]]:
    """ms-swift's IterablePackingDataset: pack each chunk, carry the last bin's items over."""
    import binpacking

    buffer: list[int] = []
    for start in range(0, len(lengths), buffer_size):
        buffer += lengths[start : start + buffer_size]
        bins = binpacking.to_constant_volume(buffer, max_seq_len)
        finished = start + buffer_size >= len(lengths)
        if not finished:
            bins, buffer = bins[:-1], bins[-1]
        yield from bins


def _measure(
    pack: Callable[[], Iterator[list[int]]], max_seq_len: int, tokens: int
) -> tuple[int, float]:
    """(bins, seconds) of one run; the bins are checked afterwards, outside the timing."""
    start = time.perf_counter()
    bins = list(pack())
    seconds = time.perf_counter() - start
    if max(map(sum, bins)) > max_seq_len or sum(map(sum, bins)) != tokens:
        raise AssertionError("a packer lost tokens or overfilled a bin")
    return len(bins), seconds


def _bench(name: str, num: int) -> None:
    """Print the table of one distribution."""
    max_seq_len = DEFAULT_MAX_SEQ_LEN[name]
    histogram = make_histogram(name, num, max_seq_len)
    lengths = expand(histogram).tolist()
    tokens = sum(lengths)
    # No two sequences longer than max_seq_len / 2 share a bin, whatever the packer.
    num_over_half = sum(count for length, count in histogram.items() if 2 * length > max_seq_len)
    lower_bound = max(math.ceil(tokens / max_seq_len), num_over_half)
    print(
        f"\n{name}, max_seq_len={max_seq_len}: {tokens:,} tokens, lower bound {lower_bound:,} bins"
    )
    header = (
        f"{'packer':<30} {'buffer':>7} {'bins':>9} {'efficiency':>10} {'gap':>7} {'items/s':>11}"
    )
    print(header)
    print("-" * len(header))

    def row(packer: str, buffer: str, num_bins: int, seconds: float) -> None:
        efficiency = tokens / (num_bins * max_seq_len)
        gap = num_bins / lower_bound - 1
        rate = len(lengths) / seconds if seconds > 0 else float("inf")
        print(
            f"{packer:<30} {buffer:>7} {num_bins:>9,} {efficiency:>10.2%} {gap:>7.2%} "
            f"{rate:>11,.0f}"
        )

    # The offline packer works from the histogram (prepare gets it from one SQL scan).
    start = time.perf_counter()
    templates = pack_length_histogram_batched(histogram, max_seq_len)
    row("offline histogram (BFD)", "all", sum(templates.values()), time.perf_counter() - start)
    for size in BUFFER_SIZES:
        num_bins, seconds = _measure(
            lambda b=size: pack_stream(lengths, max_seq_len, length_fn=int, buffer_size=b),
            max_seq_len,
            tokens,
        )
        row("pack_stream (bounded BFD)", f"{size:,}", num_bins, seconds)
    for size in SWIFT_BUFFER_SIZES:
        num_bins, seconds = _measure(
            lambda b=size: _swift_chunked(lengths, max_seq_len, b), max_seq_len, tokens
        )
        row("ms-swift chunked binpacking", f"{size:,}", num_bins, seconds)
    num_bins, seconds = _measure(lambda: _next_fit(lengths, max_seq_len), max_seq_len, tokens)
    row("next-fit (lmms-engine)", "1 bin", num_bins, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 sequences per distribution")
    args = parser.parse_args()
    num = 100_000 if args.quick else 1_000_000
    print(f"pack_stream vs peers: {num:,} sequences per distribution (arrival order shuffled)")
    for name in DISTRIBUTIONS:
        _bench(name, num)


if __name__ == "__main__":
    main()

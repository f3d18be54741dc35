"""Seeded length distributions for the packing benchmark, as histograms for any N (up to 1e9+).

Each generator returns `{length: count}` with `num_sequences` sequences, every length in
[1, max_seq_len]. No generator materialises N lengths: a distribution's pmf over 1..max_seq_len
is estimated once from a fixed sample of `_PMF_SAMPLES` draws (seeded), then the counts are one
multinomial draw of N from that pmf. `expand` turns a histogram into a shuffled flat array for the
per-sequence packers (only sensible up to ~1e7).

Realistic shapes (generated to resemble them; parameters in tokens):
- `sft`: instruction tuning: prompt (lognormal, median 120) + response (lognormal, median 280).
- `chat`: multi-turn chat: 1 + geometric(0.35) turns of lognormal(median 220) tokens each,
  truncated at max_seq_len (default 4096), so a spike at the cap.
- `code`: source files: wide lognormal (median 600, sigma 1.3), truncated at the cap.
- `web_split`: web documents (lognormal, median 900, sigma 1.2) split into max_seq_len chunks
  (default 2048): full chunks of exactly the cap plus one remainder chunk per document.
Adversarial shapes:
- `uniform`: every length 1..max_seq_len equally likely.
- `bimodal`: half the sequences above max_seq_len/2 (uniform), half short (lognormal, cap/16).
- `third_plus_one`: 60% of exactly max_seq_len//3 + 1 (only two fit in a bin), the rest uniform
  below max_seq_len/3.
- `power_law`: P(length) proportional to length^-1.1 (many tiny, a long tail).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

__all__ = ["DEFAULT_MAX_SEQ_LEN", "DISTRIBUTIONS", "REALISTIC", "expand", "make_histogram"]

_PMF_SAMPLES = 2_000_000

Sampler = Callable[[np.random.Generator, int, int], np.ndarray]


def _lognormal(rng: np.random.Generator, median: float, sigma: float, size: int) -> np.ndarray:
    return rng.lognormal(np.log(median), sigma, size)


def _sft(rng: np.random.Generator, size: int, cap: int) -> np.ndarray:
    prompt = _lognormal(rng, 120, 0.9, size)
    response = _lognormal(rng, 280, 1.0, size)
    return np.minimum(np.ceil(prompt + response), cap)


def _chat(rng: np.random.Generator, size: int, cap: int) -> np.ndarray:
    turns = rng.geometric(0.35, size)  # 1, 2, ... turns
    # the sum of `turns` lognormal turns, drawn turn by turn up to the largest count
    total = np.zeros(size)
    for turn in range(1, int(turns.max()) + 1):
        active = turns >= turn
        total[active] += _lognormal(rng, 220, 0.8, int(active.sum()))
    return np.minimum(np.ceil(total), cap)


def _code(rng: np.random.Generator, size: int, cap: int) -> np.ndarray:
    return np.minimum(np.ceil(_lognormal(rng, 600, 1.3, size)), cap)


def _web_split(rng: np.random.Generator, size: int, cap: int) -> np.ndarray:
    docs = np.ceil(_lognormal(rng, 900, 1.2, size)).astype(np.int64)
    full_chunks = docs // cap
    remainders = docs % cap
    # every chunk of every document: the pmf only needs the proportions
    return np.concatenate((np.full(int(full_chunks.sum()), cap), remainders[remainders > 0]))


def _uniform(rng: np.random.Generator, size: int, cap: int) -> np.ndarray:
    return rng.integers(1, cap + 1, size)


def _bimodal(rng: np.random.Generator, size: int, cap: int) -> np.ndarray:
    long = rng.integers(cap // 2 + 1, cap + 1, size // 2)
    short = np.minimum(np.ceil(_lognormal(rng, cap / 16, 0.8, size - size // 2)), cap // 2)
    return np.concatenate((long, short))


def _third_plus_one(rng: np.random.Generator, size: int, cap: int) -> np.ndarray:
    num_spike = int(size * 0.6)
    spike = np.full(num_spike, cap // 3 + 1)
    rest = rng.integers(1, max(cap // 3, 1) + 1, size - num_spike)
    return np.concatenate((spike, rest))


def _power_law(rng: np.random.Generator, size: int, cap: int) -> np.ndarray:
    support = np.arange(1, cap + 1)
    weights = support**-1.1
    return rng.choice(support, size, p=weights / weights.sum())


DISTRIBUTIONS: dict[str, Sampler] = {
    "sft": _sft,
    "chat": _chat,
    "code": _code,
    "web_split": _web_split,
    "uniform": _uniform,
    "bimodal": _bimodal,
    "third_plus_one": _third_plus_one,
    "power_law": _power_law,
}
REALISTIC = ("sft", "chat", "code", "web_split")
DEFAULT_MAX_SEQ_LEN = {
    "sft": 2048,
    "chat": 4096,
    "code": 8192,
    "web_split": 2048,
    "uniform": 4096,
    "bimodal": 4096,
    "third_plus_one": 4096,
    "power_law": 8192,
}


@lru_cache(maxsize=64)
def _pmf(name: str, max_seq_len: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 1])
    sample = DISTRIBUTIONS[name](rng, _PMF_SAMPLES, max_seq_len).astype(np.int64)
    sample = np.clip(sample, 1, max_seq_len)
    counts = np.bincount(sample, minlength=max_seq_len + 1)[1:].astype(np.float64)
    return counts / counts.sum()


def make_histogram(
    name: str, num_sequences: int, max_seq_len: int | None = None, seed: int = 0
) -> dict[int, int]:
    """`{length: count}` of `num_sequences` draws from distribution `name` (seeded)."""
    max_seq_len = max_seq_len or DEFAULT_MAX_SEQ_LEN[name]
    pmf = _pmf(name, max_seq_len, seed)
    counts = np.random.default_rng([seed, 2, num_sequences]).multinomial(num_sequences, pmf)
    lengths = np.flatnonzero(counts) + 1
    return dict(zip(lengths.tolist(), counts[lengths - 1].tolist(), strict=True))


def expand(histogram: dict[int, int], seed: int = 0) -> np.ndarray:
    """The histogram as a flat int64 array of lengths in a seeded random order."""
    lengths = np.repeat(
        np.fromiter(histogram.keys(), dtype=np.int64, count=len(histogram)),
        np.fromiter(histogram.values(), dtype=np.int64, count=len(histogram)),
    )
    return np.random.default_rng([seed, 3]).permutation(lengths)

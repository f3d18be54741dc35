"""Step time of data-parallel training with and without balanced steps, W ranks emulated on one GPU.

In data parallelism every rank waits for the slowest at each step, so a step lasts as long as the
most expensive rank's micro-batch. This benchmark trains a random-init `LlamaForCausalLM` (bf16,
`attn_implementation="seqpack_varlen"`) on packed rows of a long-context length mix and, for each
step of the plan, runs every rank's batch in turn on the one GPU, timing each rank's forward and
backward with CUDA events. The emulated step time is the maximum over the ranks (what W GPUs would
wait for); the mean over the ranks is what perfectly balanced ranks would take. Both plans, today's
(`balance=None`) and `balance="cost"` with `cost_per_token(config)`, deal the same epoch: the same
templates, pools and seed.

Printed per plan: mean emulated step time, mean rank time, their ratio (the time lost waiting),
the cost model's predicted max/mean, and the speed-up of the balanced plan. Tokens are random
(speed does not depend on their values); the optimizer step is left out (the same on every rank).

Measured on one NVIDIA H200 (torch 2.11, transformers 5.17), defaults (code lengths at 32,768,
60,000 sequences, W=8, window 256): one row per rank, step 0.374 s -> 0.206 s (1.81x; slowest over
mean rank 1.644 -> 1.009, predicted 1.666 -> 1.002); two rows per rank, 0.664 s -> 0.372 s (1.79x).

    python benchmarks/bench_balance_training.py                   # CUDA: code lengths, L=32768, W=8
    python benchmarks/bench_balance_training.py --smoke           # tiny model on CPU (tests run it)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # distributions

import distributions

from seqpack_cli.collate import PackedCollator
from seqpack_cli.epoch import EpochPlan
from seqpack_cli.epoch.dealing import DEFAULT_BALANCE_WINDOW
from seqpack_cli.packing import pack_length_histogram_batched

MODEL = {  # ~0.3B parameters: attention dominates at 32k-token rows
    "cuda": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 12,
             "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 32_000},
    "smoke": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128},
}  # fmt: skip


@dataclass
class Timing:
    balance: str
    step_s: float  # mean over steps of the slowest rank's time
    rank_s: float  # mean over steps and ranks
    predicted: float  # mean over steps of the cost model's max/mean
    real_tokens: int


class RandomTokens:
    """A token source of random ids with the given lengths (no token is stored)."""

    def __init__(self, lengths: np.ndarray, vocab_size: int) -> None:
        self.lengths, self.vocab_size = lengths, vocab_size

    def take_sequences(self, seq_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lengths = self.lengths[seq_ids]
        rng = np.random.default_rng(int(seq_ids[0]) if len(seq_ids) else 0)
        return rng.integers(1, self.vocab_size, int(lengths.sum())), lengths


def workload(args: argparse.Namespace) -> tuple[Any, dict[int, np.ndarray], np.ndarray]:
    """(templates, pools, length of each id) of `args.num_sequences` lengths of `--distribution`."""
    histogram = distributions.make_histogram(
        args.distribution, args.num_sequences, args.max_seq_len, seed=0
    )
    templates = pack_length_histogram_batched(histogram, args.max_seq_len)
    pools, lengths, first = {}, [], 0
    for length in sorted(histogram):
        pools[length] = np.arange(first, first + histogram[length])
        lengths.append(np.full(histogram[length], length))
        first += histogram[length]
    return templates, pools, np.concatenate(lengths)


def build_model(args: argparse.Namespace, device: Any, dtype: Any) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from seqpack_cli.hf import register_attention

    config = LlamaConfig(
        **MODEL["smoke" if args.smoke else "cuda"],
        max_position_embeddings=args.max_seq_len,
        attn_implementation=register_attention(),
        use_cache=False,
    )
    torch.manual_seed(0)
    with torch.device(device):
        return LlamaForCausalLM(config).to(dtype).train()


def cost_per_token_of(config: Any) -> float:
    from seqpack_cli.hf import cost_per_token

    return float(cost_per_token(config))


def time_plan(
    model: Any, plans: list[EpochPlan], collator: PackedCollator, args: argparse.Namespace
) -> tuple[float, float, int]:
    """(mean slowest-rank time, mean rank time, real tokens) over the timed steps."""
    import torch

    cuda = torch.cuda.is_available() and not args.smoke
    device = "cuda" if cuda else "cpu"
    slowest, mean, tokens = [], [], 0
    steps = range(min(args.warmup + args.steps, plans[0].num_steps))
    for s in steps:
        times = []
        for plan in plans:
            batch = collator(plan.step(s))
            inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
                start.record()
            began = time.perf_counter()
            model(**inputs).loss.backward()
            if cuda:
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                times.append(time.perf_counter() - began)
            if s >= args.warmup:
                tokens += int((batch["labels"] != -100).sum())
        model.zero_grad(set_to_none=True)
        if s >= args.warmup:
            slowest.append(max(times))
            mean.append(sum(times) / len(times))
    return float(np.mean(slowest)), float(np.mean(mean)), tokens


def run(args: argparse.Namespace) -> list[Timing]:
    import torch

    cuda = torch.cuda.is_available() and not args.smoke
    model = build_model(args, "cuda" if cuda else "cpu", torch.bfloat16 if cuda else torch.float32)
    c = cost_per_token_of(model.config)
    templates, pools, lengths = workload(args)
    collator = PackedCollator(
        RandomTokens(lengths, model.config.vocab_size), args.max_seq_len, 0, format="hf"
    )
    timings = []
    for balance in (None, "cost"):
        plans = [
            EpochPlan(templates, pools, args.seed, rank=r, world_size=args.world_size,
                      rows_per_rank=args.rows_per_rank, balance=balance, cost_per_token=c,
                      balance_window=args.balance_window)
            for r in range(args.world_size)
        ]  # fmt: skip
        last = min(args.warmup + args.steps, plans[0].num_steps)
        costs = plans[0].step_costs(args.warmup, last)
        predicted = float((costs.max(1) / costs.mean(1)).mean())
        step_s, rank_s, tokens = time_plan(model, plans, collator, args)
        timings.append(Timing(str(balance), step_s, rank_s, predicted, tokens))
    return timings


def render(timings: list[Timing], args: argparse.Namespace) -> str:
    lines = [
        f"{args.distribution} lengths, {args.num_sequences:,} sequences, L={args.max_seq_len}, "
        f"W={args.world_size} emulated ranks x {args.rows_per_rank} rows, window "
        f"{args.balance_window}, {args.steps} timed steps after {args.warmup}",
        f"{'balance':8} {'step s (max rank)':>18} {'mean rank s':>12} {'max/mean':>9} "
        f"{'predicted':>9} {'tokens/s':>12}",
    ]
    for t in timings:
        lines.append(
            f"{t.balance:8} {t.step_s:18.4f} {t.rank_s:12.4f} {t.step_s / t.rank_s:9.3f} "
            f"{t.predicted:9.3f} {t.real_tokens / (t.step_s * args.steps):12,.0f}"
        )
    lines.append(f"balanced step time: {timings[0].step_s / timings[1].step_s:.3f}x faster")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--distribution", default="code", choices=sorted(distributions.DISTRIBUTIONS)
    )
    parser.add_argument("--num-sequences", type=int, default=60_000)
    parser.add_argument("--max-seq-len", type=int, default=32_768)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--rows-per-rank", type=int, default=1)
    parser.add_argument("--balance-window", type=int, default=DEFAULT_BALANCE_WINDOW)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="a tiny model on CPU, seconds")
    args = parser.parse_args(argv)
    if args.smoke:
        args.num_sequences, args.max_seq_len, args.world_size = 2_000, 256, 4
        args.steps, args.warmup, args.balance_window = 3, 1, 4
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    timings = run(args)
    print(render(timings, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

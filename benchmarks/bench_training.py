"""Real training steps: padded batches against seqpack's packed batches, one attention each.

Trains a random-init `LlamaForCausalLM` (bf16, AdamW) for a few steps per method, all in one run,
from one initial state, and prints real tokens/s (tokens of sequences, padding excluded), the
ratio to padded random batches, step time, real tokens per step, slot fill (real tokens over the
positions the step computes on), peak GPU memory and the warm-up time (FlexAttention's compile
lands there). The methods (`--methods`, all by default), B = `--rows-per-step`, L =
`--max-seq-len`:

    padded_random          padded to the longest of B, random order (DataCollatorWithPadding)  sdpa
    group_by_length        padded, HF group_by_length (get_length_grouped_indices, B)          sdpa
    token_budget           padded, token-budget buckets (B x longest <= B*L, fairseq-style)    sdpa
    hf_sdpa                seqpack format="hf": position_ids, no mask (transformers then
                           builds a dense total x total mask)                                  sdpa
    bias                   seqpack format="padded" + build_packing_attention_bias (causal)     sdpa
    flex                   seqpack format="padded" + build_flex_block_mask                     flex
    varlen_direct          seqpack format="hf" + a hand-written attention calling
                           torch.nn.attention.varlen.varlen_attn directly (the reference)
    seqpack_varlen         seqpack format="hf" + attn_implementation="seqpack_varlen"
    seqpack_varlen_static  the same with PackedCollator(pad_to=B*L): one shape every step

Padded rows hold one sequence each, right-padded with an `attention_mask` (the tensors
`DataCollatorWithPadding` gives, built here by `PackedCollator` with one sequence per row, labels
-100 on padding). Packed rows come from the project's own path: lengths -> histogram packer ->
`EpochPlan` (seeded) -> `PackedCollator`, B bins per step. The padded methods draw their steps at
random from the whole epoch's batches (group_by_length puts its longest batch first, and its
batches run long to short within a megabatch). Batches are collated and pinned before timing, as
a DataLoader with workers would have them ready; moving them to the GPU and building the bias
or block mask from `sequence_ids` there are part of each timed step. `torch.cuda.synchronize`
brackets the timed steps; the peak is `torch.cuda.max_memory_allocated`, reset per method (it
includes the weights and AdamW's state). A method that runs out of memory is an `OOM` row; one
that fails otherwise is a `failed:` row and the exit status is 1. The defaults (3 warm-up + 8
timed steps per method) are sized for about 5 minutes of a 1b run on an H100.

Lengths: `--distribution` draws `--num-sequences` lengths from a bench case
(`distributions.py`; its `chat` has mean ~860 at L = 4096, not the mean 250 of issue 22's real
chat data), or `--prepared DIR` draws them from a prepared directory's length counts (lengths
over L are cut to L). Tokens are random; speed does not depend on their values. Only torch,
transformers, numpy and the runtime part of seqpack are imported (no duckdb, polars, typer, rich).

    python benchmarks/bench_training.py                      # CUDA: 1b, chat, L=4096, B=8
    python benchmarks/bench_training.py --model-size small --methods bias,flex,seqpack_varlen
    python benchmarks/bench_training.py --prepared prepared/ --json runs.jsonl
    python benchmarks/bench_training.py --smoke              # tiny model on CPU (the tests run it)
"""

from __future__ import annotations

import argparse
import functools
import gc
import inspect
import json
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # distributions

import distributions

from seqpack_cli.collate import FlatTokenSource, PackedCollator
from seqpack_cli.epoch import EpochPlan
from seqpack_cli.errors import SeqpackError
from seqpack_cli.masking import build_flex_block_mask, build_packing_attention_bias
from seqpack_cli.packing import length_histogram_from_lengths, pack_length_histogram_batched

logger = logging.getLogger("bench_training")

PROG = "bench_training.py"
GIB = 1 << 30
LABEL_PAD_ID = -100
PAD_TOKEN_ID = 0
VARLEN_DIRECT = "bench_varlen_direct"  # the hand-written reference's attn_implementation name

MODEL_SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=176,
        vocab_size=512,
    ),
    "small": dict(
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=2048,
        vocab_size=32000,
    ),
    "1b": dict(
        hidden_size=2048,
        num_hidden_layers=16,
        num_attention_heads=16,
        intermediate_size=5632,
        vocab_size=32000,
    ),
}


@dataclass(frozen=True)
class Method:
    key: str  # the name --methods takes
    batches: str  # the table's first column
    attention: str  # the table's second column
    cuda_only: str = ""  # why --smoke (CPU) skips it; empty where it runs anywhere


METHODS = (
    Method(
        "padded_random",
        "padded to the longest of B, random order (DataCollatorWithPadding)",
        "sdpa",
    ),
    Method("group_by_length", "padded, HF group_by_length (B rows)", "sdpa"),
    Method("token_budget", "padded, token-budget buckets (B × longest ≤ B·L, fairseq)", "sdpa"),
    Method("hf_sdpa", 'seqpack format="hf" (position_ids, no mask)', "sdpa"),
    Method("bias", 'seqpack format="padded" + build_packing_attention_bias', "sdpa"),
    Method(
        "flex",
        'seqpack format="padded" + build_flex_block_mask',
        "flex_attention",
        cuda_only="flex_attention compiles its kernel (CUDA only in --smoke)",
    ),
    Method(
        "varlen_direct",
        'seqpack format="hf" + hand-written attention calling varlen_attn',
        "varlen (reference)",
        cuda_only="varlen_attn is CUDA-only",
    ),
    Method("seqpack_varlen", 'seqpack format="hf" + seqpack_varlen', "seqpack_varlen"),
    Method(
        "seqpack_varlen_static",
        'seqpack format="hf", pad_to=B·L + seqpack_varlen',
        "seqpack_varlen",
    ),
)
METHOD_KEYS = tuple(m.key for m in METHODS)
PADDED = ("padded_random", "group_by_length", "token_budget")


class UsageError(Exception):
    """A bad option or environment: its message (one line, starting with PROG) on stderr, exit
    status 2."""


@dataclass(frozen=True)
class Workload:
    """The sequences (lengths and random tokens) and their packing plan."""

    lengths: np.ndarray  # int64; sequence i has lengths[i] tokens
    tokens: FlatTokenSource
    plan: EpochPlan
    max_seq_len: int
    rows_per_step: int
    source: str  # where the lengths came from, for the header


@dataclass
class Step:
    batch: dict[str, Any]  # CPU tensors (pinned on CUDA) and ints, as the collator gave them
    real_tokens: int
    slots: int  # positions the step computes on (padding included)


@dataclass
class Result:
    method: Method
    status: str = "ok"  # ok, OOM, skipped: ..., failed: ...
    tokens_per_s: float = 0.0
    step_s: float = 0.0
    real_tokens_per_step: float = 0.0
    slot_fill: float = 0.0
    peak_gib: float | None = None
    warmup_s: float = 0.0
    mean_loss: float = 0.0
    recompiles: int | None = None  # dynamo graphs compiled during the timed steps


# --- lengths, tokens, plan -------------------------------------------------------------------


def sample_lengths(
    histogram: dict[int, int], num_sequences: int, max_seq_len: int, seed: int
) -> np.ndarray:
    """`num_sequences` lengths drawn from `histogram`'s shape (cut to `max_seq_len`), seeded."""
    counts: Counter[int] = Counter()
    for length, count in histogram.items():
        counts[min(int(length), max_seq_len)] += int(count)
    keys = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
    weights = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
    drawn = np.random.default_rng([seed, 4]).multinomial(num_sequences, weights / weights.sum())
    return distributions.expand(dict(zip(keys.tolist(), drawn.tolist(), strict=True)), seed)


def build_workload(
    lengths: np.ndarray,
    max_seq_len: int,
    rows_per_step: int,
    vocab_size: int,
    seed: int,
    source: str,
) -> Workload:
    """Random tokens for `lengths`, their packing into templates and a seeded epoch plan."""
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.random.default_rng([seed, 6]).integers(1, vocab_size, int(offsets[-1]))
    histogram, pools = length_histogram_from_lengths(lengths)
    templates = pack_length_histogram_batched(histogram, max_seq_len)
    plan = EpochPlan(templates, pools, seed=seed)
    return Workload(
        lengths, FlatTokenSource(tokens, offsets), plan, max_seq_len, rows_per_step, source
    )


# --- batches per method ----------------------------------------------------------------------


def random_batches(lengths: np.ndarray, batch_size: int, seed: int) -> list[np.ndarray]:
    """Ids in a seeded random order, `batch_size` at a time (a shuffling DataLoader)."""
    order = np.random.default_rng([seed, 7]).permutation(lengths.shape[0])
    return [order[i : i + batch_size] for i in range(0, order.shape[0], batch_size)]


def length_grouped_batches(lengths: np.ndarray, batch_size: int, seed: int) -> list[np.ndarray]:
    """Hugging Face's `group_by_length` order (its own function), `batch_size` at a time."""
    import torch
    from transformers.trainer_pt_utils import get_length_grouped_indices

    generator = torch.Generator().manual_seed(seed)
    order = np.asarray(
        get_length_grouped_indices(lengths.tolist(), batch_size, generator=generator)
    )
    return [order[i : i + batch_size] for i in range(0, order.shape[0], batch_size)]


def token_budget_batches(lengths: np.ndarray, max_tokens: int, seed: int) -> list[np.ndarray]:
    """fairseq's `batch_by_size` with `max_tokens`: ids by length (ties in random order), cut
    greedily so that rows x longest stays within `max_tokens`; then the batches are shuffled."""
    rng = np.random.default_rng([seed, 8])
    order = np.lexsort((rng.permutation(lengths.shape[0]), lengths))
    batches, start, longest = [], 0, 0
    for i, seq_id in enumerate(order):
        longest_with = max(longest, int(lengths[seq_id]))
        if i > start and longest_with * (i - start + 1) > max_tokens:
            batches.append(order[start:i])
            start, longest_with = i, int(lengths[seq_id])
        longest = longest_with
    batches.append(order[start:])
    return [batches[k] for k in rng.permutation(len(batches))]


def pick(batches: list[np.ndarray], num: int, seed: int, method: str) -> list[np.ndarray]:
    """`num` batches drawn at random from the whole epoch (its order alone would bias them)."""
    if len(batches) < num:
        raise UsageError(
            f"{PROG}: --num-sequences gives {method} {len(batches)} batches, fewer than the {num} "
            "steps (--warmup + --steps); raise --num-sequences"
        )
    chosen = np.random.default_rng([seed, 9]).choice(len(batches), size=num, replace=False)
    return [batches[k] for k in chosen]


def padded_steps(workload: Workload, key: str, num: int, seed: int) -> list[Step]:
    lengths, rows = workload.lengths, workload.rows_per_step
    if key == "padded_random":
        batches = random_batches(lengths, rows, seed)
    elif key == "group_by_length":
        batches = length_grouped_batches(lengths, rows, seed)
    else:
        batches = token_budget_batches(lengths, rows * workload.max_seq_len, seed)
    steps = []
    for ids in pick(batches, num, seed, key):
        longest = int(lengths[ids].max())
        # One sequence per row, right-padded: DataCollatorWithPadding's tensors.
        collate = PackedCollator(workload.tokens, longest, PAD_TOKEN_ID, format="padded")
        batch = collate([[int(i)] for i in ids])
        keep = {k: batch[k] for k in ("input_ids", "attention_mask", "labels")}
        steps.append(Step(keep, int(lengths[ids].sum()), len(ids) * longest))
    return steps


def packed_steps(workload: Workload, key: str, num: int) -> list[Step]:
    rows, max_seq_len = workload.rows_per_step, workload.max_seq_len
    if len(workload.plan) < num * rows:
        raise UsageError(
            f"{PROG}: --num-sequences packs into {len(workload.plan)} bins, fewer than the "
            f"{num * rows} that --warmup + --steps need at --rows-per-step; raise --num-sequences"
        )
    options: dict[str, Any] = {"format": "padded" if key in ("bias", "flex") else "hf"}
    if key == "seqpack_varlen_static":
        options["pad_to"] = rows * max_seq_len
    collate = PackedCollator(workload.tokens, max_seq_len, PAD_TOKEN_ID, **options)
    keys = {
        "hf_sdpa": ("input_ids", "labels", "position_ids"),
        "bias": ("input_ids", "labels", "position_ids", "sequence_ids"),
    }
    keys["flex"] = keys["bias"]
    steps = []
    for k in range(num):
        bins = workload.plan.bins(k * rows, (k + 1) * rows)
        batch = collate(bins)
        batch.pop("seq_idx", None)  # for Mamba-style models; attention never reads it
        if key in keys:
            batch = {name: batch[name] for name in keys[key]}
        real = int(workload.lengths[np.concatenate([np.asarray(b) for b in bins])].sum())
        slots = rows * max_seq_len if options["format"] == "padded" else batch["input_ids"].numel()
        steps.append(Step(batch, real, slots))
    return steps


def model_inputs(key: str, batch: dict[str, Any], device: Any, dtype: Any) -> dict[str, Any]:
    """A step's batch on the device, with the attention mask the method builds there."""
    moved = {
        name: value.to(device, non_blocking=True) if hasattr(value, "to") else value
        for name, value in batch.items()
    }
    if key in ("bias", "flex"):
        sequence_ids = moved.pop("sequence_ids")
        moved["attention_mask"] = (
            build_packing_attention_bias(sequence_ids, dtype=dtype, causal=True)
            if key == "bias"
            else build_flex_block_mask(sequence_ids, causal=True)
        )
    return moved


# --- the hand-written reference: varlen_attn called directly ---------------------------------


@functools.cache
def varlen_parameters() -> frozenset[str]:
    """The names `varlen_attn` takes: they changed between torch versions (looked up once, not in
    every layer's call)."""
    from torch.nn.attention.varlen import varlen_attn

    return frozenset(inspect.signature(varlen_attn).parameters)


def varlen_direct_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, None]:
    """What a user writes by hand: transformers' `[1, heads, T, dim]` in, varlen_attn over the
    batch's `cu_seq_lens_q`, `[1, T, heads, dim]` out. Causal, MHA or GQA, no window."""
    from torch.nn.attention.varlen import varlen_attn

    # [1, heads, T, dim] -> [T, heads, dim]
    query, key, value = (
        t.transpose(1, 2).reshape(-1, t.shape[1], t.shape[3]) for t in (query, key, value)
    )
    params = varlen_parameters()
    options: dict[str, Any] = {"scale": scaling}
    # torch's signature moved from is_causal= to window_size=(left, right)
    options.update({"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True})
    if key.shape[1] != query.shape[1]:
        if "enable_gqa" in params:
            options["enable_gqa"] = True
        else:
            key, value = (
                t.repeat_interleave(query.shape[1] // t.shape[1], 1) for t in (key, value)
            )
    cu_seqlens, max_len = kwargs["cu_seq_lens_q"], kwargs["max_length_q"]
    out: Any = varlen_attn(query, key, value, cu_seqlens, cu_seqlens, max_len, max_len, **options)
    return out.unsqueeze(0), None


def attn_implementation(key: str) -> str:
    """The name to set on the model for a method, registering it with transformers if needed."""
    if key == "flex":
        return "flex_attention"
    if key == "varlen_direct":
        from transformers import AttentionInterface

        AttentionInterface.register(VARLEN_DIRECT, varlen_direct_attention)
        return VARLEN_DIRECT
    if key.startswith("seqpack_varlen"):
        from seqpack_cli.hf import register_attention

        return register_attention()
    return "sdpa"


# --- training --------------------------------------------------------------------------------


def build_model(size: str, max_seq_len: int, device: Any, dtype: Any, seed: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        **MODEL_SIZES[size],
        max_position_embeddings=max_seq_len,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it trains: a 1B model inits in seconds
        return LlamaForCausalLM(config).to(dtype)


def compiled_graphs() -> int | None:
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - every torch with flex_attention has it
        return None
    return int(counters["stats"]["unique_graphs"])


def train(
    model: Any, initial: dict[str, Any], key: str, steps: list[Step], warmup: int, env: Env
) -> Result:
    """Warm-up steps, then the timed ones; every method starts from the same weights."""
    import torch

    result = Result(method=next(m for m in METHODS if m.key == key))
    model.load_state_dict(initial)
    model.set_attn_implementation(attn_implementation(key))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def one_step(step: Step) -> Any:
        inputs = model_inputs(key, step.batch, env.device, env.dtype)
        loss = model(**inputs, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    if env.cuda:
        torch.cuda.reset_peak_memory_stats()
    start = env.synchronized_time()
    for step in steps[:warmup]:
        one_step(step)
    result.warmup_s = env.synchronized_time() - start
    graphs = compiled_graphs()
    start = env.synchronized_time()
    losses = [one_step(step) for step in steps[warmup:]]
    elapsed = env.synchronized_time() - start
    after = compiled_graphs()
    timed = steps[warmup:]
    real = sum(s.real_tokens for s in timed)
    result.tokens_per_s = real / elapsed
    result.step_s = elapsed / len(timed)
    result.real_tokens_per_step = real / len(timed)
    result.slot_fill = real / sum(s.slots for s in timed)
    result.mean_loss = float(torch.stack(losses).float().mean())
    result.recompiles = None if graphs is None or after is None else after - graphs
    if env.cuda:
        result.peak_gib = torch.cuda.max_memory_allocated() / GIB
    return result


@dataclass(frozen=True)
class Env:
    device: Any
    dtype: Any
    cuda: bool

    def synchronized_time(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()


def run_method(
    model: Any, initial: dict[str, Any], method: Method, workload: Workload, args: Any, env: Env
) -> Result:
    """One method's row: its result, or OOM / skipped / failed, memory freed either way."""
    import torch

    if method.cuda_only and not env.cuda:
        return Result(method, status=f"skipped: {method.cuda_only}")
    if (
        method.key == "seqpack_varlen_static"
        and "pad_to" not in inspect.signature(PackedCollator).parameters
    ):
        return Result(method, status="skipped: this PackedCollator has no pad_to")
    out_of_memory = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    num = args.warmup + args.steps
    try:
        if method.key in PADDED:
            steps = padded_steps(workload, method.key, num, args.seed)
        else:
            steps = packed_steps(workload, method.key, num)
        if env.cuda:
            steps = [pinned(step) for step in steps]
        result = train(model, initial, method.key, steps, args.warmup, env)
    except UsageError:
        raise
    except out_of_memory:
        result = Result(method, status="OOM")
    except Exception as error:  # a row that says why, and the other methods still run
        if os.environ.get("SEQPACK_DEBUG") == "1":
            logger.exception("%s failed", method.key)
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        # some kernels (cuBLAS, cuDNN) report running out of memory as a plain RuntimeError
        oom = "out of memory" in reason.lower()
        result = Result(method, status="OOM" if oom else f"failed: {reason[:300]}")
    # The exception (and its frames' tensors) is gone here, so the memory really is free.
    model.zero_grad(set_to_none=True)
    gc.collect()
    if env.cuda:
        torch.cuda.empty_cache()
    return result


def pinned(step: Step) -> Step:
    batch = {k: v.pin_memory() if hasattr(v, "pin_memory") else v for k, v in step.batch.items()}
    return Step(batch, step.real_tokens, step.slots)


# --- report ----------------------------------------------------------------------------------


def ratio(results: dict[str, Result], top: str, bottom: str) -> float | None:
    a, b = results.get(top), results.get(bottom)
    if a is None or b is None or a.status != "ok" or b.status != "ok":
        return None
    return a.tokens_per_s / b.tokens_per_s


# issue 22's targets for seqpack_varlen (CUDA, 1b, chat, L = 4096, B = 8)
TARGETS = (
    ("seqpack_varlen", "varlen_direct", 0.97),
    ("seqpack_varlen", "token_budget", 1.3),
    ("seqpack_varlen", "padded_random", 10.0),
)


def render(results: dict[str, Result], header: str) -> str:
    lines = [
        header,
        "",
        "| batches | attention | real tokens/s | vs padded (random) | step ms | real tokens/step "
        "| slot fill | peak GiB | warm-up s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, r in results.items():
        m = r.method
        if r.status != "ok":
            lines.append(f"| {m.batches} | {m.attention} | {r.status} | | | | | | |")
            continue
        vs = ratio(results, key, "padded_random")
        recompiled = f" ({r.recompiles} recompiles timed)" if r.recompiles else ""
        lines.append(
            f"| {m.batches} | {m.attention} | {r.tokens_per_s:,.0f}{recompiled} | "
            f"{'' if vs is None else f'{vs:.1f}×'} | {r.step_s * 1e3:,.1f} | "
            f"{r.real_tokens_per_step:,.0f} | {r.slot_fill:.1%} | "
            f"{'n/a' if r.peak_gib is None else f'{r.peak_gib:.1f}'} | {r.warmup_s:.1f} |"
        )
    targets = []
    for top, bottom, target in TARGETS:
        value = ratio(results, top, bottom)
        if value is not None:
            targets.append(f"{top} / {bottom} = {value:.2f}× (issue 22 target ≥ {target}×)")
    if targets:
        lines += ["", "; ".join(targets)]
    return "\n".join(lines)


def as_json(results: dict[str, Result], config: dict[str, Any]) -> str:
    rows = []
    for key, r in results.items():
        rows.append(
            {
                "method": key,
                "batches": r.method.batches,
                "attention": r.method.attention,
                "status": r.status,
                "tokens_per_s": r.tokens_per_s,
                "vs_padded_random": ratio(results, key, "padded_random"),
                "step_s": r.step_s,
                "real_tokens_per_step": r.real_tokens_per_step,
                "slot_fill": r.slot_fill,
                "peak_gib": r.peak_gib,
                "warmup_s": r.warmup_s,
                "mean_loss": r.mean_loss,
                "recompiles_timed": r.recompiles,
            }
        )
    return json.dumps({"config": config, "methods": rows})


# --- command line ----------------------------------------------------------------------------


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line (the option, the bad value, the fix), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: {message}; see --help\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def non_negative_int(text: str) -> int:
    return 0 if text.strip() == "0" else positive_int(text)


def method_list(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in METHOD_KEYS]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(
            f"{text!r} names no method or an unknown one; choose from {','.join(METHOD_KEYS)}"
        )
    return keys


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--smoke", action="store_true", help="tiny model on CPU, a few steps (what tests run)")
    add("--model-size", choices=tuple(MODEL_SIZES), default=None, help="default 1b (tiny: smoke)")
    add("--max-seq-len", type=positive_int, default=None, help="L (default 4096; smoke 256)")
    add("--rows-per-step", type=positive_int, default=None, help="B (default 8; smoke 2)")
    add("--distribution", choices=tuple(distributions.DISTRIBUTIONS), default=None,
        help="bench case the lengths come from (default chat; smoke power_law)")  # fmt: skip
    add("--prepared", type=Path, default=None, help="draw lengths from this prepared directory")
    add("--num-sequences", type=positive_int, default=None, help="default 20000 (smoke 600)")
    add("--steps", type=positive_int, default=None, help="timed steps per method (default 8)")
    add("--warmup", type=non_negative_int, default=None, help="untimed steps first (default 3)")
    add("--methods", type=method_list, default=list(METHOD_KEYS), help=",".join(METHOD_KEYS))
    add("--seed", type=non_negative_int, default=0)
    add("--json", type=Path, default=None, help="append the results as one JSON line to PATH")
    args = parser.parse_args(argv)
    smoke = args.smoke
    defaults = {
        "model_size": "tiny" if smoke else "1b",
        "max_seq_len": 256 if smoke else 4096,
        "rows_per_step": 2 if smoke else 8,
        "distribution": "power_law" if smoke else "chat",
        "num_sequences": 600 if smoke else 20_000,
        "steps": 2 if smoke else 8,
        "warmup": 1 if smoke else 3,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if smoke and args.model_size != "tiny":
        parser.error(f"--model-size {args.model_size} with --smoke, which trains tiny on CPU")
    if args.prepared is not None and args.distribution != defaults["distribution"]:
        parser.error("--prepared and --distribution both name the lengths; pass one")
    return args


def load_lengths(args: argparse.Namespace) -> tuple[np.ndarray, str]:
    if args.prepared is None:
        histogram = distributions.make_histogram(
            args.distribution, args.num_sequences, args.max_seq_len, seed=args.seed
        )
        return distributions.expand(histogram, args.seed), f"{args.distribution} (bench case)"
    from seqpack_cli.prepared import load_prepared

    prepared = load_prepared(args.prepared)
    lengths = sample_lengths(prepared.counts, args.num_sequences, args.max_seq_len, args.seed)
    return lengths, f"prepared {args.prepared}"


def environment(smoke: bool) -> Env:
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as error:
        raise UsageError(
            f"{PROG} needs torch and transformers ({error}); "
            "pip install 'seqpack-cli[torch]' transformers"
        ) from error
    if smoke:
        return Env(torch.device("cpu"), torch.float32, cuda=False)
    if not torch.cuda.is_available():
        raise UsageError(
            f"{PROG} needs a CUDA GPU (torch {torch.__version__} sees none); use --smoke for "
            "the CPU configuration"
        )
    return Env(torch.device("cuda"), torch.bfloat16, cuda=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        env = environment(args.smoke)
        lengths, source = load_lengths(args)
        return run(args, env, lengths, source)
    except (UsageError, SeqpackError) as error:
        if os.environ.get("SEQPACK_DEBUG") == "1":
            raise
        usage = isinstance(error, UsageError)  # its message already starts with PROG
        print(str(error) if usage else f"{PROG}: {error}", file=sys.stderr)
        return 2 if usage else 1


def run(args: argparse.Namespace, env: Env, lengths: np.ndarray, source: str) -> int:
    import torch
    import transformers

    size = MODEL_SIZES[args.model_size]
    workload = build_workload(
        lengths, args.max_seq_len, args.rows_per_step, size["vocab_size"], args.seed, source
    )
    model = build_model(args.model_size, args.max_seq_len, env.device, env.dtype, args.seed)
    # one initial state for every method, kept off the GPU so it is not in anyone's peak
    initial = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    num_params = sum(p.numel() for p in model.parameters())
    device_name = torch.cuda.get_device_name() if env.cuda else "CPU (--smoke)"
    header = (
        f"bench_training: {device_name}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}; LlamaForCausalLM {args.model_size} "
        f"({num_params / 1e6:,.1f}M parameters: "
        + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in size.items())
        + f"), {str(env.dtype).removeprefix('torch.')}, AdamW; {workload.source}: "
        f"{lengths.shape[0]:,} sequences, mean {lengths.mean():.0f}, max {lengths.max()}; "
        f"L = {args.max_seq_len}, B = {args.rows_per_step} rows per step "
        f"({len(workload.plan):,} packed bins); {args.warmup} warm-up + {args.steps} timed "
        "steps per method"
    )
    results: dict[str, Result] = {}
    for method in METHODS:
        if method.key in args.methods:
            logger.info("running %s", method.key)
            results[method.key] = run_method(model, initial, method, workload, args, env)
    print(render(results, header))
    if args.json is not None:
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        config.update(device=device_name, torch=torch.__version__, parameters=num_params)
        with args.json.open("a") as out:  # one line per run; earlier runs stay
            out.write(as_json(results, config) + "\n")
    return 1 if any(r.status.startswith("failed") for r in results.values()) else 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    sys.exit(main())

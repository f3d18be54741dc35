"""The packed attention inputs on a CUDA GPU: SDPA, compiled FlexAttention, FlashAttention varlen.

Each check packs random per-sequence q, k, v with `PackedCollator`'s layout, runs the kernel
once on the packed rows with the library's attention input, and compares every sequence's output
and the gradients of its q, k, v with the same kernel run on that sequence alone (plain causal).
Skipped without a GPU (and FlashAttention without `flash_attn`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import time
from collections.abc import Iterator

import numpy as np
import pytest
from hf_models import KINDS, tiny_causal_lm

from seqpack_cli.collate import PackedCollator
from seqpack_cli.masking import (
    build_flex_block_mask,
    build_packing_attention_bias,
    build_packing_cu_seqlens,
    build_position_ids,
    build_segment_ids,
)

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

HEADS, HEAD_DIM, MAX_SEQ_LEN = 4, 64, 256
LENGTHS = [100, 37, 119, 256, 1, 64, 90, 33, 128, 7]
BINS = [[0, 1, 2], [3], [4, 5, 6, 7], [8, 9]]  # 256, 256, 188 and 135 tokens


def device() -> torch.device:
    return torch.device("cuda")


def make_batch(fmt: str = "padded", **options: object) -> dict:
    """The collator's output for LENGTHS/BINS (token values do not matter here), on the GPU."""
    source = [list(range(n)) for n in LENGTHS]
    batch = PackedCollator(source, MAX_SEQ_LEN, 0, format=fmt, **options)(BINS)  # type: ignore[arg-type]
    return {k: v.to(device()) if torch.is_tensor(v) else v for k, v in batch.items()}


def make_sequences(dtype: torch.dtype) -> list[tuple[torch.Tensor, ...]]:
    """Per-sequence leaves (q, k, v, upstream gradient), each [n, H, d], in batch order."""
    return sequences_for(BINS, dtype, seed=0)


def alone(sequences: list[tuple[torch.Tensor, ...]]) -> tuple[list, list]:
    """Outputs and q/k/v gradients of each sequence attended on its own (plain causal SDPA).

    Computed in float32 from the same values, so a bfloat16 comparison measures only the packed
    kernel's own rounding.
    """
    outputs, grads = [], []
    for sequence in sequences:
        q, k, v, upstream = (t.detach().float().requires_grad_() for t in sequence)
        out = F.scaled_dot_product_attention(
            *(t.transpose(0, 1)[None] for t in (q, k, v)), is_causal=True
        )[0].transpose(0, 1)
        outputs.append(out.detach())
        grads.append(torch.autograd.grad((out * upstream).sum(), (q, k, v)))
    return outputs, grads


def packed_rows(sequences: list, batch: dict) -> tuple[torch.Tensor, ...]:
    """Scatter the sequences into [B, H, L, d] rows at the collator's real positions."""
    rows, length = batch["input_ids"].shape
    real = batch["attention_mask"].reshape(-1).nonzero().squeeze(1)
    packed = []
    for j in range(3):
        flat = torch.cat([s[j] for s in sequences])  # [total, H, d], row-major order
        grid = flat.new_zeros(rows * length, HEADS, HEAD_DIM).index_put((real,), flat)
        packed.append(grid.view(rows, length, HEADS, HEAD_DIM).transpose(1, 2))
    return tuple(packed)


def check_against_alone(
    sequences: list, packed_out: torch.Tensor, batch: dict, tolerance: float
) -> None:
    """packed_out [B, H, L, d]: compare each sequence's output and q/k/v grads with alone()."""
    real = batch["attention_mask"].reshape(-1).bool()
    flat_out = packed_out.transpose(1, 2).reshape(-1, HEADS, HEAD_DIM)[real]
    check_flat(sequences, flat_out, batch["cu_seqlens"], tolerance)


def check_flat(
    sequences: list, flat_out: torch.Tensor, cu_seqlens: torch.Tensor, tolerance: float
) -> None:
    expected_out, expected_grads = alone(sequences)
    upstream = torch.cat([s[3] for s in sequences])
    leaves = [t for s in sequences for t in s[:3]]
    got_grads = torch.autograd.grad((flat_out * upstream).sum(), leaves)
    bounds = cu_seqlens.tolist()
    for i, (want_out, want_grads) in enumerate(zip(expected_out, expected_grads, strict=True)):
        got = flat_out[bounds[i] : bounds[i + 1]].float()
        torch.testing.assert_close(got, want_out, atol=tolerance, rtol=tolerance)
        for j in range(3):
            torch.testing.assert_close(
                got_grads[3 * i + j].float(), want_grads[j], atol=tolerance, rtol=tolerance
            )


def test_builders_run_on_the_gpu_and_match_the_cpu() -> None:
    batch = make_batch()
    ids, mask = batch["sequence_ids"], batch["attention_mask"]
    cu_seqlens, max_seqlen = build_packing_cu_seqlens(ids, mask, max_num_seqs=12)
    assert cu_seqlens.device.type == "cuda" and max_seqlen == max(LENGTHS)
    cpu_cu, _ = build_packing_cu_seqlens(ids.cpu(), mask.cpu(), max_num_seqs=12)
    assert torch.equal(cu_seqlens.cpu(), cpu_cu)
    assert torch.equal(build_position_ids(ids, mask).cpu(), batch["position_ids"].cpu())
    assert torch.equal(build_segment_ids(ids, mask).cpu(), build_segment_ids(ids.cpu(), mask.cpu()))
    bias = build_packing_attention_bias(ids, torch.bfloat16, causal=True)
    assert bias.device.type == "cuda" and bias.dtype == torch.bfloat16
    assert torch.equal(
        bias.cpu(), build_packing_attention_bias(ids.cpu(), torch.bfloat16, causal=True)
    )


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
def test_sdpa_with_the_dense_bias(dtype: torch.dtype, tolerance: float) -> None:
    batch = make_batch()
    sequences = make_sequences(dtype)
    q, k, v = packed_rows(sequences, batch)
    bias = build_packing_attention_bias(batch["sequence_ids"], dtype, causal=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    check_against_alone(sequences, out, batch, tolerance)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_compiled_flex_attention_with_the_block_mask() -> None:
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    batch = make_batch()
    sequences = make_sequences(torch.float32)
    q, k, v = packed_rows(sequences, batch)
    block_mask = build_flex_block_mask(batch["sequence_ids"], causal=True)
    assert block_mask.sparsity() > 0  # cross-sequence blocks are skipped, not just masked
    out = torch.compile(flex.flex_attention)(q, k, v, block_mask=block_mask)
    check_against_alone(sequences, out, batch, 2e-5)


@pytest.mark.parametrize("max_num_seqs", [None, 16])
def test_flash_attn_varlen_with_cu_seqlens(max_num_seqs: int | None) -> None:
    flash_attn = pytest.importorskip("flash_attn")
    batch = make_batch("padding_free", max_num_seqs=max_num_seqs)
    sequences = make_sequences(torch.bfloat16)
    q, k, v = (torch.cat([s[j] for s in sequences]) for j in range(3))  # [total, H, d]
    out = flash_attn.flash_attn_varlen_func(
        q,
        k,
        v,
        cu_seqlens_q=batch["cu_seqlens"],
        cu_seqlens_k=batch["cu_seqlens"],
        max_seqlen_q=batch["max_seqlen"],
        max_seqlen_k=batch["max_seqlen"],
        causal=True,
    )
    check_flat(sequences, out, batch["cu_seqlens"], 3e-2)


# ---- FlexAttention on fixed-shape padded rows: one compile, new pairings every batch -------------

SECOND_BINS = [[3], [0, 2], [4, 5, 6, 7], [1, 8, 9]]  # other pairings, the same [4, 256] rows


def sequences_for(bins: list[list[int]], dtype: torch.dtype, seed: int) -> list:
    """Per-sequence leaves (q, k, v, upstream gradient) for `bins`, in batch order."""
    gen = torch.Generator(device=device()).manual_seed(seed)
    return [
        tuple(
            torch.randn(
                LENGTHS[i], HEADS, HEAD_DIM, generator=gen, device=device(), dtype=dtype
            ).requires_grad_(j < 3)
            for j in range(4)
        )
        for b in bins
        for i in b
    ]


def dynamo_compiles() -> tuple[int, int]:
    """Graphs dynamo has made so far, and frames it compiled."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"], counters["frames"]["ok"]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_compiled_flex_attention_does_not_recompile_for_new_pairings() -> None:
    # The documented flex path: format="padded" rows of one shape and build_flex_block_mask. A
    # second batch with other sequences (another block mask, the same shapes) reuses the compiled
    # kernels, forward and backward, and is still exact per sequence.
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    torch._dynamo.reset()
    compiled = torch.compile(flex.flex_attention)
    collator = PackedCollator([list(range(n)) for n in LENGTHS], MAX_SEQ_LEN, 0)
    compiles = []
    for seed, bins in enumerate([BINS, SECOND_BINS, BINS]):
        batch = {k: v.to(device()) if torch.is_tensor(v) else v for k, v in collator(bins).items()}
        sequences = sequences_for(bins, torch.float32, seed)
        q, k, v = packed_rows(sequences, batch)
        block_mask = build_flex_block_mask(batch["sequence_ids"], causal=True)
        out = compiled(q, k, v, block_mask=block_mask)
        check_against_alone(sequences, out, batch, 2e-5)  # runs the backward too
        compiles.append(dynamo_compiles())
    assert compiles[0][0] >= 1  # it did compile
    assert compiles[1] == compiles[0] == compiles[2], compiles


def chat_rows(rng: np.random.Generator, rows: int, max_seq_len: int) -> list[list[int]]:
    """`rows` bins of chat-like lengths (lognormal, mean ~250, at most max_seq_len - 46),
    first fit: what a packed 1B-Llama step holds."""
    bins: list[list[int]] = [[] for _ in range(rows)]
    while True:
        n = int(min(max_seq_len - 46, max(8, rng.lognormal(5.1, 0.9))))
        open_bins = [b for b in bins if sum(b) + n <= max_seq_len]
        if not open_bins:
            return bins
        open_bins[0].append(n)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_flex_block_mask_builds_well_under_a_step() -> None:
    # The 1B Llama of issue 22 (16 layers, 16 heads of 128, bf16) at 8 rows of 4096: building the
    # block mask once per step must cost a small part of the step, and new batches must not
    # recompile. Measured on an H100 (torch 2.11): the build 4.7 ms, the 16 layers' attention
    # alone (forward and backward) 44 ms, the whole training step of that model 527 ms
    # (benchmarks/bench_training.py): bounded here against the attention alone, at a fifth.
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    torch._dynamo.reset()
    compiled = torch.compile(flex.flex_attention)
    rows, length, heads, head_dim, layers = 8, 4096, 16, 128, 16
    rng = np.random.default_rng(0)
    build_s, layer_s, compiles = [], [], []
    for _ in range(6):
        bins = chat_rows(rng, rows, length)
        ids = torch.full((rows, length), 0, dtype=torch.int64)
        for r, b in enumerate(bins):  # sequence ids as PackedCollator numbers them
            ids[r] = torch.repeat_interleave(
                torch.arange(len(b) + 1), torch.tensor([*b, length - sum(b)])
            )
        ids = ids.to(device())
        torch.cuda.synchronize()
        start = time.perf_counter()
        block_mask = build_flex_block_mask(ids, causal=True)
        torch.cuda.synchronize()
        build_s.append(time.perf_counter() - start)
        q, k, v = (
            torch.randn(
                rows, heads, length, head_dim, device=device(), dtype=torch.bfloat16
            ).requires_grad_()
            for _ in range(3)
        )
        torch.cuda.synchronize()
        start = time.perf_counter()
        compiled(q, k, v, block_mask=block_mask).sum().backward()
        torch.cuda.synchronize()
        layer_s.append(time.perf_counter() - start)
        compiles.append(dynamo_compiles())
    build_ms = 1e3 * float(np.median(build_s[1:]))
    attention_ms = 1e3 * layers * float(np.median(layer_s[1:]))
    print(
        f"\nflex, 8 x 4096 chat rows, 16 heads x 128, bf16: build_flex_block_mask "
        f"{build_ms:.2f} ms (median of 5), attention forward+backward x {layers} layers "
        f"{attention_ms:.1f} ms"
    )
    assert len(set(compiles[1:])) == 1, compiles  # no recompile after the first batch
    assert build_ms < 0.2 * attention_ms, (build_ms, attention_ms)


# ---- attn_implementation="seqpack_varlen" (seqpack_cli.hf) on torch's varlen_attn, bfloat16 ----

HF_VOCAB = 256
HF_LENGTHS = [100, 37, 1, 119, 64, 7, 90]  # a one-token sequence too: it predicts nothing
HF_WINDOW = 24  # shorter than most sequences above
HF_MODELS = KINDS


def hf_model(kind: str, attn_implementation: str, dtype: torch.dtype = torch.bfloat16) -> object:
    pytest.importorskip("transformers")
    model = tiny_causal_lm(
        kind,
        attn_implementation,
        window=HF_WINDOW,
        vocab_size=HF_VOCAB,
        hidden_size=256,
        num_attention_heads=8,
        max_position_embeddings=512,
    )
    return model.to(device=device(), dtype=dtype).eval()


def hf_sequences() -> list[list[int]]:
    rng = np.random.default_rng(3)
    return [rng.integers(0, HF_VOCAB, size=n).tolist() for n in HF_LENGTHS]


def hf_token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy in float32: logits at i against labels[i + 1]."""
    return F.cross_entropy(
        logits[0, :-1].float(), labels[0, 1:], reduction="none", ignore_index=-100
    )


def hf_packed(model, inputs: dict, labels: torch.Tensor) -> tuple[list, torch.Tensor]:  # type: ignore[no-untyped-def]
    """The packed row's losses split per sequence, and the gradient of their sum (flattened)."""
    model.zero_grad()
    losses = hf_token_losses(model(**inputs).logits, labels)
    losses.sum().backward()
    bounds = np.cumsum([0, *HF_LENGTHS]).tolist()
    spans = [losses[s : e - 1].detach() for s, e in itertools.pairwise(bounds)]
    return spans, torch.cat([p.grad.float().reshape(-1) for p in model.parameters()])


def hf_alone(model, attn_implementation: str) -> tuple[list, torch.Tensor]:  # type: ignore[no-untyped-def]
    """Each sequence run by itself with `attn_implementation`: losses, and summed gradients."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(attn_implementation)
    model.zero_grad()
    losses = []
    for sequence in hf_sequences():
        ids = torch.tensor([sequence], device=device())
        sequence_losses = hf_token_losses(model(input_ids=ids).logits, ids)
        sequence_losses.sum().backward()
        losses.append(sequence_losses.detach())
    model.set_attn_implementation(previous)
    return losses, torch.cat([p.grad.float().reshape(-1) for p in model.parameters()])


def hf_loss_difference(got: list, expected: list) -> float:
    return max(float((g - e).abs().max()) for g, e in zip(got, expected, strict=True) if e.numel())


def hf_relative(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).norm() / expected.norm())


@contextlib.contextmanager
def hf_counted_varlen_attn() -> Iterator[list[int]]:
    """Count the calls of torch's varlen_attn made by seqpack_varlen (the real kernel runs)."""
    varlen = pytest.importorskip("torch.nn.attention.varlen")
    attention = pytest.importorskip("seqpack_cli.hf.attention")
    calls: list[int] = []
    kernel = varlen.varlen_attn

    @functools.wraps(kernel)  # keeps the signature seqpack_varlen reads
    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return kernel(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(varlen, "varlen_attn", counted)
        attention._varlen_kernel.cache_clear()  # it caches the kernel it found
        try:
            yield calls
        finally:
            attention._varlen_kernel.cache_clear()


def hf_measure(kind: str) -> dict[str, float]:
    """Packed with seqpack_varlen against alone with sdpa, and eager against sdpa alone (the
    reference difference), in bfloat16; also the packed row read as one sequence."""
    hf = pytest.importorskip("seqpack_cli.hf")
    name = hf.register_attention()
    model = hf_model(kind, name)
    sequences = hf_sequences()
    batch = PackedCollator(sequences, sum(HF_LENGTHS), 0, format="hf")(
        [list(range(len(sequences)))]
    )
    batch = {k: v.to(device()) if torch.is_tensor(v) else v for k, v in batch.items()}
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with hf_counted_varlen_attn() as calls:
        packed_losses, packed_grads = hf_packed(model, inputs, batch["labels"])
    assert len(calls) == 2  # one varlen_attn call per layer: the CUDA path ran
    sdpa_losses, sdpa_grads = hf_alone(model, "sdpa")
    eager_losses, eager_grads = hf_alone(model, "eager")
    crossing_losses, _ = hf_packed(model, {"input_ids": batch["input_ids"]}, batch["labels"])
    return {
        "packed_vs_sdpa_loss": hf_loss_difference(packed_losses, sdpa_losses),
        "eager_vs_sdpa_loss": hf_loss_difference(eager_losses, sdpa_losses),
        "one_sequence_vs_sdpa_loss": hf_loss_difference(crossing_losses[1:], sdpa_losses[1:]),
        "packed_vs_sdpa_grad": hf_relative(packed_grads, sdpa_grads),
        "eager_vs_sdpa_grad": hf_relative(eager_grads, sdpa_grads),
    }


@pytest.mark.parametrize("kind", list(HF_MODELS))
def test_seqpack_varlen_scores_every_token_as_alone(kind: str) -> None:
    # Issue 22's target: per-token losses and gradients within the eager-vs-sdpa difference on
    # the same sequences alone (bfloat16 rounding; the floor covers a tiny model where the two
    # happen to agree closely). A row read as one sequence must be far outside it.
    figures = hf_measure(kind)
    assert figures["packed_vs_sdpa_loss"] <= max(figures["eager_vs_sdpa_loss"], 2e-2), figures
    assert figures["packed_vs_sdpa_grad"] <= max(figures["eager_vs_sdpa_grad"], 2e-2), figures
    assert figures["one_sequence_vs_sdpa_loss"] > 10 * max(figures["eager_vs_sdpa_loss"], 2e-2)


def test_seqpack_varlen_refuses_float32_on_cuda() -> None:
    hf = pytest.importorskip("seqpack_cli.hf")
    from seqpack_cli.errors import ConfigError

    model = hf_model("llama", hf.register_attention(), dtype=torch.float32)
    ids = torch.tensor([hf_sequences()[0]], device=device())
    with pytest.raises(ConfigError, match=r"bfloat16 or float16.*torch\.float32") as error:
        model(input_ids=ids)
    assert "\n" not in str(error.value)

"""The packed attention inputs on a CUDA GPU: SDPA, compiled FlexAttention, FlashAttention varlen.

Each check packs random per-sequence q, k, v with `PackedCollator`'s layout, runs the kernel
once on the packed rows with the library's attention input, and compares every sequence's output
and the gradients of its q, k, v with the same kernel run on that sequence alone (plain causal).
Skipped without a GPU (and FlashAttention without `flash_attn`).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

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
    gen = torch.Generator(device=device()).manual_seed(0)
    order = [i for b in BINS for i in b]
    return [
        tuple(
            torch.randn(
                LENGTHS[i], HEADS, HEAD_DIM, generator=gen, device=device(), dtype=dtype
            ).requires_grad_(j < 3)
            for j in range(4)
        )
        for i in order
    ]


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
    # block mask once per step must cost a small part of the step's attention alone (16 layers,
    # forward and backward), and new batches must not recompile.
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
    assert build_ms < 0.1 * attention_ms, (build_ms, attention_ms)

"""The reference's acceptance test: a packed batch trains exactly like its sequences alone.

A tiny causal transformer (random weights, float64: token embedding, positions driven by
`position_ids`, multi-head attention, MLP, LM head) runs on rows built by `PackedCollator`. For
every sequence, the loss on the packed rows equals the loss of that sequence run on its own, and
the gradients of the summed per-sequence losses equal the summed gradients of the sequences run
alone, to 1e-6, whichever attention input carries the packing:
  - the dense bias + causal mask added to the scores in eager attention,
  - the same bias through `torch.nn.functional.scaled_dot_product_attention`,
  - FlexAttention with `build_flex_block_mask` (forward only on CPU: torch has no CPU backward),
  - a varlen reference that loops over `cu_seqlens` (padded rows stripped, and padding-free).
Negative controls: with the causal mask alone (no packing bias), or without position restarts,
the losses differ.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest

from seqpack_cli.collate import PackedCollator
from seqpack_cli.masking import build_flex_block_mask, build_packing_attention_bias

torch = pytest.importorskip("torch")
F = torch.nn.functional

VOCAB, DIM, HEADS, LAYERS, MAX_SEQ_LEN = 29, 16, 2, 2, 16
# Ten sequences, one of a single token (it predicts nothing) and one exactly filling a row.
LENGTHS = [5, 3, 7, 9, 1, 6, 16, 4, 2, 8]
BINS = [[0, 1, 2], [3, 4, 5], [6], [7, 8, 9]]  # 15, 16, 16 and 14 tokens
TOLERANCE = {"atol": 1e-6, "rtol": 0.0}

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def make_sequences() -> list[list[int]]:
    gen = torch.Generator().manual_seed(1234)
    return [torch.randint(0, VOCAB, (n,), generator=gen).tolist() for n in LENGTHS]


def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of `x` [B, H, L, d] at `positions` [B, L] (rotate-half form)."""
    half = x.shape[-1] // 2
    freqs = 1.0 / (10000.0 ** (torch.arange(half, dtype=x.dtype) / half))
    angles = positions.to(x.dtype)[:, None, :, None] * freqs  # [B, 1, L, half]
    cos, sin = angles.cos(), angles.sin()
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


class TinyCausalLM(torch.nn.Module):
    """Pre-norm decoder; `attend(q, k, v)` is the only place the packing enters."""

    def __init__(self, rotary: bool) -> None:
        super().__init__()
        self.rotary = rotary
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.positions = None if rotary else torch.nn.Embedding(MAX_SEQ_LEN * 4, DIM)
        self.blocks = torch.nn.ModuleList()
        for _ in range(LAYERS):
            self.blocks.append(
                torch.nn.ModuleDict(
                    {
                        "norm1": torch.nn.LayerNorm(DIM),
                        "qkv": torch.nn.Linear(DIM, 3 * DIM),
                        "out": torch.nn.Linear(DIM, DIM),
                        "norm2": torch.nn.LayerNorm(DIM),
                        "mlp": torch.nn.Sequential(
                            torch.nn.Linear(DIM, 4 * DIM),
                            torch.nn.GELU(),
                            torch.nn.Linear(4 * DIM, DIM),
                        ),
                    }
                )
            )
        self.norm = torch.nn.LayerNorm(DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, attend: Attend
    ) -> torch.Tensor:
        x = self.embed(input_ids)
        if self.positions is not None:
            x = x + self.positions(position_ids)
        batch, length, _ = x.shape
        for block in self.blocks:
            qkv = block["qkv"](block["norm1"](x)).view(batch, length, 3, HEADS, DIM // HEADS)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each [B, H, L, d]
            if self.rotary:
                q, k = rotate(q, position_ids), rotate(k, position_ids)
            y = attend(q, k, v).transpose(1, 2).reshape(batch, length, DIM)
            x = x + block["out"](y)
            x = x + block["mlp"](block["norm2"](x))
        return self.head(self.norm(x))


def make_model(rotary: bool) -> TinyCausalLM:
    torch.manual_seed(0)
    return TinyCausalLM(rotary).double()


# --- attention backends ------------------------------------------------------------------


def eager(bias: torch.Tensor) -> Attend:
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + bias
        return scores.softmax(dim=-1) @ v

    return attend


def sdpa(bias: torch.Tensor) -> Attend:
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def flex(block_mask: object) -> Attend:
    from torch.nn.attention.flex_attention import flex_attention

    return lambda q, k, v: flex_attention(q, k, v, block_mask=block_mask)


def causal_mask(length: int) -> torch.Tensor:
    return torch.zeros(length, length, dtype=torch.float64).masked_fill_(
        torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf")
    )


def varlen(cu_seqlens: torch.Tensor, attention_mask: torch.Tensor) -> Attend:
    """What a varlen kernel computes: strip padding, causal attention per cu_seqlens span."""
    real = attention_mask.reshape(-1).bool()
    bounds = cu_seqlens.tolist()

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        batch, heads, length, dim = q.shape
        flat = [t.transpose(1, 2).reshape(batch * length, heads, dim)[real] for t in (q, k, v)]
        pieces = []
        for start, stop in itertools.pairwise(bounds):
            if stop == start:
                continue  # fixed-length padding of cu_seqlens: an empty span
            qs, ks, vs = (t[start:stop].transpose(0, 1) for t in flat)  # [H, n, d]
            scores = qs @ ks.transpose(-1, -2) / math.sqrt(dim) + causal_mask(stop - start)
            pieces.append((scores.softmax(-1) @ vs).transpose(0, 1))
        out = q.new_zeros(batch * length, heads, dim)
        out = out.index_put((real.nonzero().squeeze(1),), torch.cat(pieces))
        return out.view(batch, length, heads, dim).transpose(1, 2)

    return attend


# --- losses ------------------------------------------------------------------------------


def packed_losses(
    model: TinyCausalLM, batch: dict, attend: Attend, *, position_ids: torch.Tensor | None = None
) -> dict[int, torch.Tensor]:
    """Per-sequence mean next-token loss on packed rows, keyed by the source sequence id."""
    positions = batch["position_ids"] if position_ids is None else position_ids
    logits = model(batch["input_ids"], positions, attend)
    # HF-style shift: logits at i are scored against labels[i + 1] (and its loss weight).
    token_loss = F.cross_entropy(
        logits[:, :-1].reshape(-1, VOCAB),
        batch["labels"][:, 1:].reshape(-1),
        ignore_index=-100,
        reduction="none",
    ).view(logits.shape[0], -1)
    weighted = token_loss * batch["loss_weights"][:, 1:].double()
    sequence_of = batch["sequence_ids"][:, 1:]
    # Padded rows number sequences within each bin; a padding-free row numbers the whole batch.
    rows = BINS if batch["input_ids"].shape[0] == len(BINS) else [[i for b in BINS for i in b]]
    losses = {}
    for row, seq_ids in enumerate(rows):
        for local_id, seq_id in enumerate(seq_ids):
            if LENGTHS[seq_id] > 1:
                losses[seq_id] = weighted[row][sequence_of[row] == local_id].sum()
    return losses


def alone_losses(model: TinyCausalLM, sequences: list[list[int]]) -> dict[int, torch.Tensor]:
    """Each sequence on its own: one row, positions 0..n-1, plain causal attention."""
    losses = {}
    for seq_id, tokens in enumerate(sequences):
        if len(tokens) < 2:
            continue
        ids = torch.tensor([tokens])
        positions = torch.arange(len(tokens))[None]
        attend = eager(causal_mask(len(tokens)))
        logits = model(ids, positions, attend)
        losses[seq_id] = F.cross_entropy(logits[0, :-1], ids[0, 1:])
    return losses


def grads_of(model: TinyCausalLM, losses: dict[int, torch.Tensor]) -> dict[str, torch.Tensor]:
    model.zero_grad()
    torch.stack(list(losses.values())).sum().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def padded_batch(sequences: list[list[int]]) -> dict:
    collator = PackedCollator(sequences, MAX_SEQ_LEN, 0, return_loss_weights=True)
    return collator(BINS)


def backend(name: str, batch: dict) -> Attend:
    """The attention for `name`, built from the collator's output by the library's builders."""
    ids = batch["sequence_ids"]
    if name == "eager_bias_plus_causal":  # the reference's recipe: bias + its own triangle
        return eager(build_packing_attention_bias(ids, torch.float64) + causal_mask(ids.shape[1]))
    if name == "eager_causal_flag":
        return eager(build_packing_attention_bias(ids, torch.float64, causal=True))
    if name == "sdpa":
        return sdpa(build_packing_attention_bias(ids, torch.float64, causal=True))
    if name == "flex":
        pytest.importorskip("torch.nn.attention.flex_attention")
        return flex(build_flex_block_mask(ids, causal=True))
    if name == "varlen":
        return varlen(batch["cu_seqlens"], batch["attention_mask"])
    raise AssertionError(name)


BACKENDS = ["eager_bias_plus_causal", "eager_causal_flag", "sdpa", "flex", "varlen"]
QUIET_FLEX = pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")


def every_backend(test: Callable[..., None]) -> Callable[..., None]:
    """Run `test(name, rotary)` for every backend, with learned and with rotary positions."""
    test = pytest.mark.parametrize("name", BACKENDS)(test)
    test = pytest.mark.parametrize("rotary", [False, True], ids=["learned_positions", "rotary"])(
        test
    )
    return QUIET_FLEX(test)


@every_backend
def test_packed_losses_equal_alone_losses(name: str, rotary: bool) -> None:
    sequences = make_sequences()
    model = make_model(rotary)
    batch = padded_batch(sequences)
    with torch.no_grad():
        packed = packed_losses(model, batch, backend(name, batch))
        alone = alone_losses(model, sequences)
    assert sorted(packed) == sorted(alone) == [i for i, n in enumerate(LENGTHS) if n > 1]
    for seq_id in alone:
        torch.testing.assert_close(packed[seq_id], alone[seq_id], **TOLERANCE)


@every_backend
def test_packed_gradients_equal_summed_alone_gradients(name: str, rotary: bool) -> None:
    sequences = make_sequences()
    model = make_model(rotary)
    batch = padded_batch(sequences)
    attend = backend(name, batch)
    try:
        packed = grads_of(model, packed_losses(model, batch, attend))
    except NotImplementedError as error:  # FlexAttention has no backward on CPU
        pytest.skip(f"{name}: {error}")
    alone = grads_of(model, alone_losses(model, sequences))
    assert packed.keys() == alone.keys()
    for param, grad in alone.items():
        assert grad.abs().max() > 0, param  # every parameter takes part
        torch.testing.assert_close(packed[param], grad, **TOLERANCE, msg=param)


@pytest.mark.parametrize("rotary", [False, True], ids=["learned_positions", "rotary"])
def test_padding_free_varlen_equals_alone(rotary: bool) -> None:
    # One [1, total] row with no padding at all, attention looping over its cu_seqlens, with
    # cu_seqlens in its fixed-length form (empty spans at the end).
    sequences = make_sequences()
    model = make_model(rotary)
    collator = PackedCollator(
        sequences,
        MAX_SEQ_LEN,
        0,
        format="padding_free",
        return_loss_weights=True,
        max_num_seqs=16,
    )
    batch = collator(BINS)
    assert batch["cu_seqlens"].shape == (17,)
    attend = varlen(batch["cu_seqlens"], torch.ones_like(batch["input_ids"]))
    packed = packed_losses(model, batch, attend)
    alone = alone_losses(model, sequences)
    for seq_id in alone:
        torch.testing.assert_close(packed[seq_id], alone[seq_id], **TOLERANCE)
    packed_grads = grads_of(model, packed)
    for param, grad in grads_of(model, alone).items():
        torch.testing.assert_close(packed_grads[param], grad, **TOLERANCE, msg=param)


def _max_loss_gap(packed: dict[int, torch.Tensor], alone: dict[int, torch.Tensor]) -> float:
    return max(abs(float(packed[i] - alone[i])) for i in alone)


def test_without_the_packing_bias_the_losses_differ() -> None:
    # Negative control: causal mask alone lets later sequences in a row see earlier ones.
    sequences = make_sequences()
    model = make_model(rotary=False)
    batch = padded_batch(sequences)
    with torch.no_grad():
        packed = packed_losses(model, batch, eager(causal_mask(MAX_SEQ_LEN)))
        alone = alone_losses(model, sequences)
    assert _max_loss_gap(packed, alone) > 1e-3
    # Sequences that start their row see nothing else either way, so they still agree.
    for seq_id in (0, 3, 6, 7):
        torch.testing.assert_close(packed[seq_id], alone[seq_id], **TOLERANCE)


def test_without_position_restarts_the_losses_differ() -> None:
    # Negative control: learned positions 0..L-1 across the row instead of per sequence.
    sequences = make_sequences()
    model = make_model(rotary=False)
    batch = padded_batch(sequences)
    row_positions = torch.arange(MAX_SEQ_LEN).expand_as(batch["input_ids"])
    with torch.no_grad():
        packed = packed_losses(model, batch, backend("sdpa", batch), position_ids=row_positions)
        alone = alone_losses(model, sequences)
    assert _max_loss_gap(packed, alone) > 1e-3

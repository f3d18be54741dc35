"""format="hf" against Hugging Face transformers: a packed row scores every token as alone.

A tiny random-init `LlamaForCausalLM` is built from a `LlamaConfig` (nothing is downloaded). Each
test packs sequences of different lengths into one row and compares the per-token cross-entropy
of the packed row with that of each sequence run by itself, for eager and SDPA attention and for
a varlen attention function that only sees the batch's `cu_seq_lens_*` / `max_length_*` (what
flash_attention_2 reads). The counter-tests show what the README warns about: a 2-D attention
mask of ones, or the cache left on, make the packed result differ.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hf_models import tiny_causal_lm
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.collate import CollateOptions, PackedCollator
from seqpack_cli.masking import build_packing_attention_bias

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
F = torch.nn.functional

VOCAB = 128
LENGTHS = [9, 1, 17, 4, 30, 2]  # a one-token sequence too: it predicts nothing
TOLERANCE = 1e-5  # float32: the packed row's matmuls group differently, nothing more
VARLEN = "seqpack_test_varlen"


def _sequences() -> list[list[int]]:
    rng = np.random.default_rng(7)
    return [rng.integers(0, VOCAB, size=n).tolist() for n in LENGTHS]


def _varlen_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, None]:
    """Causal attention within each `[cu_seq_lens_q[k], cu_seq_lens_q[k + 1])` span only.

    Like flash_attention_2's varlen path it gets no mask from transformers (it is not a mask
    implementation), only the boundary kwargs the batch carries; without them it attends over
    the whole row, so a batch whose kwargs never arrived would fail the comparison.
    """
    total = query.shape[2]
    cu_seq_lens = kwargs.get("cu_seq_lens_q")
    bounds = [0, total] if cu_seq_lens is None else cu_seq_lens.tolist()
    if cu_seq_lens is not None:
        assert torch.equal(kwargs["cu_seq_lens_k"], cu_seq_lens)
        assert kwargs["max_length_q"] == kwargs["max_length_k"] == max(np.diff(bounds))
    spans = [
        F.scaled_dot_product_attention(
            query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], is_causal=True, scale=scaling
        )
        for s, e in itertools.pairwise(bounds)
        if e > s
    ]
    return torch.cat(spans, dim=2).transpose(1, 2).contiguous(), None


transformers.AttentionInterface.register(VARLEN, _varlen_attention)


def _model(attn_implementation: str, **config: Any) -> Any:
    model = tiny_causal_lm(
        "llama",
        attn_implementation,
        vocab_size=VOCAB,
        hidden_size=64,
        num_attention_heads=4,
        max_position_embeddings=128,
        **config,
    )
    assert model.config._attn_implementation == attn_implementation
    return model.eval()


def _token_losses(logits: Any, labels: Any) -> Any:
    """Per-token cross-entropy as the model scores it: logits at i against labels[i + 1]."""
    return F.cross_entropy(logits[0, :-1], labels[0, 1:], reduction="none", ignore_index=-100)


def _alone(model: Any, sequences: list[list[int]]) -> list[Any]:
    """Each sequence's per-token losses, run by itself (predictions of tokens 1..n-1)."""
    losses = []
    with torch.no_grad():
        for sequence in sequences:
            ids = torch.tensor([sequence])
            losses.append(_token_losses(model(input_ids=ids).logits, ids))
    return losses


def _packed_spans(losses: Any, cu_seq_lens: list[int]) -> list[Any]:
    """The packed row's losses split per sequence: for [s, e), the predictions of s+1..e-1."""
    return [losses[s : e - 1] for s, e in itertools.pairwise(cu_seq_lens)]


def _max_difference(packed: list[Any], alone: list[Any]) -> float:
    assert [p.shape for p in packed] == [a.shape for a in alone]
    return max(float((p - a).abs().max()) for p, a in zip(packed, alone, strict=True) if a.numel())


@pytest.fixture(scope="module")
def hf_batch() -> dict[str, Any]:
    sequences = _sequences()
    return PackedCollator(sequences, sum(LENGTHS), 0, format="hf")([list(range(len(sequences)))])


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa", VARLEN])
def test_a_packed_row_scores_every_token_as_alone(
    attn_implementation: str, hf_batch: dict[str, Any]
) -> None:
    model = _model(attn_implementation)
    with torch.no_grad():
        output = model(**hf_batch)  # every key of the batch is a model input
    losses = _token_losses(output.logits, hf_batch["labels"])
    cu_seq_lens = hf_batch["cu_seq_lens_q"].tolist()
    alone = _alone(model, _sequences())
    assert _max_difference(_packed_spans(losses, cu_seq_lens), alone) < TOLERANCE
    # The prediction of each next sequence's first token is no target; nothing else is dropped.
    assert (hf_batch["labels"][0, cu_seq_lens[:-1]] == -100).all()
    assert int((hf_batch["labels"] != -100).sum()) == sum(n - 1 for n in LENGTHS)
    # The model's own loss is the mean over exactly these tokens.
    assert float(output.loss) == pytest.approx(float(torch.cat(alone).mean()), abs=TOLERANCE)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_position_ids_alone_are_enough_for_eager_and_sdpa(
    attn_implementation: str, hf_batch: dict[str, Any]
) -> None:
    # transformers builds the block-causal mask from position_ids restarting at 0.
    model = _model(attn_implementation)
    with torch.no_grad():
        logits = model(
            input_ids=hf_batch["input_ids"], position_ids=hf_batch["position_ids"]
        ).logits
    losses = _token_losses(logits, hf_batch["labels"])
    packed = _packed_spans(losses, hf_batch["cu_seq_lens_q"].tolist())
    assert _max_difference(packed, _alone(model, _sequences())) < TOLERANCE


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_the_4d_bias_on_a_padded_row_is_exact(attn_implementation: str) -> None:
    sequences = _sequences()
    batch = PackedCollator(sequences, sum(LENGTHS) + 5, 0)([list(range(len(sequences)))])
    bias = build_packing_attention_bias(batch["sequence_ids"], causal=True)
    model = _model(attn_implementation)
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], position_ids=batch["position_ids"], attention_mask=bias
        ).logits
    losses = _token_losses(logits, batch["labels"])
    cu_seqlens = batch["cu_seqlens"].tolist()
    assert _max_difference(_packed_spans(losses, cu_seqlens), _alone(model, sequences)) < TOLERANCE


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("mistake", ["2-D attention_mask of ones", "use_cache=True"])
def test_what_breaks_packing(
    attn_implementation: str, mistake: str, hf_batch: dict[str, Any]
) -> None:
    # Either one turns off transformers' packed-sequence detection: every sequence after the
    # first attends to the ones before it. (A one-sequence row would be unaffected.)
    if mistake == "use_cache=True":
        model, extra = _model(attn_implementation, use_cache=True), {}
    else:
        model = _model(attn_implementation)
        extra = {"attention_mask": torch.ones_like(hf_batch["input_ids"])}
    with torch.no_grad():
        logits = model(
            input_ids=hf_batch["input_ids"], position_ids=hf_batch["position_ids"], **extra
        ).logits
    packed = _packed_spans(
        _token_losses(logits, hf_batch["labels"]), hf_batch["cu_seq_lens_q"].tolist()
    )
    alone = _alone(model, _sequences())
    assert float((packed[0] - alone[0]).abs().max()) < TOLERANCE  # the first sequence is alone
    assert _max_difference(packed[1:], alone[1:]) > 1e-2


def test_training_mode_gradients_match(hf_batch: dict[str, Any]) -> None:
    # One backward pass over the packed row gives the gradients of the summed per-token losses
    # of the sequences run alone.
    model = _model("sdpa").train()
    labels = hf_batch["labels"]
    model.zero_grad()
    losses = _token_losses(model(**hf_batch).logits, labels)
    losses.sum().backward()
    packed = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for sequence in _sequences():
        ids = torch.tensor([sequence])
        _token_losses(model(input_ids=ids).logits, ids).sum().backward()
    for got, expected in zip(packed, (p.grad for p in model.parameters()), strict=True):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def _hf_flattening(features: list[dict[str, list[int]]]) -> dict[str, Any]:
    collator = transformers.DataCollatorWithFlattening(
        return_flash_attn_kwargs=True, return_seq_idx=True
    )
    return collator(features)


def _assert_same_batch(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert sorted(ours) == sorted(theirs)
    for key, expected in theirs.items():
        got = ours[key]
        if torch.is_tensor(expected):
            assert got.dtype == expected.dtype and got.shape == expected.shape, key
            assert torch.equal(got, expected), key
        else:
            assert type(got) is type(expected) and got == expected, key


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    kind=st.sampled_from(["tokens", "labels", "mask"]),
)
def test_hf_format_equals_data_collator_with_flattening(
    data: st.DataObject, lengths: list[int], kind: str
) -> None:
    sequences = [data.draw(st.lists(st.integers(0, 999), min_size=n, max_size=n)) for n in lengths]
    values = [
        data.draw(
            st.lists(
                st.sampled_from([-100, 5, 6] if kind == "labels" else [0, 1]),
                min_size=n,
                max_size=n,
            )
        )
        for n in lengths
    ]
    bins = [list(range(i, min(i + 3, len(lengths)))) for i in range(0, len(lengths), 3)]
    max_seq_len = max(sum(lengths[i] for i in b) for b in bins)
    if kind == "tokens":
        given, features = {}, [{"input_ids": s} for s in sequences]
    elif kind == "labels":
        given = {"labels_source": values}
        features = [{"input_ids": s, "labels": v} for s, v in zip(sequences, values, strict=True)]
    else:
        given = {"loss_mask_source": values}
        features = [
            {"input_ids": s, "labels": [t if m else -100 for t, m in zip(s, v, strict=True)]}
            for s, v in zip(sequences, values, strict=True)
        ]
    ours = PackedCollator(sequences, max_seq_len, 0, format="hf", **given)(bins)
    _assert_same_batch(ours, _hf_flattening(features))


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa", VARLEN])
def test_pad_to_gives_the_same_loss_and_gradients(attn_implementation: str) -> None:
    # pad_to's slack is one padding span of its own (positions from 0, its own cu_seq_lens entry,
    # labels -100): the model's mean loss, its denominator and every gradient are unchanged.
    sequences = _sequences()
    bins = [list(range(len(sequences)))]
    results = []
    for pad_to in [None, 100]:
        collator = PackedCollator(sequences, sum(LENGTHS), 0, format="hf", pad_to=pad_to)
        batch = collator(bins)
        model = _model(attn_implementation).train()
        loss = model(**batch).loss
        loss.backward()
        results.append((batch, loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (plain, plain_loss, plain_grads), (fixed, fixed_loss, fixed_grads) = results
    assert fixed["input_ids"].shape == (1, 100) and plain["input_ids"].shape == (1, sum(LENGTHS))
    assert int((fixed["labels"] != -100).sum()) == int((plain["labels"] != -100).sum())
    torch.testing.assert_close(fixed_loss, plain_loss, atol=1e-6, rtol=1e-6)
    for got, expected in zip(fixed_grads, plain_grads, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)


# ---- PackedRowsCollator: B format="hf" items -> one flattened batch ----------------------------


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=10),
    cuts=st.lists(st.integers(0, 10), max_size=4),
    pad=st.sampled_from([None, 0, 7]),
    max_num_seqs=st.sampled_from([None, 12]),
    strip=st.booleans(),
)
def test_rows_collator_equals_collating_the_bins_together(
    lengths: list[int], cuts: list[int], pad: int | None, max_num_seqs: int | None, strip: bool
) -> None:
    # B one-row items merged equal PackedCollator(format="hf") on the B bins at once, also when
    # Trainer's remove_unused_columns has stripped seq_idx and cu_seq_lens_* from the items.
    from seqpack_cli.hf.collator import PackedRowsCollator

    source = [list(range(10 * i, 10 * i + n)) for i, n in enumerate(lengths)]
    edges = sorted({0, len(lengths), *(min(c, len(lengths)) for c in cuts)})
    bins = [list(range(s, e)) for s, e in itertools.pairwise(edges)]
    max_seq_len = max(sum(lengths[i] for i in b) for b in bins)
    pad_to = None if pad is None else sum(lengths) + pad
    whole = PackedCollator(
        source, max_seq_len, 3, format="hf", pad_to=pad_to, max_num_seqs=max_num_seqs
    )(bins)
    one_row = PackedCollator(source, max_seq_len, 3, format="hf")
    items = [one_row([b]) for b in bins]
    if strip:
        items = [{k: item[k] for k in ("input_ids", "labels", "position_ids")} for item in items]
    merged = PackedRowsCollator(pad_to=pad_to, max_num_seqs=max_num_seqs, pad_token_id=3)(items)
    assert merged.keys() == whole.keys()
    for key, value in whole.items():
        if torch.is_tensor(value):
            assert merged[key].dtype == value.dtype and torch.equal(merged[key], value), key
        else:
            assert merged[key] == value, key


def test_rows_collator_refuses_what_is_not_an_hf_row() -> None:
    from seqpack_cli.errors import ConfigError, InputError
    from seqpack_cli.hf.collator import PackedRowsCollator

    sequences = _sequences()
    padded = PackedCollator(sequences, 64, 0)([[0, 1]])
    with pytest.raises(ConfigError, match=r"item 0 has an attention_mask .*format='hf'"):
        PackedRowsCollator()([padded])
    hf_row = PackedCollator(sequences, 64, 0, format="hf")([[0, 1]])
    with pytest.raises(InputError, match=r"item 1 of the batch has no 'labels'"):
        PackedRowsCollator()([hf_row, {"input_ids": hf_row["input_ids"]}])
    with pytest.raises(ConfigError, match=r"holds 10 tokens .*more than pad_to=8"):
        PackedRowsCollator(pad_to=8)([hf_row])


def test_a_dataloader_with_batch_size_takes_hf_items_through_the_rows_collator() -> None:
    # Reported: DataLoader(dataset, batch_size=4) failed ("stack expects each tensor to be equal
    # size"): an item is already a batch. With the collator, 4 items make one [1, 4 * L] row.
    from torch.utils.data import DataLoader

    from seqpack_cli.data import PackedDataset
    from seqpack_cli.hf.collator import PackedRowsCollator

    sequences = _sequences()
    templates = {(n,): 1 for n in LENGTHS}
    pools = {n: np.array([i]) for i, n in enumerate(LENGTHS)}
    dataset = PackedDataset((templates, pools), sequences,
    collate=CollateOptions(pad_token_id=0, format="hf"),
    seed=0,
                            max_seq_len=32)  # fmt: skip
    loader = DataLoader(dataset, batch_size=4, collate_fn=PackedRowsCollator(pad_to=4 * 32))
    batches = list(loader)
    assert [b["input_ids"].shape for b in batches] == [(1, 128), (1, 128)]
    seen = [b["cu_seq_lens_q"].diff().tolist() for b in batches]
    assert sorted(n for lengths in seen for n in lengths[:-1]) == sorted(LENGTHS)

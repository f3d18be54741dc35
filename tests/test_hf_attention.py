"""The "seqpack_varlen" attention (seqpack_cli.hf): a packed row scores every token as alone.

Tiny random-init models are built from configs (nothing is downloaded) in float64, where the
per-sequence path is exact: the per-token losses and every parameter's gradient of a packed row
equal those of the sequences run alone with transformers' sdpa to 1e-10 — for Llama with as many
key/value heads as query heads and with fewer (GQA), Mistral with a sliding window shorter than
the sequences, and Qwen2 with full and sliding layers mixed. (Eager attention rounds its softmax
through float32, so against eager the agreement is float32's, checked too.)

The CUDA path's plumbing (layout, GQA, scaling, the window's (left, right), both `varlen_attn`
signatures) is run here on CPU against a stand-in kernel that does what torch documents for
`varlen_attn`; tests/test_gpu.py runs the real kernel.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hf_models import KINDS, tiny_causal_lm
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.collate import PackedCollator
from seqpack_cli.errors import ConfigError, InputError, MissingDependencyError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("seqpack_cli.hf")
attention = pytest.importorskip("seqpack_cli.hf.attention")
F = torch.nn.functional

VOCAB = 96
LENGTHS = [9, 1, 23, 4, 30, 2]  # a one-token sequence too: it predicts nothing
WINDOW = 6  # shorter than most sequences above
EXACT = 1e-10  # float64, per-sequence path: the target of issue 22

NAME = hf.register_attention()

MODELS = KINDS


def _model(kind: str, attn_implementation: str = NAME, **overrides: Any) -> Any:
    model = tiny_causal_lm(
        kind,
        attn_implementation,
        window=WINDOW,
        vocab_size=VOCAB,
        hidden_size=64,
        num_attention_heads=4,
        max_position_embeddings=128,
        **overrides,
    ).to(torch.float64)
    assert model.config._attn_implementation == attn_implementation
    return model.eval()


def _sequences() -> list[list[int]]:
    rng = np.random.default_rng(7)
    return [rng.integers(0, VOCAB, size=n).tolist() for n in LENGTHS]


def _hf_batch() -> dict[str, Any]:
    sequences = _sequences()
    return PackedCollator(sequences, sum(LENGTHS), 0, format="hf")([list(range(len(sequences)))])


def _token_losses(logits: Any, labels: Any) -> Any:
    """Per-token cross-entropy as the model scores it: logits at i against labels[i + 1]."""
    return F.cross_entropy(logits[0, :-1], labels[0, 1:], reduction="none", ignore_index=-100)


def _packed_run(model: Any, inputs: dict[str, Any], labels: Any) -> tuple[Any, list[Any]]:
    """The packed row's per-token losses, and each parameter's gradient of their sum."""
    model.zero_grad()
    losses = _token_losses(model(**inputs).logits, labels)
    losses.sum().backward()
    return losses.detach(), [p.grad.clone() for p in model.parameters()]


def _alone_run(model: Any, attn_implementation: str) -> tuple[list[Any], list[Any]]:
    """Each sequence run by itself: per-token losses, and the gradients of all their sum."""
    model.set_attn_implementation(attn_implementation)
    model.zero_grad()
    losses = []
    for sequence in _sequences():
        ids = torch.tensor([sequence])
        sequence_losses = _token_losses(model(input_ids=ids).logits, ids)
        sequence_losses.sum().backward()
        losses.append(sequence_losses.detach())
    model.set_attn_implementation(NAME)
    return losses, [p.grad.clone() for p in model.parameters()]


def _spans(losses: Any) -> list[Any]:
    """The packed row's losses split per sequence: for [s, e), the predictions of s+1..e-1."""
    bounds = np.cumsum([0, *LENGTHS]).tolist()
    return [losses[s : e - 1] for s, e in itertools.pairwise(bounds)]


def _max_difference(packed: list[Any], alone: list[Any]) -> float:
    assert [p.shape for p in packed] == [a.shape for a in alone]
    return max(float((p - a).abs().max()) for p, a in zip(packed, alone, strict=True) if a.numel())


# What the batch tells the attention: the collator's cu_seq_lens_q; position_ids alone; and
# position_ids with a 2-D mask of ones and the cache on, which turn off transformers' own
# packed-sequence detection for eager and sdpa (see test_hf.py) but change nothing here.
BATCH_KEYS = {
    "hf batch": lambda batch: {k: v for k, v in batch.items() if k != "labels"},
    "position_ids": lambda batch: {
        "input_ids": batch["input_ids"],
        "position_ids": batch["position_ids"],
    },
    "mask of ones, cache on": lambda batch: {
        "input_ids": batch["input_ids"],
        "position_ids": batch["position_ids"],
        "attention_mask": torch.ones_like(batch["input_ids"]),
        "use_cache": True,
    },
}


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("keys", BATCH_KEYS)
def test_a_packed_row_equals_each_sequence_alone(kind: str, keys: str) -> None:
    model = _model(kind)
    batch = _hf_batch()
    losses, gradients = _packed_run(model, BATCH_KEYS[keys](batch), batch["labels"])
    alone_losses, alone_gradients = _alone_run(model, "sdpa")
    assert _max_difference(_spans(losses), alone_losses) <= EXACT
    for name_and_param, got, expected in zip(
        model.named_parameters(), gradients, alone_gradients, strict=True
    ):
        difference = float((got - expected).abs().max())
        assert difference <= EXACT, (name_and_param[0], difference)
    # Against eager, the same to float32's rounding (eager's softmax runs in float32).
    eager_losses, _ = _alone_run(model, "eager")
    assert _max_difference(_spans(losses), eager_losses) < 1e-5


@pytest.mark.parametrize("kind", ["mistral-sliding", "qwen2-mixed"])
def test_the_sliding_window_matters_in_these_models(kind: str) -> None:
    # Without this, the window could be ignored and the test above still pass.
    batch = _hf_batch()
    inputs = BATCH_KEYS["hf batch"](batch)
    with torch.no_grad():
        windowed = _model(kind)(**inputs).logits
        wider = _model(kind, sliding_window=WINDOW + 1)(**inputs).logits
    assert float((windowed - wider).abs().max()) > 1e-3


def test_one_sequence_per_row_without_boundaries() -> None:
    # Unpacked rows of a batch (no cu_seq_lens_q, positions 0..T-1 in each): one sequence each.
    model = _model("llama-gqa")
    rows = torch.tensor([s[:8] for s in _sequences() if len(s) >= 8])
    with torch.no_grad():
        together = model(input_ids=rows).logits
        model.set_attn_implementation("sdpa")
        alone = torch.cat([model(input_ids=row[None]).logits for row in rows])
    assert float((together - alone).abs().max()) <= EXACT


# ---- the attention function itself, against a dense block-causal reference -------------------


def _dense_reference(
    query: Any, key: Any, value: Any, bounds: list[int], window: int | None, scale: float
) -> Any:
    """Attention over the B×T tokens as one stream with an explicit mask: a query attends to the
    keys of its own sequence at or before it (and within the window), nothing else."""
    batch_size, num_heads, length, head_dim = query.shape
    total = batch_size * length
    q, k, v = (
        x.transpose(0, 1).reshape(1, x.shape[1], total, head_dim) for x in (query, key, value)
    )
    sequence = torch.repeat_interleave(torch.arange(len(bounds) - 1), torch.tensor(bounds).diff())
    index = torch.arange(total)
    distance = index[:, None] - index[None, :]
    allowed = (sequence[:, None] == sequence[None, :]) & (distance >= 0)
    if window is not None:
        allowed &= distance < window
    output = F.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, scale=scale, enable_gqa=key.shape[1] != num_heads
    )
    return output.reshape(num_heads, batch_size, length, head_dim).permute(1, 2, 0, 3)


def _documented_varlen_attn(
    query: Any,
    key: Any,
    value: Any,
    cu_seq_q: Any,
    cu_seq_k: Any,
    max_q: int,
    max_k: int,
    *,
    window_size: tuple[int, int] = (-1, -1),
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """What torch's docs say `varlen_attn` computes, on [T, H, D]: per sequence, key j is seen by
    query i where i - left <= j <= i + right (-1: no limit on that side); is_causal is (-1, 0)."""
    assert torch.equal(cu_seq_q, cu_seq_k) and cu_seq_q.dtype == torch.int32
    assert max_q == max_k == int(cu_seq_q.diff().max())
    assert enable_gqa or key.shape[1] == query.shape[1]
    left, right = (-1, 0) if is_causal else window_size
    outputs = []
    for start, end in itertools.pairwise(cu_seq_q.tolist()):
        index = torch.arange(end - start)
        distance = index[:, None] - index[None, :]
        allowed = torch.ones(end - start, end - start, dtype=torch.bool)
        if left >= 0:
            allowed &= distance <= left
        if right >= 0:
            allowed &= -distance <= right
        q, k, v = (x[start:end].transpose(0, 1) for x in (query, key, value))
        outputs.append(
            F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, scale=scale, enable_gqa=enable_gqa
            ).transpose(0, 1)
        )
    return torch.cat(outputs)


def _modern_varlen(
    query: Any,
    key: Any,
    value: Any,
    *args: Any,
    window_size: Any = (-1, -1),
    scale: Any = None,
    enable_gqa: bool = False,
) -> Any:
    return _documented_varlen_attn(
        query, key, value, *args, window_size=window_size, scale=scale, enable_gqa=enable_gqa
    )


def _torch_2_10_varlen(
    query: Any, key: Any, value: Any, *args: Any, is_causal: bool = False
) -> Any:
    # torch 2.10: is_causal, and neither scale, window_size nor enable_gqa.
    return _documented_varlen_attn(query, key, value, *args, is_causal=is_causal)


KERNELS = {"torch>=2.11": _modern_varlen, "torch 2.10": _torch_2_10_varlen}


_Module: Any = torch.nn.Module  # (torch comes from importorskip: a base class typed Any)
_Tensor: Any = torch.Tensor


class _Layer(_Module):
    """An attention layer as the function sees it: `is_causal`, maybe a `sliding_window`."""

    is_causal = True


@pytest.mark.parametrize("path", ["per sequence", *KERNELS])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (6, 3)])
@settings(max_examples=25, deadline=None)
@given(
    data=st.data(),
    batch_size=st.integers(1, 3),
    window=st.one_of(st.none(), st.integers(1, 9)),
    boundaries=st.sampled_from(["cu_seq_lens_q", "position_ids", "neither"]),
    window_on_the_module=st.booleans(),
)
def test_the_attention_equals_a_dense_block_causal_reference(
    path: str,
    heads: tuple[int, int],
    data: st.DataObject,
    batch_size: int,
    window: int | None,
    boundaries: str,
    window_on_the_module: bool,
) -> None:
    length = data.draw(st.integers(1, 12), label="length")
    # Each row cut into sequences (with neither boundary argument, each row is one sequence).
    rows = [
        sorted(data.draw(st.sets(st.integers(1, length - 1), max_size=4)))
        if length > 1 and boundaries != "neither"
        else []
        for _ in range(batch_size)
    ]
    bounds = [0]
    for row, cuts in enumerate(rows):
        bounds += [row * length + c for c in cuts] + [(row + 1) * length]
    num_heads, num_kv_heads = heads
    generator = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16), label="seed"))
    head_dim = 8

    def tensor(num: int) -> Any:
        return torch.randn(
            batch_size, num, length, head_dim, generator=generator, dtype=torch.float64
        )

    query, key, value = tensor(num_heads), tensor(num_kv_heads), tensor(num_kv_heads)
    scale = 0.3  # not 1/sqrt(D): the module's scaling must reach the kernel
    if boundaries == "cu_seq_lens_q":
        # Empty entries at the end at times: cu_seq_lens padded to a fixed size (max_num_seqs).
        padded = bounds + [bounds[-1]] * data.draw(st.integers(0, 2), label="padding entries")
        cu = torch.tensor(padded, dtype=torch.int32)
        kwargs = {
            "cu_seq_lens_q": cu,
            "cu_seq_lens_k": cu,
            "max_length_q": int(np.diff(bounds).max()),
        }
    elif boundaries == "neither":
        kwargs = {}
    else:
        positions = torch.cat([torch.arange(e - s) for s, e in itertools.pairwise(bounds)]).reshape(
            batch_size, length
        )
        kwargs = {"position_ids": positions}
    expected = _dense_reference(query, key, value, bounds, window, scale)
    # Mistral passes the window as an argument; Qwen2 keeps it on the layer as well.
    layer = _Layer()
    if window_on_the_module:
        layer.sliding_window = window
    else:
        kwargs["sliding_window"] = window
    if path == "per sequence":
        got, weights = attention.seqpack_varlen_attention(
            layer, query, key, value, None, scaling=scale, **kwargs
        )
        assert weights is None
    else:
        with _stand_in_kernel(KERNELS[path]), pytest.MonkeyPatch.context() as patch:
            patch.setattr(attention, "_FLASH_DTYPES", (torch.float64,))  # the stand-in's
            if path == "torch 2.10" and window is not None:
                with pytest.raises(ConfigError, match=r"sliding_window=\d+ .*torch>=2.11"):
                    _cuda_path(layer, query, key, value, scaling=scale, **kwargs)
                return
            got = _cuda_path(layer, query, key, value, scaling=scale, **kwargs)
    assert got.shape == (batch_size, length, num_heads, head_dim)
    torch.testing.assert_close(got, expected, atol=EXACT, rtol=0)


@contextlib.contextmanager
def _stand_in_kernel(kernel: Any) -> Iterator[None]:
    """`kernel` in place of torch's varlen_attn, read with its own signature."""
    original = attention._varlen_kernel
    attention._varlen_kernel = lambda: (kernel, frozenset(inspect.signature(kernel).parameters))
    try:
        yield
    finally:
        attention._varlen_kernel = original


def _cuda_path(layer: Any, query: Any, key: Any, value: Any, **kwargs: Any) -> Any:
    """The attention as it runs on CUDA, on these CPU tensors (is_cuda is a read-only property
    of a tensor, so the tensors are wrapped in a subclass that says True)."""
    cuda_like = [x.as_subclass(_SaysCuda) for x in (query, key, value)]
    output, _ = attention.seqpack_varlen_attention(layer, *cuda_like, None, **kwargs)
    return output.as_subclass(torch.Tensor)


class _SaysCuda(_Tensor):
    @property
    def is_cuda(self) -> bool:
        return True


# ---- registration ------------------------------------------------------------------------------


def test_register_attention_is_idempotent_and_selectable_both_ways() -> None:
    assert hf.ATTENTION_NAME == "seqpack_varlen" == NAME
    assert hf.register_attention() == hf.register_attention() == NAME
    assert transformers.AttentionInterface._global_mapping[NAME] is (
        attention.seqpack_varlen_attention
    )
    mask_functions = transformers.masking_utils.AttentionMaskInterface._global_mapping
    assert mask_functions[NAME] is attention.seqpack_varlen_mask
    # In the config (from_config above), or switched on an existing model.
    model = _model("llama", attn_implementation="sdpa")
    model.set_attn_implementation(NAME)
    assert model.config._attn_implementation == NAME


def test_no_mask_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    # sdpa's and eager's mask builders would make the dense total x total mask: never called.
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a dense mask was built")

    mapping = transformers.masking_utils.AttentionMaskInterface._global_mapping
    monkeypatch.setitem(mapping, "sdpa", refuse)
    monkeypatch.setitem(mapping, "eager", refuse)
    batch = _hf_batch()
    with torch.no_grad():
        _model("qwen2-mixed")(**batch)


def test_without_transformers_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers: ImportError
    monkeypatch.delitem(sys.modules, "seqpack_cli.hf.attention")
    with pytest.raises(MissingDependencyError, match=r"pip install 'seqpack-cli\[hf\]'"):
        hf.register_attention()


def test_without_varlen_attn_the_error_names_the_torch_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch.nn.attention.varlen", None)
    with pytest.raises(ConfigError, match=r"torch\.nn\.attention\.varlen.*torch>=2\.11"):
        attention._varlen_kernel.__wrapped__()


# ---- what it cannot honour: one line each ------------------------------------------------------


def _refusal(error: pytest.ExceptionInfo[Exception]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_a_2d_mask_with_padding_is_refused() -> None:
    batch = _hf_batch()
    mask = torch.ones_like(batch["input_ids"])
    mask[0, -3:] = 0
    with pytest.raises(ConfigError) as error, torch.no_grad():
        _model("llama")(input_ids=batch["input_ids"], attention_mask=mask)
    assert "attention_mask has padding (3 zeros" in _refusal(error)
    assert 'format="hf"' in _refusal(error)


def test_a_4d_mask_is_refused() -> None:
    batch = _hf_batch()
    total = batch["input_ids"].shape[1]
    mask = torch.zeros(1, 1, total, total, dtype=torch.float64)
    with pytest.raises(ConfigError) as error, torch.no_grad():
        _model("llama")(input_ids=batch["input_ids"], attention_mask=mask)
    assert "4-D attention_mask" in _refusal(error) and 'format="hf"' in _refusal(error)


def test_attention_dropout_in_training_is_refused() -> None:
    model = _model("llama", attention_dropout=0.1)
    with torch.no_grad():
        model(**_hf_batch())  # evaluation: no dropout, nothing to refuse
    with pytest.raises(ConfigError) as error:
        model.train()(**_hf_batch())
    assert "attention_dropout=0.1" in _refusal(error)
    assert "attention_dropout=0.0" in _refusal(error)


def test_a_logit_softcap_is_refused() -> None:
    config = transformers.Gemma2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        attn_logit_softcapping=50.0,
        attn_implementation=NAME,
    )
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with pytest.raises(ConfigError) as error, torch.no_grad():
        model(**_hf_batch())
    assert "softcap=50.0" in _refusal(error) and "attn_logit_softcapping" in _refusal(error)


def _qkv(query_length: int = 5, key_length: int = 5) -> tuple[Any, Any, Any]:
    query = torch.randn(1, 2, query_length, 8, dtype=torch.float64)
    key = torch.randn(1, 2, key_length, 8, dtype=torch.float64)
    return query, key, key.clone()


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"is_causal": False}, "is_causal=False"),
        ({"s_aux": torch.zeros(2)}, "attention sinks"),
    ],
)
def test_non_causal_and_sinks_are_refused(options: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        attention.seqpack_varlen_attention(_Layer(), *_qkv(), None, **options)
    assert expected in _refusal(error)


def test_a_non_causal_module_is_refused() -> None:
    layer = _Layer()
    layer.is_causal = False
    with pytest.raises(ConfigError) as error:
        attention.seqpack_varlen_attention(layer, *_qkv(), None)
    assert "_Layer attends both ways" in _refusal(error)


def test_decoding_with_a_kv_cache_is_refused() -> None:
    with pytest.raises(ConfigError) as error:
        attention.seqpack_varlen_attention(_Layer(), *_qkv(1, 6), None)
    assert "1 query tokens against 6 keys" in _refusal(error)
    assert 'set_attn_implementation("sdpa")' in _refusal(error)


@pytest.mark.parametrize("bounds", [[0, 3, 4], [1, 5], [0, 4, 2, 5]])
def test_boundaries_that_do_not_cover_the_row_are_refused(bounds: list[int]) -> None:
    cu = torch.tensor(bounds, dtype=torch.int32)
    with pytest.raises(InputError) as error:
        attention.seqpack_varlen_attention(_Layer(), *_qkv(), None, cu_seq_lens_q=cu)
    assert f"cu_seq_lens_q {bounds}" in _refusal(error)


def test_exactness_holds_with_the_module_scaling_not_the_default() -> None:
    # A model whose scaling is not 1/sqrt(head_dim) (Gemma2's query_pre_attn_scalar).
    query, key, value = _qkv()
    got, _ = attention.seqpack_varlen_attention(_Layer(), query, key, value, None, scaling=0.5)
    expected = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=0.5)
    assert float((got - expected.transpose(1, 2)).abs().max()) <= EXACT
    # ... and differs from the default 1/sqrt(8) visibly.
    default = F.scaled_dot_product_attention(query, key, value, is_causal=True)
    assert float((got - default.transpose(1, 2)).abs().max()) > 1e-3

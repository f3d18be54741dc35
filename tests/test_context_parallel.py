"""format="thd" and context parallelism: the head-tail layout, checked by hand, by hypothesis
(no token dropped or repeated) and by an exact float64 emulation of context-parallel attention
and of a tiny transformer's loss, summed over the ranks, against the unsplit sequences."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
from conftest import next_fit_plan  # noqa: E402

from seqpack_cli.collate import CollateOptions, PackedCollator  # noqa: E402
from seqpack_cli.data import PackedDataset, PackedIterableDataset  # noqa: E402
from seqpack_cli.errors import ConfigError, InputError  # noqa: E402

PAD = 0
IGNORE = -100


def _tokens(lengths: list[int]) -> dict[int, list[int]]:
    """Sequence id -> tokens, every token distinct (1000 * id + position + 1), so a token in a
    wrong place shows."""
    return {i: [1000 * i + p + 1 for p in range(n)] for i, n in enumerate(lengths)}


def _ranks(collate: Any, bins: list[list[int]], cp_size: int, **options: Any) -> list[Any]:
    """Every context-parallel rank's batch of `bins`."""
    return [
        PackedCollator(*collate, format="thd", cp_size=cp_size, cp_rank=r, **options)(bins)
        for r in range(cp_size)
    ]


def test_head_tail_layout_golden() -> None:
    # Two bins: a (5 tokens) and b (2 tokens); cp_size=2, so every sequence is padded to a
    # multiple of 2 * 2 = 4 and split into 4 chunks: a -> 8 places, chunks of 2; b -> 4 places,
    # chunks of 1. The padded row (P = pad) and its places:
    #   place  0  1  2  3  4  5  6  7 | 8  9 10 11
    #   token 11 12 13 14 15  P  P  P |21 22  P  P
    # rank 0 takes chunks 0 and 3 of each sequence: places 0 1 6 7 | 8 11;
    # rank 1 takes chunks 1 and 2:                  places 2 3 4 5 | 9 10.
    # Labels are shifted: the label at a place is the next token of its sequence, -100 at a
    # sequence's last token and on padding.
    source = {0: [11, 12, 13, 14, 15], 1: [21, 22]}
    rank0, rank1 = _ranks((source, 8, PAD), [[0], [1]], 2)
    assert rank0["cp_indices"].tolist() == [0, 1, 6, 7, 8, 11]
    assert rank0["input_ids"].tolist() == [[11, 12, PAD, PAD, 21, PAD]]
    assert rank0["labels"].tolist() == [[12, 13, IGNORE, IGNORE, 22, IGNORE]]
    assert rank0["position_ids"].tolist() == [[0, 1, 6, 7, 0, 3]]
    assert rank1["cp_indices"].tolist() == [2, 3, 4, 5, 9, 10]
    assert rank1["input_ids"].tolist() == [[13, 14, 15, PAD, 22, PAD]]
    assert rank1["labels"].tolist() == [[14, 15, IGNORE, IGNORE, IGNORE, IGNORE]]
    assert rank1["position_ids"].tolist() == [[2, 3, 4, 5, 1, 2]]
    for batch in (rank0, rank1):
        assert batch["cu_seqlens"].tolist() == [0, 5, 7]
        assert batch["cu_seqlens_padded"].tolist() == [0, 8, 12]
        assert batch["cu_seqlens"].dtype == batch["cu_seqlens_padded"].dtype == torch.int32
        assert batch["cp_indices"].dtype == torch.int64
        assert batch["max_seqlen"] == 8
        for key in ("input_ids", "labels", "position_ids"):
            assert batch[key].dtype == torch.int64 and batch[key].shape == (1, 6), key


def test_one_rank_is_the_plain_thd_batch() -> None:
    # cp_size=1 without a multiple: no padding, offsets equal, the padding_free batch's tokens
    # and positions, with the labels shifted one place left within each sequence.
    source = _tokens([5, 1, 3, 4])
    bins = [[0, 1], [2, 3]]
    thd = PackedCollator(source, 8, PAD, format="thd")(bins)
    flat = PackedCollator(source, 8, PAD, format="padding_free")(bins)
    assert thd["cu_seqlens"].tolist() == thd["cu_seqlens_padded"].tolist() == [0, 5, 6, 9, 13]
    assert thd["cu_seqlens"].tolist() == flat["cu_seqlens"].tolist()
    assert torch.equal(thd["input_ids"], flat["input_ids"])
    assert torch.equal(thd["position_ids"], flat["position_ids"])
    assert thd["cp_indices"].tolist() == list(range(13))
    expected = []
    for seq in flat["labels"][0].split([5, 1, 3, 4]):
        expected += [*seq[1:].tolist(), IGNORE]
    assert thd["labels"].tolist() == [expected]
    assert thd["max_seqlen"] == 5


def test_loss_mask_and_weights_are_shifted_with_the_labels() -> None:
    source = {0: [1, 2, 3, 4], 1: [5, 6, 7]}
    mask = {0: [1, 0, 1, 1], 1: [0, 1, 0]}
    (batch,) = _ranks(
        (source, 4, PAD), [[0], [1]], 1, loss_mask_source=mask, return_loss_weights=True
    )
    # Targets are the tokens with mask 1 past the first of their sequence: 3, 4 and 6, each
    # predicted from the token before it.
    assert batch["labels"].tolist() == [[IGNORE, 3, 4, IGNORE, 6, IGNORE, IGNORE]]
    assert batch["loss_weights"].tolist() == [[0, 0.5, 0.5, 0, 1, 0, 0]]


def test_pad_to_grows_the_last_span() -> None:
    source = _tokens([5, 2])
    rank0, rank1 = _ranks((source, 8, PAD), [[0], [1]], 2, pad_to=16)
    assert rank0["cu_seqlens_padded"].tolist() == [0, 8, 16]
    assert rank0["cu_seqlens"].tolist() == [0, 5, 7]
    # b's span is 8 places: chunks of 2, rank 0 places 8 9 14 15, rank 1 places 10..13.
    assert rank0["cp_indices"].tolist() == [0, 1, 6, 7, 8, 9, 14, 15]
    assert rank1["cp_indices"].tolist() == [2, 3, 4, 5, 10, 11, 12, 13]
    assert rank1["position_ids"].tolist() == [[2, 3, 4, 5, 2, 3, 4, 5]]


def test_max_num_seqs_fixes_both_offsets() -> None:
    (batch,) = _ranks((_tokens([3, 2]), 8, PAD), [[0, 1]], 1, length_multiple=2, max_num_seqs=4)
    assert batch["cu_seqlens"].tolist() == [0, 3, 5, 5, 5]
    assert batch["cu_seqlens_padded"].tolist() == [0, 4, 6, 6, 6]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"cp_size": 2, "length_multiple": 6},
            "length_multiple=6 with cp_size=2: each sequence is split into 2 * cp_size = 4 "
            "equal chunks, so the multiple must divide by 4; pass length_multiple=8",
        ),
        ({"cp_size": 2, "cp_rank": 2}, "cp_rank"),
        ({"cp_size": 0}, "cp_size"),
        ({"cp_size": 2, "format": "hf"}, "need format='thd'"),
        ({"length_multiple": 4, "format": "padded"}, "need format='thd'"),
        ({"cp_size": 2, "pad_to": 18}, "pass a pad_to divisible by 4"),
    ],
)
def test_bad_options_give_one_line_errors(options: dict[str, Any], message: str) -> None:
    options = {"format": "thd", **options}
    with pytest.raises(ConfigError, match=message.replace("*", r"\*")) as error:
        PackedCollator(_tokens([3]), 16, PAD, **options)
    assert "\n" not in str(error.value)


def test_bins_packed_without_the_multiple_ask_for_a_repack() -> None:
    # Two bins of 8 tokens each fit max_seq_len=8, but padded to multiples of 4 (cp_size=2)
    # the 3 + 5 bin takes 4 + 8 = 12 places: 20 > 2 * 8.
    collator = PackedCollator(_tokens([3, 5, 8]), 8, PAD, format="thd", cp_size=2)
    with pytest.raises(InputError) as error:
        collator([[0, 1], [2]])
    message = str(error.value)
    assert "\n" not in message
    assert "20 once every sequence is padded to a multiple of 4" in message
    assert "repack(length_multiple=4)" in message and "--length-multiple 4" in message


def _unpad(batches: list[Any]) -> tuple[np.ndarray, ...]:
    """The padded row's input_ids, labels and position_ids, rebuilt from every rank's share."""
    total = int(batches[0]["cu_seqlens_padded"][-1])
    rows = [np.full(total, -1, dtype=np.int64) for _ in range(3)]
    for batch in batches:
        for row, key in zip(rows, ("input_ids", "labels", "position_ids"), strict=True):
            row[batch["cp_indices"].numpy()] = batch[key][0].numpy()
    return tuple(rows)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 20), min_size=1, max_size=4), min_size=1, max_size=4),
    st.sampled_from([1, 2, 3, 4]),
    st.sampled_from([None, 1, 2]),
)
def test_no_token_dropped_or_repeated(
    bin_lengths: list[list[int]], cp_size: int, factor: int | None
) -> None:
    lengths = [n for lens in bin_lengths for n in lens]
    source = _tokens(lengths)
    ids = iter(range(len(lengths)))
    bins = [[next(ids) for _ in lens] for lens in bin_lengths]
    multiple = None if factor is None else factor * 2 * cp_size
    batches = _ranks((source, 200, PAD), bins, cp_size, length_multiple=multiple)
    places = np.concatenate([b["cp_indices"].numpy() for b in batches])
    total = int(batches[0]["cu_seqlens_padded"][-1])
    # Every place of the row on exactly one rank, each rank an equal share.
    assert sorted(places.tolist()) == list(range(total))
    assert all(b["input_ids"].shape == (1, total // cp_size) for b in batches)
    input_ids, labels, positions = _unpad(batches)
    cu = batches[0]["cu_seqlens"].tolist()
    cup = batches[0]["cu_seqlens_padded"].tolist()
    assert np.diff(cu).tolist() == lengths
    real = np.zeros(total, dtype=bool)
    for s, n in enumerate(lengths):
        span = slice(cup[s], cup[s + 1])
        assert (cup[s + 1] - cup[s]) % (multiple or (1 if cp_size == 1 else 2 * cp_size)) == 0
        assert input_ids[cup[s] : cup[s] + n].tolist() == source[s]  # the real tokens, in order
        assert labels[cup[s] : cup[s] + n].tolist() == [*source[s][1:], IGNORE]
        assert positions[span].tolist() == list(range(cup[s + 1] - cup[s]))
        real[cup[s] : cup[s] + n] = True
    assert (input_ids[~real] == PAD).all() and (labels[~real] == IGNORE).all()
    assert sorted(input_ids[real].tolist()) == sorted(t for s in source.values() for t in s)


# --- exact emulation of context parallelism (float64, CPU) ---

DIM = 8
VOCAB = 64


class TinyModel:
    """Embedding, one causal attention layer with RoPE on `position_ids` and a residual, an LM
    head; float64. Attention is written once over (query places, the row's keys), so the same
    code runs the unsplit sequences and the context-parallel emulation."""

    def __init__(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.randn(VOCAB, DIM, generator=g, dtype=torch.float64)
        self.wq, self.wk, self.wv, self.head = (
            torch.randn(DIM, n, generator=g, dtype=torch.float64) / math.sqrt(DIM)
            for n in (DIM, DIM, DIM, VOCAB)
        )

    @staticmethod
    def rope(x: Any, positions: Any) -> Any:
        half = DIM // 2
        freq = 1.0 / 10000 ** (torch.arange(half, dtype=torch.float64) / half)
        angle = positions.to(torch.float64)[:, None] * freq
        x1, x2 = x[:, :half], x[:, half:]
        return torch.cat(
            [x1 * angle.cos() - x2 * angle.sin(), x1 * angle.sin() + x2 * angle.cos()], 1
        )

    def qkv(self, input_ids: Any, positions: Any) -> tuple[Any, Any, Any, Any]:
        h = self.embed[input_ids % VOCAB]
        return h, self.rope(h @ self.wq, positions), self.rope(h @ self.wk, positions), h @ self.wv

    @staticmethod
    def attend(q: Any, k: Any, v: Any, allowed: Any) -> Any:
        scores = (q @ k.T / math.sqrt(DIM)).masked_fill(~allowed, float("-inf"))
        return scores.softmax(-1) @ v

    def logits(self, h: Any, attention: Any) -> Any:
        return (h + attention) @ self.head


def _reference(model: TinyModel, tokens: list[int], targets: list[bool]) -> tuple[Any, Any]:
    """One sequence alone: causal attention output, and its summed next-token loss over the
    tokens that are targets (`targets[p]`: token p is predicted from token p - 1)."""
    ids = torch.tensor(tokens)
    h, q, k, v = model.qkv(ids, torch.arange(len(tokens)))
    n = len(tokens)
    out = model.attend(q, k, v, torch.ones(n, n, dtype=torch.bool).tril())
    logits = model.logits(h, out)
    keep = torch.tensor(targets[1:], dtype=torch.bool)
    loss = torch.nn.functional.cross_entropy(logits[:-1][keep], ids[1:][keep], reduction="sum")
    return out, loss


def _context_parallel(model: TinyModel, batches: list[Any]) -> tuple[list[Any], Any]:
    """Each rank computes Q, K, V of its own places; K and V are all-gathered into the row by
    `cp_indices`; each rank's queries attend to the keys of their own sequence (spans from
    `cu_seqlens_padded`, real keys from `cu_seqlens`) at global places up to their own.
    Returns each rank's attention output and the loss summed over the ranks (labels as given:
    no shift)."""
    cu = batches[0]["cu_seqlens"].long()
    cup = batches[0]["cu_seqlens_padded"].long()
    total = int(cup[-1])
    spans = torch.diff(cup)
    seq_of = torch.repeat_interleave(torch.arange(spans.shape[0]), spans)
    real_end = (cup[:-1] + torch.diff(cu))[seq_of]  # per place: its sequence's real end
    places = torch.arange(total)
    locals_ = [model.qkv(b["input_ids"][0], b["position_ids"][0]) for b in batches]
    k_row = torch.full((total, DIM), float("nan"), dtype=torch.float64)
    v_row = k_row.clone()
    for batch, (_, _, k, v) in zip(batches, locals_, strict=True):
        k_row[batch["cp_indices"]], v_row[batch["cp_indices"]] = k, v  # the all-gather
    outputs, loss = [], torch.zeros((), dtype=torch.float64)
    for batch, (h, q, _, _) in zip(batches, locals_, strict=True):
        g = batch["cp_indices"]
        allowed = (
            (seq_of[None] == seq_of[g][:, None])
            & (places[None] <= g[:, None])
            & (places < real_end)[None]
        )
        out = model.attend(q, torch.nan_to_num(k_row), torch.nan_to_num(v_row), allowed)
        outputs.append(out)
        loss = loss + torch.nn.functional.cross_entropy(
            model.logits(h, out), batch["labels"][0], ignore_index=IGNORE, reduction="sum"
        )
    return outputs, loss


# Odd lengths, one-token sequences, rows ending in padding; max_seq_len 32 leaves room for the
# multiple of 8 (cp_size=4) in every bin.
LENGTHS = [7, 1, 3, 13, 1, 2, 9, 5]
BINS = [[0, 1, 2], [3], [4, 5, 6], [7]]
MASKS = {
    "none": None,
    "loss_mask": {i: [(i + p) % 3 != 0 for p in range(n)] for i, n in enumerate(LENGTHS)},
}


@pytest.mark.parametrize("cp_size", [1, 2, 4])
@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("pad_to", [None, 136])
def test_context_parallel_attention_and_loss_are_exact(
    cp_size: int, mask: str, pad_to: int | None
) -> None:
    source = {i: [t % VOCAB for t in seq] for i, seq in _tokens(LENGTHS).items()}
    loss_mask = MASKS[mask]
    batches = _ranks(
        (source, 32, PAD),
        BINS,
        cp_size,
        loss_mask_source=loss_mask,
        length_multiple=8,
        pad_to=pad_to,
    )
    model = TinyModel()
    outputs, loss = _context_parallel(model, batches)
    total = int(batches[0]["cu_seqlens_padded"][-1])
    out_row = torch.full((total, DIM), float("nan"), dtype=torch.float64)
    for batch, out in zip(batches, outputs, strict=True):
        out_row[batch["cp_indices"]] = out  # scattered back
    cup = batches[0]["cu_seqlens_padded"].tolist()
    expected_loss = torch.zeros((), dtype=torch.float64)
    for s, tokens in source.items():
        targets = [
            p > 0 and (loss_mask is None or bool(loss_mask[s][p])) for p in range(len(tokens))
        ]
        expected_out, seq_loss = _reference(model, tokens, targets)
        got = out_row[cup[s] : cup[s] + len(tokens)]
        assert torch.allclose(got, expected_out, rtol=0, atol=1e-12), s
        expected_loss += seq_loss
    assert expected_loss > 0
    assert abs(float(loss - expected_loss)) <= 1e-10 * max(1.0, float(expected_loss))


def test_context_parallel_loss_with_labels_source() -> None:
    # labels_source: IGNORE where nothing is predicted (a prompt), else the token.
    source = {i: [t % VOCAB for t in seq] for i, seq in _tokens(LENGTHS).items()}
    labels = {
        i: [IGNORE if p < n // 2 else t for p, t in enumerate(seq)]
        for i, (n, seq) in enumerate(zip(LENGTHS, source.values(), strict=True))
    }
    model = TinyModel(1)
    _, loss = _context_parallel(model, _ranks((source, 32, PAD), BINS, 4, labels_source=labels))
    expected = sum(
        _reference(model, source[s], [p > 0 and labels[s][p] != IGNORE for p in range(n)])[1]
        for s, n in enumerate(LENGTHS)
    )
    assert abs(float(loss - expected)) <= 1e-10 * float(expected)


# --- the datasets pass the options through ---


def _rounded_plan(lengths: list[int], max_seq_len: int, multiple: int) -> Any:
    """(templates, pools) whose bins fit `max_seq_len` once padded to `multiple` (what
    `repack(length_multiple=...)` gives): next-fit on the rounded lengths."""
    rounded = [-(-n // multiple) * multiple for n in lengths]
    templates, _ = next_fit_plan(rounded, max_seq_len)
    _, pools = next_fit_plan(lengths, max_seq_len)
    by_rounded: dict[int, list[int]] = {}
    for n in sorted(lengths, reverse=True):
        by_rounded.setdefault(-(-n // multiple) * multiple, []).append(n)
    exact: Any = type(templates)()
    for template, count in templates.items():
        for _ in range(count):
            exact[tuple(sorted((by_rounded[r].pop() for r in template), reverse=True))] += 1
    return exact, pools


@pytest.mark.parametrize("dataset", ["iterable", "map"])
def test_datasets_give_each_cp_rank_its_share_of_the_same_bins(dataset: str) -> None:
    lengths = [int(n) for n in np.random.default_rng(3).integers(1, 30, size=40)]
    source = _rounded_plan(lengths, 32, 4)
    tokens = _tokens(lengths)
    common: dict[str, Any] = {"seed": 5, "max_seq_len": 32}
    if dataset == "iterable":
        common |= {"rows_per_rank": 2, "rank": 1, "world_size": 2}
        common |= {"return_num_items_in_batch": True}

    def items(**cp: Any) -> list[Any]:
        collate = CollateOptions(pad_token_id=PAD, format="thd", **cp)
        if dataset == "iterable":
            return list(PackedIterableDataset(source, tokens, collate=collate, **common))
        ds = PackedDataset(source, tokens, collate=collate, **common)
        return [ds[k] for k in range(len(ds))]

    whole = items(length_multiple=4)
    ranks = [items(cp_size=2, cp_rank=r) for r in range(2)]
    assert len(whole) > 3 and all(len(r) == len(whole) for r in ranks)
    for k, item in enumerate(whole):
        shares = [r[k] for r in ranks]
        for key in ("input_ids", "labels", "position_ids"):
            row = torch.empty_like(item[key][0])
            for share in shares:
                row[share["cp_indices"]] = share[key][0]
            assert torch.equal(row, item[key][0]), (k, key)
        for share in shares:
            assert torch.equal(share["cu_seqlens_padded"], item["cu_seqlens_padded"])
            if dataset == "iterable":
                assert share["num_items_in_batch"] == item["num_items_in_batch"]

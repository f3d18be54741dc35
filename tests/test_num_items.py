"""`num_items_in_batch`: the loss targets of a whole optimizer step, on every rank, from the plan.

The target of issue 23: on a tiny float64 model, the gradient of the sum over ranks and
micro-batches of (the batch's summed token losses / num_items_in_batch) equals the gradient of
the token-mean loss over the same step's sequences run one by one, to 1e-10, for grad_accum 1
and 4, 1 and 8 simulated ranks, with and without a loss mask. The count itself is checked
against brute force, for the stored counts of a token store and for hand-made sources.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hf_models import tiny_causal_lm
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.packing import length_histogram_from_lengths, pack_length_histogram_batched

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("seqpack_cli.hf")
from seqpack_cli.collate import CollateOptions  # noqa: E402
from seqpack_cli.data import PackedDataset, PackedIterableDataset  # noqa: E402

NAME = hf.register_attention()
VOCAB, MAX_SEQ_LEN, PAD = 64, 40, 0
EXACT = 1e-10


def _corpus(num: int = 90, seed: int = 3) -> tuple[list[np.ndarray], list[np.ndarray], Any]:
    """Token sequences (lengths 1-24, a few of one token), loss masks, (templates, pools)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 25, size=num)
    tokens = [rng.integers(1, VOCAB, size=n) for n in lengths]
    masks = [rng.integers(0, 2, size=n) for n in lengths]
    histogram, pools = length_histogram_from_lengths(lengths)
    templates = pack_length_histogram_batched(histogram, MAX_SEQ_LEN)
    return tokens, masks, (templates, pools)


def _ranks(world_size: int, grad_accum: int, masked: bool, **options: Any) -> list[Any]:
    tokens, masks, source = _corpus()
    return [
        PackedIterableDataset(
            source,
            tokens,
            loss_mask_source=masks if masked else None,
            max_seq_len=MAX_SEQ_LEN,
            collate=CollateOptions(pad_token_id=PAD, format="hf"),
            seed=5,
            rank=rank,
            world_size=world_size,
            rows_per_rank=2,
            grad_accum=grad_accum,
            return_num_items_in_batch=True,
            **options,
        )
        for rank in range(world_size)
    ]


def _brute_force(sequences: list[np.ndarray], masks: list[np.ndarray] | None) -> int:
    """Targets: every token but a sequence's first, where the mask (if any) keeps it."""
    if masks is None:
        return sum(len(s) - 1 for s in sequences)
    return sum(int(np.count_nonzero(m[1:])) for m in masks)


def _model() -> Any:
    return tiny_causal_lm(
        "llama", NAME, vocab_size=VOCAB, hidden_size=32, num_attention_heads=4,
        max_position_embeddings=64,
    ).to(torch.float64)  # fmt: skip


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("grad_accum", [1, 4])
@pytest.mark.parametrize("world_size", [1, 8])
def test_summed_packed_losses_over_num_items_are_the_step_token_mean(
    world_size: int, grad_accum: int, masked: bool
) -> None:
    tokens, masks, _ = _corpus()
    ranks = _ranks(world_size, grad_accum, masked, balance="cost", cost_per_token=32 * 12)
    model = _model()
    # Optimizer step 0: the first grad_accum items of every rank.
    model.zero_grad()
    seen: list[int] = []
    counts = set()
    for ds in ranks:
        for micro, batch in zip(range(grad_accum), ds, strict=False):
            counts.add(int(batch["num_items_in_batch"]))
            n = batch.pop("num_items_in_batch")
            labels = batch["labels"]
            output = model(**batch, num_items_in_batch=n)
            summed = torch.nn.functional.cross_entropy(
                output.logits[0, :-1], labels[0, 1:], reduction="sum", ignore_index=-100
            )
            (summed / n).backward()
            # transformers' own loss is that quotient (its loss upcasts the logits to float32,
            # hence the float32 tolerance; the gradients above stay in float64).
            assert float(output.loss.detach()) == pytest.approx(
                float(summed.detach() / n), rel=1e-6
            )
            seen += [i for b in ds.plan.step(micro) for i in b]
    assert len(counts) == 1  # every rank and micro-batch agrees
    (count,) = counts
    chosen_masks = [masks[i] for i in seen] if masked else None
    assert count == _brute_force([tokens[i] for i in seen], chosen_masks)
    packed = [p.grad.clone() for p in model.parameters()]

    # The same sequences one by one, the token-mean loss of the step.
    model.set_attn_implementation("sdpa")
    model.zero_grad()
    total = torch.zeros((), dtype=torch.float64)
    for i in seen:
        ids = torch.tensor(tokens[i][None], dtype=torch.int64)
        labels = ids.clone()
        if masked:
            labels[0, torch.from_numpy(masks[i] == 0)] = -100
        logits = model(input_ids=ids).logits
        total = total + torch.nn.functional.cross_entropy(
            logits[0, :-1], labels[0, 1:], reduction="sum", ignore_index=-100
        )
    (total / count).backward()
    for got, expected in zip(packed, (p.grad for p in model.parameters()), strict=True):
        assert float((got - expected).abs().max()) <= EXACT


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 3),
    st.integers(1, 4),
    st.booleans(),
    st.sampled_from([None, "cost"]),
)
def test_num_items_is_the_brute_force_count_of_every_step(
    world_size: int, rows: int, grad_accum: int, masked: bool, balance: str | None
) -> None:
    tokens, masks, source = _corpus(num=50, seed=world_size * 10 + rows)
    datasets = [
        PackedIterableDataset(
            source, tokens, loss_mask_source=masks if masked else None, max_seq_len=MAX_SEQ_LEN,
            collate=CollateOptions(pad_token_id=PAD),
            seed=1, rank=r, world_size=world_size, rows_per_rank=rows,
            grad_accum=grad_accum, return_num_items_in_batch=True, balance=balance,
            cost_per_token=7.0,
        )
        for r in range(world_size)
    ]  # fmt: skip
    plan = datasets[0].plan
    items = [list(ds) for ds in datasets]
    for step in range(plan.num_steps):
        first = step // grad_accum * grad_accum
        last = min(first + grad_accum, plan.num_steps)
        ids = [i for ds in datasets for s in range(first, last) for b in ds.plan.step(s) for i in b]
        expected = _brute_force(
            [tokens[i] for i in ids], [masks[i] for i in ids] if masked else None
        )
        for r in range(world_size):
            assert int(items[r][step]["num_items_in_batch"]) == expected


def test_labels_and_truncation_are_counted_as_the_collator_counts() -> None:
    rng = np.random.default_rng(9)
    lengths = rng.integers(1, 30, size=40)
    tokens = [rng.integers(1, VOCAB, size=n) for n in lengths]
    labels = [np.where(rng.random(n) < 0.3, -100, t) for n, t in zip(lengths, tokens, strict=True)]
    cut = np.minimum(lengths, 16)  # pools of a prepare that truncated at 16
    histogram, pools = length_histogram_from_lengths(cut)
    templates = pack_length_histogram_batched(histogram, 16)
    ds = PackedDataset(
        (templates, pools), tokens, labels_source=labels, max_seq_len=16,
        collate=CollateOptions(pad_token_id=PAD, truncate=True),
        seed=2, rows_per_rank=3, return_num_items_in_batch=True,
    )  # fmt: skip
    for k in range(len(ds)):
        step = k // 3
        rows = [ds.collator([ds.plan[j]]) for j in range(step * 3, min(step * 3 + 3, len(ds)))]
        expected = sum(int((row["labels"] != -100).sum()) for row in rows)
        assert int(ds[k]["num_items_in_batch"]) == expected


@pytest.mark.parametrize(
    ("role", "options"),
    [
        ("loss_mask", {"loss_mask_column": "mask", "over_cap": "drop"}),
        ("labels", {"labels_column": "labels", "over_cap": "truncate"}),
    ],
)
def test_a_prepared_store_counts_from_its_stored_targets(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, role: str, options: dict
) -> None:
    from token_datasets import store_config, write_token_files

    from seqpack_cli.data import targets
    from seqpack_cli.prepare import load_prepared, prepare_dataset

    rng = np.random.default_rng(2)
    sequences = [rng.integers(1, 500, int(rng.integers(1, 31))).tolist() for _ in range(120)]
    labels = [[t if rng.random() < 0.6 else -100 for t in s] for s in sequences]
    mask = [rng.integers(0, 2, len(s)).tolist() for s in sequences]
    write_token_files(tmp_path, sequences, cuts=(50,), labels=labels, mask=mask)
    prepare_dataset(store_config(tmp_path, **options))
    prepared = load_prepared(tmp_path / "out")
    assert prepared.num_targets is not None

    def no_reading(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the stored counts were not used")

    monkeypatch.setattr(targets, "fetch", no_reading)  # counting from the store reads no mask
    datasets = [
        PackedIterableDataset(prepared,
        collate=CollateOptions(pad_token_id=PAD),
        seed=4, rank=r, world_size=3,
                              rows_per_rank=2, grad_accum=2, return_num_items_in_batch=True)
        for r in range(3)
    ]  # fmt: skip
    plan = datasets[0].plan
    items = [list(ds) for ds in datasets]
    for step in range(plan.num_steps):
        first = step // 2 * 2
        rows = [
            ds.collator([b]) for s in range(first, min(first + 2, plan.num_steps))
            for ds in datasets for b in ds.plan.step(s)
        ]  # fmt: skip
        expected = sum(int((row["labels"] != -100).sum()) for row in rows)
        assert all(int(items[r][step]["num_items_in_batch"]) == expected for r in range(3))


def test_a_short_last_step_left_out_is_not_counted() -> None:
    tokens, _, source = _corpus(num=70, seed=8)
    ds = PackedIterableDataset(
        source, tokens, max_seq_len=MAX_SEQ_LEN,
        collate=CollateOptions(pad_token_id=PAD),
        seed=1, rows_per_rank=4,
        grad_accum=2, drop_remainder=True, return_num_items_in_batch=True,
    )  # fmt: skip
    assert len(ds.plan) % 4  # a short last step exists, and drop_remainder leaves it out
    items = list(ds)
    assert len(items) == len(ds.plan) // 4
    last = len(items) - 1
    first = last // 2 * 2
    trained = [i for s in range(first, last + 1) for b in ds.plan.step(s) for i in b]
    assert int(items[-1]["num_items_in_batch"]) == _brute_force([tokens[i] for i in trained], None)


@pytest.mark.parametrize(
    "repack", [{"length_multiple": 4}, {"length_multiple": 4, "max_seq_len": 12}]
)
def test_a_length_multiple_counts_the_sequences_not_their_rounded_slots(
    tmp_path: Any, repack: dict
) -> None:
    from token_datasets import store_config, write_token_files

    from seqpack_cli.prepare import load_prepared, prepare_dataset

    rng = np.random.default_rng(5)
    sequences = [rng.integers(1, 500, int(rng.integers(1, 16))).tolist() for _ in range(80)]
    write_token_files(tmp_path, sequences, cuts=(30,))
    prepare_dataset(store_config(tmp_path))
    prepared = load_prepared(tmp_path / "out").repack(over_cap="truncate", **repack)
    assert prepared.length_multiple == 4
    ds = PackedIterableDataset(prepared,
    collate=CollateOptions(pad_token_id=PAD),
    seed=4, rows_per_rank=2,
                               return_num_items_in_batch=True)  # fmt: skip
    for step, item in enumerate(ds):
        expected = sum(int((ds.collator([b])["labels"] != -100).sum()) for b in ds.plan.step(step))
        assert int(item["num_items_in_batch"]) == expected

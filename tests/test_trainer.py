"""HF `Trainer` on `PackedDataset(format="hf")` with `attn_implementation="seqpack_varlen"`.

The documented drop-in: `data_collator=PackedRowsCollator(pad_to=B * max_seq_len)` with
`per_device_train_batch_size=B`. Trainer (through accelerate) calls the dataset's `set_epoch` at
every epoch, so the second epoch trains on new pairings. A tiny random-init Llama on CPU, where
`seqpack_varlen` attends per sequence.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from seqpack_cli import length_histogram_from_lengths, pack_length_histogram_batched  # noqa: E402
from seqpack_cli.collate import CollateOptions  # noqa: E402
from seqpack_cli.data import PackedDataset  # noqa: E402
from seqpack_cli.hf import register_attention  # noqa: E402
from seqpack_cli.hf.collator import PackedRowsCollator  # noqa: E402

MAX_SEQ_LEN, ROWS = 64, 2


class Recording(PackedRowsCollator):
    """The collator, remembering every batch it made and the bin of every item it took."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.batches: list[dict[str, Any]] = []
        self.bins: list[tuple[tuple[int, ...], ...]] = []  # each item's sequences, sorted

    def __call__(self, items: Any) -> dict[str, Any]:
        for item in items:
            tokens, positions = item["input_ids"][0].tolist(), item["position_ids"][0].tolist()
            starts = [i for i, p in enumerate(positions) if p == 0] + [len(tokens)]
            spans = itertools.pairwise(starts)
            self.bins.append(tuple(sorted(tuple(tokens[s:e]) for s, e in spans)))
        batch = super().__call__(items)
        self.batches.append(batch)
        return batch


def test_trainer_steps_with_seqpack_varlen_over_two_epochs(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(4, 40, size=48)
    tokens = [rng.integers(1, 500, size=n).tolist() for n in lengths]
    counts, pools = length_histogram_from_lengths(lengths)
    templates = pack_length_histogram_batched(counts, max_seq_len=MAX_SEQ_LEN)
    dataset = PackedDataset(
        (templates, pools),
        tokens,
        max_seq_len=MAX_SEQ_LEN,
        collate=CollateOptions(pad_token_id=0, format="hf"),
        seed=7,
    )
    pairings = [{tuple(sorted(b)) for b in dataset.plan}]
    dataset.set_epoch(1)
    pairings.append({tuple(sorted(b)) for b in dataset.plan})
    dataset.set_epoch(0)
    assert pairings[0] != pairings[1]  # the plan re-pairs; Trainer must reach it

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=500,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=ROWS * MAX_SEQ_LEN,
        attn_implementation=register_attention(),
    )
    model = transformers.LlamaForCausalLM(config)
    before = [p.detach().clone() for p in model.parameters()]
    collator = Recording(pad_to=ROWS * MAX_SEQ_LEN)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        num_train_epochs=2,
        per_device_train_batch_size=ROWS,
        learning_rate=1e-3,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=dataset, data_collator=collator
    )
    result = trainer.train()

    steps_per_epoch = -(-len(dataset) // ROWS)
    assert result.global_step == 2 * steps_per_epoch
    assert np.isfinite(result.training_loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    # Every step is one flattened row of exactly ROWS * MAX_SEQ_LEN tokens with its boundaries.
    assert len(collator.batches) == 2 * steps_per_epoch
    assert {tuple(b["input_ids"].shape) for b in collator.batches} == {(1, ROWS * MAX_SEQ_LEN)}
    # Each epoch trained on exactly that epoch's bins: the second one on new pairings.
    for epoch in range(2):
        dataset.set_epoch(epoch)
        expected = sorted(tuple(sorted(tuple(tokens[i]) for i in b)) for b in dataset.plan)
        seen = collator.bins[epoch * len(dataset) : (epoch + 1) * len(dataset)]
        assert sorted(seen) == expected
    assert set(collator.bins[: len(dataset)]) != set(collator.bins[len(dataset) :])

"""Collation: pack_one_bin, PackedCollator's three formats, token sources, labels, errors."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.collate import CollateOptions, FlatTokenSource, PackedCollator, pack_one_bin
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.masking import (
    build_packing_attention_bias,
    build_packing_cu_seqlens,
    build_position_ids,
    build_segment_ids,
)

torch = pytest.importorskip("torch")

# Sequences of lengths 4, 4, 3, 1, 6, 2 with distinct, recognisable token values.
SOURCE = [
    [9, 333, 256, 1],
    [88, 456, 12, 19],
    [56, 23, 865],
    [7],
    [101, 102, 103, 104, 105, 106],
    [201, 202],
]
BINS = [[4, 3, 2], [0, 5], [1]]  # 10, 6 and 4 tokens
MAX_SEQ_LEN = 10


def test_maxtext_matches_the_seed_example_exactly() -> None:
    # seeds/maxtext-packing.txt: three sequences packed into a context of 13, pad 0.
    collator = PackedCollator(SOURCE[:3], 13, 0, format="maxtext")
    features = collator([[0, 1, 2]])
    tokens = [9, 333, 256, 1, 88, 456, 12, 19, 56, 23, 865, 0, 0]
    positions = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 0, 0]
    segmentation = [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 0, 0]
    expected = {
        "inputs": tokens,
        "targets": tokens,
        "inputs_position": positions,
        "targets_position": positions,
        "inputs_segmentation": segmentation,
        "targets_segmentation": segmentation,
    }
    assert sorted(features) == sorted(expected)
    for key, row in expected.items():
        assert isinstance(features[key], np.ndarray) and features[key].dtype == np.int32
        assert features[key].tolist() == [row], key


def test_padded_golden() -> None:
    batch = PackedCollator(SOURCE, MAX_SEQ_LEN, 0)(BINS)
    assert batch["input_ids"].tolist() == [
        [101, 102, 103, 104, 105, 106, 7, 56, 23, 865],
        [9, 333, 256, 1, 201, 202, 0, 0, 0, 0],
        [88, 456, 12, 19, 0, 0, 0, 0, 0, 0],
    ]
    # First token of every sequence and padding -> -100; the 1-token sequence has no target.
    assert batch["labels"].tolist() == [
        [-100, 102, 103, 104, 105, 106, -100, -100, 23, 865],
        [-100, 333, 256, 1, -100, 202, -100, -100, -100, -100],
        [-100, 456, 12, 19, -100, -100, -100, -100, -100, -100],
    ]
    assert batch["position_ids"].tolist() == [
        [0, 1, 2, 3, 4, 5, 0, 0, 1, 2],
        [0, 1, 2, 3, 0, 1, 0, 0, 0, 0],
        [0, 1, 2, 3, 0, 0, 0, 0, 0, 0],
    ]
    # Padding takes the row's next unused id.
    assert batch["sequence_ids"].tolist() == [
        [0, 0, 0, 0, 0, 0, 1, 2, 2, 2],
        [0, 0, 0, 0, 1, 1, 2, 2, 2, 2],
        [0, 0, 0, 0, 1, 1, 1, 1, 1, 1],
    ]
    assert batch["attention_mask"].tolist() == [[1] * 10, [1] * 6 + [0] * 4, [1] * 4 + [0] * 6]
    assert batch["cu_seqlens"].dtype == torch.int32
    assert batch["cu_seqlens"].tolist() == [0, 6, 7, 10, 14, 16, 20]
    assert batch["max_seqlen"] == 6
    assert all(batch[k].dtype == torch.int64 for k in ("input_ids", "labels", "position_ids"))


def test_padded_agrees_with_the_builders() -> None:
    batch = PackedCollator(SOURCE, MAX_SEQ_LEN, 0)(BINS)
    ids, mask = batch["sequence_ids"], batch["attention_mask"]
    cu_seqlens, max_seqlen = build_packing_cu_seqlens(ids, mask)
    assert torch.equal(cu_seqlens, batch["cu_seqlens"]) and max_seqlen == batch["max_seqlen"]
    assert torch.equal(build_position_ids(ids, mask), batch["position_ids"])
    maxtext = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format="maxtext")(BINS)
    assert build_segment_ids(ids, mask).tolist() == maxtext["inputs_segmentation"].tolist()
    # Padding has an id of its own, so the bias needs no mask: the two are identical.
    assert torch.equal(
        build_packing_attention_bias(ids, causal=False),
        build_packing_attention_bias(ids, causal=False, attention_mask=mask),
    )


def test_padding_free_golden() -> None:
    batch = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format="padding_free")(BINS)
    flat = [t for b in BINS for i in b for t in SOURCE[i]]
    assert batch["input_ids"].tolist() == [flat]
    assert "attention_mask" not in batch  # Hugging Face would prefer it to position_ids
    assert batch["sequence_ids"].tolist() == [[0] * 6 + [1] + [2] * 3 + [3] * 4 + [4] * 2 + [5] * 4]
    assert batch["position_ids"].tolist() == [
        [0, 1, 2, 3, 4, 5, 0, 0, 1, 2, 0, 1, 2, 3, 0, 1, 0, 1, 2, 3]
    ]
    assert batch["cu_seqlens"].tolist() == [0, 6, 7, 10, 14, 16, 20]
    # Every builder reads the flat row the same way the collator wrote it.
    assert torch.equal(build_position_ids(batch["sequence_ids"]), batch["position_ids"])
    assert torch.equal(build_packing_cu_seqlens(batch["sequence_ids"])[0], batch["cu_seqlens"])
    padded = PackedCollator(SOURCE, MAX_SEQ_LEN, 0)(BINS)
    real = padded["attention_mask"].bool()
    assert torch.equal(batch["labels"][0], padded["labels"][real])


def test_padding_free_ids_stay_distinct_across_one_sequence_bins() -> None:
    # Two one-sequence bins back to back: bin-local ids (0, 0) would merge them.
    batch = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format="padding_free")([[0], [1]])
    assert batch["cu_seqlens"].tolist() == [0, 4, 8]
    assert build_packing_cu_seqlens(batch["sequence_ids"])[0].tolist() == [0, 4, 8]


@pytest.mark.parametrize("fmt", ["padded", "padding_free"])
def test_fixed_length_cu_seqlens_and_overflow(fmt: str) -> None:
    collator = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format=fmt, max_num_seqs=8)
    assert collator(BINS)["cu_seqlens"].tolist() == [0, 6, 7, 10, 14, 16, 20, 20, 20]
    assert collator([[0]])["cu_seqlens"].tolist() == [0, 4, 4, 4, 4, 4, 4, 4, 4]
    tight = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format=fmt, max_num_seqs=5)
    with pytest.raises(ConfigError, match=r"6 sequences but max_num_seqs=5"):
        tight(BINS)


@pytest.mark.parametrize("fmt", ["padded", "padding_free"])
def test_loss_weights_sum_to_one_per_sequence(fmt: str) -> None:
    collator = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format=fmt, return_loss_weights=True)
    batch = collator(BINS)
    weights, labels = batch["loss_weights"], batch["labels"]
    assert weights.dtype == torch.float32 and weights.shape == labels.shape
    assert (weights[labels == -100] == 0).all() and (weights[labels != -100] > 0).all()
    # Group by (row, sequence id): every sequence of n >= 2 tokens sums to 1, [7] sums to 0.
    sums = {}
    for row in range(labels.shape[0]):
        for seq in batch["sequence_ids"][row].unique().tolist():
            members = batch["sequence_ids"][row] == seq
            if fmt == "padded" and not batch["attention_mask"][row][members].any():
                continue  # the padding run
            sums[len(sums)] = float(weights[row][members].sum())
    assert sorted(round(s, 6) for s in sums.values()) == [0.0] + [1.0] * 5


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 11), max_size=4),
)
def test_labels_never_cross_a_boundary(lengths: list[int], cuts: list[int]) -> None:
    # Random sequences split into random bins; a label is either padding (-100) or the token
    # at that place, and then the previous place holds the same sequence's previous token.
    source = [list(range(100 * i, 100 * i + n)) for i, n in enumerate(lengths)]
    edges = sorted({0, len(lengths), *(c for c in cuts if c < len(lengths))})
    bins = [list(range(a, b)) for a, b in itertools.pairwise(edges) if b > a]
    max_seq_len = max(sum(lengths[i] for i in b) for b in bins)
    batch = PackedCollator(source, max_seq_len, -1)(bins)
    labels, tokens = batch["labels"], batch["input_ids"]
    ids, positions = batch["sequence_ids"], batch["position_ids"]
    targeted = labels != -100
    assert torch.equal(labels[targeted], tokens[targeted])
    assert not targeted[:, 0].any()
    prev_same = (ids[:, 1:] == ids[:, :-1]) & (positions[:, 1:] == positions[:, :-1] + 1)
    assert (prev_same | ~targeted[:, 1:]).all()
    # Exactly n - 1 targets per sequence: nothing lost, nothing extra.
    assert int(targeted.sum()) == sum(n - 1 for n in lengths)


def _memmap_source(tmp_path: Path) -> FlatTokenSource:
    flat = np.concatenate([np.asarray(s, dtype=np.int32) for s in SOURCE])
    np.save(tmp_path / "tokens.npy", flat)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in SOURCE])])
    return FlatTokenSource(np.load(tmp_path / "tokens.npy", mmap_mode="r"), offsets)


TOKEN_SOURCES = {
    "list_of_lists": lambda tmp: SOURCE,
    "tuple_of_tuples": lambda tmp: tuple(tuple(s) for s in SOURCE),
    "list_of_numpy_uint16": lambda tmp: [np.asarray(s, dtype=np.uint16) for s in SOURCE],
    "numpy_object_array": lambda tmp: np.array(
        [np.asarray(s) for s in SOURCE] + [None], dtype=object
    )[:-1],
    "list_of_torch": lambda tmp: [torch.tensor(s, dtype=torch.int32) for s in SOURCE],
    "memmap_flat_offsets": _memmap_source,
}


@pytest.mark.parametrize("kind", sorted(TOKEN_SOURCES))
def test_every_token_source_kind_collates_the_same(kind: str, tmp_path: Path) -> None:
    expected = PackedCollator(SOURCE, MAX_SEQ_LEN, 0)(BINS)
    got = PackedCollator(TOKEN_SOURCES[kind](tmp_path), MAX_SEQ_LEN, 0)(BINS)
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        assert torch.equal(got[key], value) if key != "max_seqlen" else got[key] == value


@pytest.mark.parametrize("as_torch", [False, True])
def test_two_dimensional_sources(as_torch: bool) -> None:
    # A 2-D array holds equal-length sequences, one per row; gathered in one go.
    grid = np.arange(30, dtype=np.int64).reshape(6, 5)
    source = torch.from_numpy(grid) if as_torch else grid
    batch = PackedCollator(source, 10, -1)([[4, 1], [2]])
    assert batch["input_ids"].tolist() == [
        [20, 21, 22, 23, 24, 5, 6, 7, 8, 9],
        [10, 11, 12, 13, 14, -1, -1, -1, -1, -1],
    ]


def test_hugging_face_dataset_column() -> None:
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_dict({"input_ids": SOURCE})
    expected = PackedCollator(SOURCE, MAX_SEQ_LEN, 0)(BINS)
    for source in (dataset["input_ids"], dataset.with_format("numpy")["input_ids"]):
        got = PackedCollator(source, MAX_SEQ_LEN, 0)(BINS)
        assert torch.equal(got["input_ids"], expected["input_ids"])


def test_pack_one_bin_keeps_the_reference_semantics() -> None:
    tokens, sequence_ids = pack_one_bin([3, 2], SOURCE, 8, 0)
    assert tokens.tolist() == [7, 56, 23, 865, 0, 0, 0, 0]
    assert sequence_ids.tolist() == [0, 1, 1, 1, 1, 1, 1, 1]  # padding reuses the last id
    assert tokens.dtype == sequence_ids.dtype == torch.int64
    full, ids = pack_one_bin([4, 3, 2], SOURCE, 10, 0)  # exactly full: no padding at all
    assert full.tolist() == PackedCollator(SOURCE, 10, 0)([[4, 3, 2]])["input_ids"][0].tolist()
    assert ids.tolist() == [0] * 6 + [1] + [2] * 3


def test_pack_one_bin_overflow_names_the_bin_and_lengths() -> None:
    with pytest.raises(InputError, match=r"sequence ids \[4, 0\], lengths \[6, 4\].*10 tokens"):
        pack_one_bin([4, 0], SOURCE, 8, 0)


def test_collator_overflow_names_the_bin() -> None:
    with pytest.raises(InputError, match=r"bin 1 of the batch .*max_seq_len=9"):
        PackedCollator(SOURCE, 9, 0)([[0, 5], [4, 3, 2]])


@pytest.mark.parametrize(
    ("source", "bins", "message"),
    [
        (SOURCE, [], "no bins"),
        (SOURCE, [[0], []], "bin 1 of the batch holds no sequence ids"),
        (SOURCE, [[0, 17]], "no sequence for one of the ids"),
        ([[1, 2], []], [[1]], "non-empty 1-D"),
        ([[1.5, 2.0]], [[0]], "integer token ids"),
        ([{"input_ids": [1, 2]}], [[0]], r"dataset\['input_ids'\]"),
        ([[[1, 2]]], [[0]], "1-D"),
    ],
)
def test_collator_input_errors(source: object, bins: list[list[int]], message: str) -> None:
    with pytest.raises(InputError, match=message):
        PackedCollator(source, 8, 0)(bins)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "flat"}, "padded, padding_free, maxtext"),
        ({"format": "maxtext", "return_loss_weights": True}, "format='maxtext'"),
        ({"format": "maxtext", "max_num_seqs": 4}, "format='maxtext'"),
        ({"max_seq_len": 0}, "max_seq_len is 0; expected a positive integer"),
        ({"pad_token_id": 1.5}, "pad_token_id is 1.5 of type float; expected an integer"),
        ({"max_num_seqs": 0}, r"max_num_seqs is 0; expected a positive integer \(the most"),
    ],
)
def test_collator_config_errors(kwargs: dict[str, object], message: str) -> None:
    options: dict[str, object] = {"max_seq_len": 8, "pad_token_id": 0, **kwargs}
    with pytest.raises(ConfigError, match=message):
        PackedCollator(SOURCE, **options)  # type: ignore[arg-type]


def test_flat_token_source_checks_and_gathers() -> None:
    source = FlatTokenSource(np.arange(10), [0, 3, 3, 7, 10])
    assert len(source) == 4 and source[3].tolist() == [7, 8, 9]
    tokens, lengths = source.take(np.array([3, 0, 2]))
    assert tokens.tolist() == [7, 8, 9, 0, 1, 2, 3, 4, 5, 6] and lengths.tolist() == [3, 3, 4]
    with pytest.raises(InputError, match="outside FlatTokenSource"):
        source.take(np.array([4]))
    with pytest.raises(InputError, match="non-decreasing"):
        FlatTokenSource(np.arange(10), [0, 5, 3])
    with pytest.raises(InputError, match="1-D integer"):
        FlatTokenSource(np.zeros(4), [0, 4])


def test_maxtext_needs_no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    features = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format="maxtext")(BINS)
    assert features["inputs"].shape == (3, MAX_SEQ_LEN)
    with pytest.raises(ConfigError, match=r"pip install 'seqpack-cli\[torch\]'"):
        PackedCollator(SOURCE, MAX_SEQ_LEN, 0)(BINS)


# Labels and loss masks: same protocol as the tokens, indexed by the same ids.
LABELS = [[-7 - t for t in range(len(s))] for s in SOURCE]  # distinct from every token
MASKS = [[1, 0, 1, 1], [0, 1, 1, 0], [1, 1, 0], [1], [0, 0, 1, 1, 0, 1], [1, 0]]


def test_hf_golden() -> None:
    batch = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format="hf")(BINS)
    flat = [t for b in BINS for i in b for t in SOURCE[i]]
    assert sorted(batch) == sorted(
        [
            "input_ids",
            "labels",
            "position_ids",
            "seq_idx",
            "cu_seq_lens_q",
            "cu_seq_lens_k",
            "max_length_q",
            "max_length_k",
        ]
    )
    assert batch["input_ids"].tolist() == [flat]
    assert batch["position_ids"].tolist() == [
        [0, 1, 2, 3, 4, 5, 0, 0, 1, 2, 0, 1, 2, 3, 0, 1, 0, 1, 2, 3]
    ]
    assert batch["seq_idx"].tolist() == [[0] * 6 + [1] + [2] * 3 + [3] * 4 + [4] * 2 + [5] * 4]
    for key in ("input_ids", "labels", "position_ids"):
        assert batch[key].dtype == torch.int64 and batch[key].shape == (1, 20), key
    assert batch["seq_idx"].dtype == torch.int32
    for key in ("cu_seq_lens_q", "cu_seq_lens_k"):
        assert batch[key].dtype == torch.int32 and batch[key].tolist() == [0, 6, 7, 10, 14, 16, 20]
    assert batch["max_length_q"] == batch["max_length_k"] == 6
    assert type(batch["max_length_q"]) is int
    padding_free = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format="padding_free")(BINS)
    assert torch.equal(batch["labels"], padding_free["labels"])
    assert torch.equal(batch["seq_idx"].long(), padding_free["sequence_ids"])


def test_hf_fixed_length_boundaries_and_loss_weights() -> None:
    collator = PackedCollator(
        SOURCE, MAX_SEQ_LEN, 0, format="hf", max_num_seqs=8, return_loss_weights=True
    )
    batch = collator(BINS)
    assert batch["cu_seq_lens_q"].tolist() == [0, 6, 7, 10, 14, 16, 20, 20, 20]
    assert torch.equal(batch["cu_seq_lens_k"], batch["cu_seq_lens_q"])
    reference = PackedCollator(
        SOURCE, MAX_SEQ_LEN, 0, format="padding_free", return_loss_weights=True
    )(BINS)
    assert torch.equal(batch["loss_weights"], reference["loss_weights"])


@pytest.mark.parametrize("fmt", ["padded", "padding_free", "hf"])
def test_labels_source_golden(fmt: str) -> None:
    batch = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format=fmt, labels_source=LABELS)([[4, 3, 2]])
    # The given labels, except each sequence's first token: -100.
    assert batch["labels"].tolist() == [[-100, -8, -9, -10, -11, -12, -100, -100, -8, -9]]
    assert batch["input_ids"].tolist() == [[101, 102, 103, 104, 105, 106, 7, 56, 23, 865]]


@pytest.mark.parametrize("fmt", ["padded", "padding_free", "hf"])
def test_loss_mask_golden(fmt: str) -> None:
    batch = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format=fmt, loss_mask_source=MASKS)([[4, 3, 2]])
    # Mask 0 -> -100; mask 1 -> the token, except a sequence's first token (mask 1 or not).
    assert batch["labels"].tolist() == [[-100, -100, 103, 104, -100, 106, -100, -100, 23, -100]]


def test_padded_labels_pad_the_padding() -> None:
    batch = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, labels_source=LABELS)([[0, 5]])
    assert batch["labels"].tolist() == [[-100, -8, -9, -10, -100, -8, -100, -100, -100, -100]]


@pytest.mark.parametrize("fmt", ["padded", "padding_free", "hf"])
def test_loss_weights_follow_the_loss_mask(fmt: str) -> None:
    collator = PackedCollator(
        SOURCE, MAX_SEQ_LEN, 0, format=fmt, loss_mask_source=MASKS, return_loss_weights=True
    )
    batch = collator([[4, 3, 2]])
    # Targets: sequence 4 predicts 103, 104, 106 (1/3 each); [7] nothing; sequence 2 only 23.
    third = np.float32(1) / np.float32(3)
    expected = [0, 0, third, third, 0, third, 0, 0, 1, 0]
    assert batch["loss_weights"].tolist() == [[float(np.float32(w)) for w in expected]]


def test_without_labels_the_weights_are_unchanged() -> None:
    # The reference: 1 / (n - 1) on every token but the first.
    batch = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format="hf", return_loss_weights=True)([[4, 2]])
    fifth, half = float(np.float32(1) / np.float32(5)), float(np.float32(1) / np.float32(2))
    assert batch["loss_weights"].tolist() == [[0.0] + [fifth] * 5 + [0.0, half, half]]


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=10),
    fmt=st.sampled_from(["padded", "padding_free", "hf"]),
    kind=st.sampled_from(["labels", "mask"]),
)
def test_given_labels_never_cross_a_boundary(
    data: st.DataObject, lengths: list[int], fmt: str, kind: str
) -> None:
    # Random labels (some already -100) or masks; one bin per two sequences.
    source = [list(range(100 * i, 100 * i + n)) for i, n in enumerate(lengths)]
    values = [
        data.draw(
            st.lists(
                st.sampled_from([-100, 1, 2, 3] if kind == "labels" else [0, 1]),
                min_size=n,
                max_size=n,
            )
        )
        for n in lengths
    ]
    bins = [list(range(i, min(i + 2, len(lengths)))) for i in range(0, len(lengths), 2)]
    max_seq_len = max(sum(lengths[i] for i in b) for b in bins)
    given = {"labels_source": values} if kind == "labels" else {"loss_mask_source": values}
    collator = PackedCollator(
        source, max_seq_len, -1, format=fmt, return_loss_weights=True, **given
    )
    batch = collator(bins)
    labels, weights = batch["labels"], batch["loss_weights"]
    if fmt == "padded":
        real = batch["attention_mask"].bool()
        labels, weights, positions = labels[real], weights[real], batch["position_ids"][real]
    else:
        labels, weights, positions = labels[0], weights[0], batch["position_ids"][0]
    # What each token's label must be, built sequence by sequence.
    order = [i for b in bins for i in b]
    expected = []
    for i in order:
        for t, (token, value) in enumerate(zip(source[i], values[i], strict=True)):
            target = t > 0 and (value != -100 if kind == "labels" else value == 1)
            expected.append((value if kind == "labels" else token) if target else -100)
    assert labels.tolist() == expected
    assert (labels[positions == 0] == -100).all()
    assert ((weights > 0) == (labels != -100)).all()
    # Every sequence with a target sums to 1; the weights sum to that number of sequences.
    with_targets = sum(
        any((v != -100) if kind == "labels" else v == 1 for v in values[i][1:]) for i in order
    )
    assert float(weights.sum()) == pytest.approx(with_targets, abs=1e-5)


class _CountingStore:
    """A store with the batch-fetch protocol, as an on-disk token store would have."""

    def __init__(self, sequences: list[list[int]]) -> None:
        self.flat = FlatTokenSource(
            np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences]),
            np.concatenate([[0], np.cumsum([len(s) for s in sequences])]),
        )
        self.calls = 0

    def __getitem__(self, seq_id: int) -> np.ndarray:
        raise AssertionError("take_sequences should have been used")

    def take_sequences(self, seq_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.calls += 1
        return self.flat.take(seq_ids)


def test_stores_with_take_sequences_are_fetched_in_one_call() -> None:
    tokens, labels = _CountingStore(SOURCE), _CountingStore(LABELS)
    got = PackedCollator(tokens, MAX_SEQ_LEN, 0, format="hf", labels_source=labels)(BINS)
    expected = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format="hf", labels_source=LABELS)(BINS)
    assert tokens.calls == labels.calls == 1
    for key, value in expected.items():
        assert torch.equal(got[key], value) if torch.is_tensor(value) else got[key] == value


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda s: s, id="list"),
        pytest.param(lambda s: [np.asarray(x, dtype=bool) for x in s], id="bool_arrays"),
        pytest.param(
            lambda s: FlatTokenSource(
                np.concatenate([np.asarray(x, dtype=np.uint8) for x in s]),
                np.concatenate([[0], np.cumsum([len(x) for x in s])]),
            ),
            id="flat_uint8",
        ),
    ],
)
def test_every_loss_mask_kind_gives_the_same_labels(make: object) -> None:
    expected = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, loss_mask_source=MASKS)(BINS)
    got = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, loss_mask_source=make(MASKS))(BINS)  # type: ignore[operator]
    assert torch.equal(got["labels"], expected["labels"])


def test_a_two_dimensional_labels_source() -> None:
    grid = np.arange(30, dtype=np.int64).reshape(6, 5)
    batch = PackedCollator(grid, 10, -1, labels_source=-grid, format="hf")([[4, 1]])
    assert batch["labels"].tolist() == [[-100, -21, -22, -23, -24, -100, -6, -7, -8, -9]]


def _flat(sequences: list[list[int]]) -> FlatTokenSource:
    return FlatTokenSource(
        np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences]),
        np.concatenate([[0], np.cumsum([len(s) for s in sequences])]),
    )


@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("name", ["labels_source", "loss_mask_source"])
def test_a_length_mismatch_names_the_sequence(name: str, flat: bool) -> None:
    values = [list(m) for m in MASKS]
    values[2] = [1, 1]  # sequence 2 has 3 tokens
    source = _flat(values) if flat else values
    collator = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, **{name: source})
    with pytest.raises(InputError, match=rf"{name}\[2\] has 2 values but token_source\[2\] has 3"):
        collator(BINS)
    collator([[0, 5]])  # bins without sequence 2 collate


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"loss_mask_source": [[1, 2, 0, 1, 1, 1]] * 6},
            r"loss_mask_source\[4\] holds 2 at position 1",
        ),
        ({"loss_mask_source": [[0.5] * 6] * 6}, r"loss_mask_source\[4\] has dtype float64"),
        ({"labels_source": [[True] * 6] * 6}, r"labels_source\[4\] has dtype bool"),
        ({"labels_source": LABELS[:2]}, r"labels_source has no sequence for one of the ids"),
    ],
)
def test_bad_labels_and_masks_are_input_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        PackedCollator(SOURCE, MAX_SEQ_LEN, 0, **kwargs)([[4]])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"labels_source": LABELS, "loss_mask_source": MASKS}, "pass one"),
        ({"format": "maxtext", "labels_source": LABELS}, "format='maxtext' takes no"),
        ({"format": "maxtext", "loss_mask_source": MASKS}, "format='maxtext' takes no"),
    ],
)
def test_label_option_conflicts(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PackedCollator(SOURCE, MAX_SEQ_LEN, 0, **kwargs)  # type: ignore[arg-type]


def test_an_id_outside_a_flat_labels_source_names_it() -> None:
    collator = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, labels_source=_flat(LABELS[:4]))
    with pytest.raises(InputError, match=r"labels_source: sequence id 4 is outside"):
        collator([[4]])


# ---- truncate: the training side of `prepare --over-cap truncate` ---------------------------


def test_truncate_keeps_the_first_max_seq_len_tokens_and_labels() -> None:
    torch = pytest.importorskip("torch")
    tokens = [list(range(100, 112)), [7, 8, 9]]  # 12 tokens (over the cap of 10), then 3
    labels = [list(range(200, 212)), [-100, 8, 9]]
    collate = PackedCollator(
        tokens, 10, 0, format="padding_free", labels_source=labels, truncate=True
    )
    batch = collate([[0], [1]])
    assert batch["input_ids"].tolist() == [[*range(100, 110), 7, 8, 9]]
    assert batch["labels"].tolist() == [[-100, *range(201, 210), -100, 8, 9]]
    assert batch["position_ids"].tolist() == [[*range(10), 0, 1, 2]]
    assert torch.equal(batch["cu_seqlens"], torch.tensor([0, 10, 13], dtype=torch.int32))
    # Without truncate the same bin is refused, naming the sequence and its length.
    with pytest.raises(InputError, match=r"holds 12 tokens, more than max_seq_len=10"):
        PackedCollator(tokens, 10, 0, format="padding_free")([[0]])
    # A cut sequence still fills its bin: another sequence beside it does not fit.
    with pytest.raises(InputError, match=r"holds 13 tokens, more than max_seq_len=10"):
        collate([[0, 1]])


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=8),
    cap=st.integers(1, 30),
    layout=st.sampled_from(["padded", "padding_free", "hf", "maxtext"]),
)
def test_truncate_gives_each_sequence_its_first_tokens(lengths, cap, layout) -> None:
    if layout != "maxtext":
        pytest.importorskip("torch")
    sequences = [[1000 * (i + 1) + t for t in range(n)] for i, n in enumerate(lengths)]
    batch = PackedCollator(sequences, cap, -1, format=layout, truncate=True)(
        [[i] for i in range(len(lengths))]  # one sequence per bin: each fits once cut
    )
    key = "inputs" if layout == "maxtext" else "input_ids"
    rows = np.asarray(batch[key])
    flat = rows.reshape(-1)
    got = [int(x) for x in flat if x != -1]
    assert got == [t for s in sequences for t in s[:cap]]


# ---- pad_to: one fixed shape, nothing else changes ---------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    fmt=st.sampled_from(["hf", "padding_free"]),
    extra=st.integers(0, 20),
    weights=st.booleans(),
    max_num_seqs=st.sampled_from([None, 10]),
)
def test_pad_to_changes_nothing_but_the_shape(
    lengths: list[int], fmt: str, extra: int, weights: bool, max_num_seqs: int | None
) -> None:
    # Every sequence keeps its tokens, labels, positions, index and cu_seq_lens entries; the
    # slack is one trailing span of its own (positions from 0, labels -100, weight 0).
    source = [list(range(100 * i, 100 * i + n)) for i, n in enumerate(lengths)]
    bins = [[i] for i in range(len(lengths))]
    max_seq_len = max(lengths)
    pad_to = sum(lengths) + extra
    options = {"format": fmt, "return_loss_weights": weights, "max_num_seqs": max_num_seqs}
    plain = PackedCollator(source, max_seq_len, 5, **options)(bins)  # type: ignore[arg-type]
    fixed = PackedCollator(source, max_seq_len, 5, pad_to=pad_to, **options)(bins)  # type: ignore[arg-type]
    total, num_seqs = sum(lengths), len(lengths)
    index_key = "seq_idx" if fmt == "hf" else "sequence_ids"
    cu_key = "cu_seq_lens_q" if fmt == "hf" else "cu_seqlens"
    max_key = "max_length_q" if fmt == "hf" else "max_seqlen"
    for key in ["input_ids", "labels", "position_ids", index_key] + ["loss_weights"] * weights:
        assert fixed[key].shape == (1, pad_to) and fixed[key].dtype == plain[key].dtype
        assert torch.equal(fixed[key][:, :total], plain[key]), key
    tail = slice(total, pad_to)
    assert fixed["input_ids"][0, tail].tolist() == [5] * extra
    assert fixed["labels"][0, tail].tolist() == [-100] * extra
    assert fixed["position_ids"][0, tail].tolist() == list(range(extra))
    assert fixed[index_key][0, tail].tolist() == [num_seqs] * extra
    if weights:
        assert fixed["loss_weights"][0, tail].abs().sum() == 0
    span = [pad_to] if extra else []
    real = plain[cu_key][: num_seqs + 1].tolist()
    expected = real + span
    if max_num_seqs is not None:
        assert fixed[cu_key].shape == plain[cu_key].shape == (max_num_seqs + 1,)
        expected += [pad_to] * (max_num_seqs + 1 - len(expected))
    assert fixed[cu_key].tolist() == expected
    assert fixed[max_key] == max(max(lengths), extra)


def test_pad_to_refusals_name_the_option_and_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"pad_to=20 with format='padded'.*format='hf'"):
        PackedCollator(SOURCE, MAX_SEQ_LEN, 0, pad_to=20)
    with pytest.raises(ConfigError, match=r"pad_to.*at least max_seq_len"):
        PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format="hf", pad_to=MAX_SEQ_LEN - 1)
    collator = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format="hf", pad_to=15)
    with pytest.raises(ConfigError, match=r"holds 16 tokens .*more than pad_to=15; set pad_to"):
        collator(BINS[:2])
    # The padding span counts as one of the max_num_seqs sequences: 2 real ones, then the span.
    fixed = PackedCollator(SOURCE, MAX_SEQ_LEN, 0, format="hf", pad_to=20, max_num_seqs=2)
    with pytest.raises(ConfigError, match=r"holds 3 sequences but max_num_seqs=2"):
        fixed([[4, 3]])


def test_the_datasets_pass_pad_to_through() -> None:
    from seqpack_cli.data import PackedDataset, PackedIterableDataset

    templates = {(4, 3, 2, 1): 1, (6, 4): 1}  # two bins of 10 tokens of SOURCE, rows of 12
    pools = {n: np.array([i for i, s in enumerate(SOURCE) if len(s) == n]) for n in (1, 2, 3, 4, 6)}
    common = {"seed": 0, "max_seq_len": 12}
    hf = {"pad_token_id": 0, "format": "hf"}
    dataset = PackedDataset(
        (templates, pools), SOURCE, collate=CollateOptions(**hf, pad_to=12), **common
    )
    assert [dataset[k]["input_ids"].shape for k in range(len(dataset))] == [(1, 12), (1, 12)]
    stream = PackedIterableDataset(
        (templates, pools),
        SOURCE,
        collate=CollateOptions(**hf, pad_to=24),
        rows_per_rank=2,
        **common,
    )
    assert [batch["input_ids"].shape for batch in stream] == [(1, 24)]
    with pytest.raises(ConfigError, match=r"pad_to=12 but a batch of rows_per_rank=2 .*pad_to=24"):
        PackedIterableDataset(
            (templates, pools),
            SOURCE,
            collate=CollateOptions(**hf, pad_to=12),
            rows_per_rank=2,
            **common,
        )

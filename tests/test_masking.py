"""The torch attention-input builders: golden cases, a per-token oracle, errors, no-torch path."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.masking import (
    build_flex_block_mask,
    build_packing_attention_bias,
    build_packing_cu_seqlens,
    build_position_ids,
    build_segment_ids,
)

torch = pytest.importorskip("torch")

NEG_INF = float("-inf")

# The reference's example: row 0 holds 5 + 3 real tokens then 2 padding positions (which reuse
# id 0, not the last id); row 1 holds 4 + 2 + 4 real tokens and no padding.
REF_IDS = [[0, 0, 0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 2, 2, 2, 2]]
REF_MASK = [[1, 1, 1, 1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]]


def oracle_segments(ids: list[list[int]], mask: list[list[int]] | None) -> list[list[int]]:
    """Per-token loop: 1-based segment number per row (a run of equal ids among real tokens)."""
    out = []
    for r, row in enumerate(ids):
        count, previous, numbers = 0, None, []
        for c, value in enumerate(row):
            if mask is not None and not mask[r][c]:
                numbers.append(0)
                continue
            if previous is None or value != previous:
                count += 1
            previous = value
            numbers.append(count)
        out.append(numbers)
    return out


def oracle_positions(segments: list[list[int]]) -> list[list[int]]:
    out = []
    for row in segments:
        seen: dict[int, int] = {}
        positions = []
        for number in row:
            positions.append(0 if number == 0 else seen.get(number, 0))
            if number:
                seen[number] = seen.get(number, 0) + 1
        out.append(positions)
    return out


def oracle_bias(segments: list[list[int]], causal: bool) -> np.ndarray:
    num_cols = len(segments[0])
    bias = np.full((len(segments), 1, num_cols, num_cols), NEG_INF)
    for r, row in enumerate(segments):
        for i in range(num_cols):
            for j in range(num_cols):
                if row[i] == row[j] and (not causal or j <= i):
                    bias[r, 0, i, j] = 0.0
    return bias


def test_cu_seqlens_reference_example() -> None:
    cu_seqlens, max_seqlen = build_packing_cu_seqlens(torch.tensor(REF_IDS), torch.tensor(REF_MASK))
    assert cu_seqlens.dtype == torch.int32
    assert cu_seqlens.tolist() == [0, 5, 8, 12, 14, 18]
    assert max_seqlen == 5 and isinstance(max_seqlen, int)


def test_cu_seqlens_without_mask_counts_padding_runs() -> None:
    # Without the mask row 0's padding (id 0 after id 1) is a run of its own: 5, 3, 2 | 4, 2, 4.
    cu_seqlens, max_seqlen = build_packing_cu_seqlens(torch.tensor(REF_IDS))
    assert cu_seqlens.tolist() == [0, 5, 8, 10, 14, 16, 20]
    assert max_seqlen == 5


def test_cu_seqlens_fixed_length_pads_with_the_total() -> None:
    ids, mask = torch.tensor(REF_IDS), torch.tensor(REF_MASK)
    cu_seqlens, max_seqlen = build_packing_cu_seqlens(ids, mask, max_num_seqs=8)
    assert cu_seqlens.tolist() == [0, 5, 8, 12, 14, 18, 18, 18, 18]
    assert max_seqlen == 5
    exact, _ = build_packing_cu_seqlens(ids, mask, max_num_seqs=5)
    assert exact.tolist() == [0, 5, 8, 12, 14, 18]


def test_cu_seqlens_overflow_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"5 sequences but max_num_seqs=4.*at least 5"):
        build_packing_cu_seqlens(torch.tensor(REF_IDS), torch.tensor(REF_MASK), max_num_seqs=4)


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "8"])
def test_cu_seqlens_rejects_bad_max_num_seqs(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_num_seqs"):
        build_packing_cu_seqlens(torch.tensor(REF_IDS), max_num_seqs=bad)  # type: ignore[arg-type]


def test_cu_seqlens_of_an_all_padding_batch() -> None:
    cu_seqlens, max_seqlen = build_packing_cu_seqlens(
        torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 4), max_num_seqs=2
    )
    assert cu_seqlens.tolist() == [0, 0, 0] and max_seqlen == 0


def test_position_and_segment_ids_reference_example() -> None:
    ids, mask = torch.tensor(REF_IDS), torch.tensor(REF_MASK)
    assert build_position_ids(ids, mask).tolist() == [
        [0, 1, 2, 3, 4, 0, 1, 2, 0, 0],
        [0, 1, 2, 3, 0, 1, 0, 1, 2, 3],
    ]
    assert build_segment_ids(ids, mask).tolist() == [
        [1, 1, 1, 1, 1, 2, 2, 2, 0, 0],
        [1, 1, 1, 1, 2, 2, 3, 3, 3, 3],
    ]
    assert build_position_ids(ids).dtype == torch.long


def test_one_row_in_gives_one_row_out() -> None:
    assert build_position_ids([0, 0, 1, 1, 1]).tolist() == [0, 1, 0, 1, 2]
    assert build_segment_ids(np.array([3, 3, 7])).tolist() == [1, 1, 2]
    assert build_packing_attention_bias([0, 0, 1]).shape == (1, 1, 3, 3)


def test_left_padding_gap_is_skipped() -> None:
    # Masked positions belong to no segment, wherever they sit: a left-padded row.
    ids, mask = torch.tensor([[0, 0, 0, 1, 1]]), torch.tensor([[0, 1, 1, 1, 1]])
    assert build_packing_cu_seqlens(ids, mask)[0].tolist() == [0, 2, 4]
    assert build_position_ids(ids, mask).tolist() == [[0, 0, 1, 0, 1]]
    assert build_segment_ids(ids, mask).tolist() == [[0, 1, 1, 2, 2]]


def test_bias_golden_causal_and_not() -> None:
    ids = torch.tensor([0, 0, 1, 1, 1])
    allowed = [
        [1, 1, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 0, 1, 1, 1],
        [0, 0, 1, 1, 1],
        [0, 0, 1, 1, 1],
    ]
    expected = torch.where(torch.tensor(allowed).bool(), 0.0, NEG_INF)
    bias = build_packing_attention_bias(ids)
    assert bias.dtype == torch.float32 and bias.shape == (1, 1, 5, 5)
    assert torch.equal(bias[0, 0], expected)
    causal = build_packing_attention_bias(ids, torch.bfloat16, "cpu", causal=True)
    assert causal.dtype == torch.bfloat16
    assert torch.equal(causal[0, 0].float(), expected + torch.full((5, 5), NEG_INF).triu(1))


def test_bias_causal_flag_equals_the_reference_recipe() -> None:
    # The reference adds its own causal triangle to the non-causal bias.
    ids = torch.tensor(REF_IDS)
    num_cols = ids.shape[1]
    triangle = torch.zeros(num_cols, num_cols).masked_fill_(
        torch.ones(num_cols, num_cols, dtype=torch.bool).triu(1), NEG_INF
    )
    assert torch.equal(
        build_packing_attention_bias(ids) + triangle,
        build_packing_attention_bias(ids, causal=True),
    )


def test_bias_with_mask_keeps_reference_padding_apart() -> None:
    # The reference pads with a real sequence's id; with the mask, padding meets only padding.
    ids, mask = torch.tensor(REF_IDS), torch.tensor(REF_MASK)
    bias = build_packing_attention_bias(ids, attention_mask=mask)[0, 0]
    assert torch.isinf(bias[:8, 8:]).all() and torch.isinf(bias[8:, :8]).all()
    assert (bias[8:, 8:] == 0).all() and (bias[:5, :5] == 0).all()


def test_bias_rejects_integer_dtype() -> None:
    with pytest.raises(ConfigError, match="floating dtype"):
        build_packing_attention_bias(torch.tensor(REF_IDS), torch.int32)


@pytest.mark.parametrize(
    ("ids", "mask", "message"),
    [
        ([[0.0, 1.0]], None, "integer tensor"),
        (torch.zeros(1, 2, 3, dtype=torch.long), None, r"\[B, L\] or \[L\]"),
        ([[0, 0, 1]], [[1, 1]], "same shape"),
    ],
)
def test_builders_reject_bad_inputs(ids: object, mask: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        build_position_ids(ids, mask)


@st.composite
def packed_rows(draw: st.DrawFn) -> tuple[list[list[int]], list[list[int]] | None]:
    """Rows of random runs (ids may repeat non-adjacently) and, half the time, a random mask."""
    num_rows = draw(st.integers(1, 3))
    num_cols = draw(st.integers(1, 12))
    ids = [
        draw(st.lists(st.integers(0, 3), min_size=num_cols, max_size=num_cols))
        for _ in range(num_rows)
    ]
    if not draw(st.booleans()):
        return ids, None
    mask = [
        draw(st.lists(st.integers(0, 1), min_size=num_cols, max_size=num_cols))
        for _ in range(num_rows)
    ]
    return ids, mask


@settings(max_examples=60, deadline=None)
@given(packed_rows(), st.booleans())
def test_builders_agree_with_a_per_token_oracle(
    rows: tuple[list[list[int]], list[list[int]] | None], causal: bool
) -> None:
    ids, mask = rows
    mask_tensor = None if mask is None else torch.tensor(mask)
    segments = oracle_segments(ids, mask)
    assert build_segment_ids(torch.tensor(ids), mask_tensor).tolist() == segments
    assert build_position_ids(torch.tensor(ids), mask_tensor).tolist() == oracle_positions(segments)
    # cu_seqlens: run lengths in row-major order over the real tokens.
    lengths = [row.count(n) for row in segments for n in range(1, max(row, default=0) + 1)]
    cu_seqlens, max_seqlen = build_packing_cu_seqlens(torch.tensor(ids), mask_tensor)
    assert cu_seqlens.tolist() == np.concatenate([[0], np.cumsum(lengths)]).tolist()
    assert max_seqlen == max(lengths, default=0)
    # The bias follows the segments; masked positions form segment 0, met only by padding.
    bias = build_packing_attention_bias(
        torch.tensor(ids), torch.float64, causal=causal, attention_mask=mask_tensor
    )
    np.testing.assert_array_equal(bias.numpy(), oracle_bias(segments, causal))


# Eager FlexAttention on CPU warns that it is unfused; that is what these tests want.
QUIET_FLEX = pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")


@QUIET_FLEX
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("block_size", [4, 128])
def test_flex_block_mask_matches_the_bias(causal: bool, block_size: int) -> None:
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    ids = torch.tensor(
        [[0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 4, 4], [0] * 10 + [1] * 9]
    )
    mask = torch.ones_like(ids).index_fill_(1, torch.tensor([17, 18]), 0)
    bias = build_packing_attention_bias(ids, torch.float64, causal=causal, attention_mask=mask)
    block_mask = build_flex_block_mask(
        ids, causal=causal, attention_mask=mask, block_size=block_size
    )
    assert block_mask.shape == (2, 1, 19, 19)
    # The mask_mod, evaluated on every (row, query, key), is exactly the bias's pattern...
    allowed = block_mask.mask_mod(
        torch.arange(2)[:, None, None],
        torch.tensor(0),
        torch.arange(19)[None, :, None],
        torch.arange(19)[None, None, :],
    )
    assert torch.equal(torch.where(allowed, 0.0, NEG_INF).double(), bias[:, 0])
    # ...and attention through it equals attention through the bias.
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 19, 8, dtype=torch.float64, generator=gen) for _ in range(3))
    out = flex.flex_attention(q, k, v, block_mask=block_mask)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_without_torch_a_call_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'seqpack-cli\[torch\]'"):
        build_packing_cu_seqlens([[0, 0, 1]])


@pytest.mark.parametrize("bad", [0, True, 2.5])
def test_flex_block_size_must_be_positive(bad: object) -> None:
    pytest.importorskip("torch.nn.attention.flex_attention")
    with pytest.raises(ConfigError, match=r"block_size is .*; expected a positive integer such as"):
        build_flex_block_mask([[0, 0, 1]], block_size=bad)  # type: ignore[arg-type]


def test_flex_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.nn.attention.flex_attention", None)
    with pytest.raises(ConfigError, match=r"flex_attention.*build_packing_attention_bias"):
        build_flex_block_mask([[0, 0, 1]])


BLOCK_MASK_FIELDS = (
    "kv_num_blocks",
    "kv_indices",
    "full_kv_num_blocks",
    "full_kv_indices",
    "q_num_blocks",
    "q_indices",
    "full_q_num_blocks",
    "full_q_indices",
)


@settings(max_examples=40, deadline=None)
@given(packed_rows(), st.booleans(), st.sampled_from([1, 2, 3, 4, 8]))
def test_flex_block_structure_equals_create_block_mask(
    rows: tuple[list[list[int]], list[list[int]] | None], causal: bool, block_size: int
) -> None:
    # The block structure is derived from segment ranges, never from the L x L mask; it must
    # be exactly what create_block_mask finds by evaluating the mask_mod everywhere.
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    ids, mask = rows
    mask_tensor = None if mask is None else torch.tensor(mask)
    ours = build_flex_block_mask(
        torch.tensor(ids), causal=causal, attention_mask=mask_tensor, block_size=block_size
    )
    num_rows, num_cols = len(ids), len(ids[0])
    theirs = flex.create_block_mask(
        ours.mask_mod, num_rows, None, num_cols, num_cols, device="cpu", BLOCK_SIZE=block_size
    )
    for field in BLOCK_MASK_FIELDS:
        assert torch.equal(getattr(ours, field), getattr(theirs, field)), field

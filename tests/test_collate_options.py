"""Options once (issue 25): the datasets take the collator's options as one `CollateOptions`
(`collate=`); the keywords they took before still work, each with a `DeprecationWarning`, and
give the same batches."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Any

import numpy as np
import pytest
from conftest import same_batch

pytest.importorskip("torch")
from seqpack_cli import CollateOptions, PackedCollator
from seqpack_cli.data import PackedDataset, PackedIterableDataset
from seqpack_cli.errors import ConfigError

_RNG = np.random.default_rng(0)
TOKENS = [_RNG.integers(1, 100, size=n).tolist() for n in [5, 3, 8, 2, 7, 4, 6, 1, 9, 3, 2, 8]]
TEMPLATES = {(8, 6, 2): 1, (9, 7): 1, (5, 4, 3, 3, 1): 1, (8, 2): 1}
POOLS = {n: np.array([i for i, t in enumerate(TOKENS) if len(t) == n]) for n in range(1, 10)}
POOLS = {n: ids for n, ids in POOLS.items() if ids.size}
MAX_SEQ_LEN = 64  # room for the thd padding of every sequence

# One non-default value of every collator option (cp_* and length_multiple need format="thd").
OPTION_VALUES: dict[str, dict[str, Any]] = {
    "pad_token_id": {"pad_token_id": 7},
    "label_pad_id": {"pad_token_id": 0, "label_pad_id": -1},
    "format": {"pad_token_id": 0, "format": "padding_free"},
    "return_loss_weights": {"pad_token_id": 0, "return_loss_weights": True},
    "max_num_seqs": {"pad_token_id": 0, "max_num_seqs": 12},
    "truncate": {"pad_token_id": 0, "truncate": True},
    "pad_to": {"pad_token_id": 0, "format": "hf", "pad_to": 128},
    "cp_size": {"pad_token_id": 0, "format": "thd", "cp_size": 2},
    "cp_rank": {"pad_token_id": 0, "format": "thd", "cp_size": 2, "cp_rank": 1},
    "length_multiple": {"pad_token_id": 0, "format": "thd", "length_multiple": 8},
}


def test_every_collator_option_is_a_collate_option() -> None:
    collator_keywords = {
        name
        for name, parameter in inspect.signature(PackedCollator).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
        and name not in ("labels_source", "loss_mask_source")
    } | {"pad_token_id"}
    assert {field.name for field in dataclasses.fields(CollateOptions)} == collator_keywords
    assert set(OPTION_VALUES) == collator_keywords


@pytest.mark.parametrize("dataset_class", [PackedDataset, PackedIterableDataset])
@pytest.mark.parametrize("option", sorted(OPTION_VALUES))
def test_an_old_keyword_call_warns_once_per_option_and_gives_the_same_batches(
    dataset_class: Any, option: str
) -> None:
    values = OPTION_VALUES[option]
    common = {"seed": 3, "max_seq_len": MAX_SEQ_LEN, "rows_per_rank": 2}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = dataset_class((TEMPLATES, POOLS), TOKENS, **common, **values)
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert sorted(str(w.message).split("(")[1].split("=")[0] for w in deprecations) == sorted(
        values
    )
    assert all(w.filename == __file__ for w in deprecations)  # points at the caller
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = dataset_class((TEMPLATES, POOLS), TOKENS, **common, collate=CollateOptions(**values))
    assert old.collator.options == new.collator.options
    old_batches = list(old) if dataset_class is PackedIterableDataset else [old[0], old[1]]
    new_batches = list(new) if dataset_class is PackedIterableDataset else [new[0], new[1]]
    assert len(old_batches) == len(new_batches) > 0
    assert all(same_batch(a, b) for a, b in zip(old_batches, new_batches, strict=True))


def test_collate_options_round_trip_through_a_collator() -> None:
    options = CollateOptions(pad_token_id=3, format="hf", pad_to=128, max_num_seqs=8)
    collator = PackedCollator.from_options(TOKENS, MAX_SEQ_LEN, options)
    # As given, with truncate resolved (None: the sources' policy, here none).
    assert collator.options == dataclasses.replace(options, truncate=False)
    again = PackedCollator.from_options(TOKENS, MAX_SEQ_LEN, collator.options)
    assert again.options == collator.options
    assert same_batch(again([[0, 1], [2]]), collator([[0, 1], [2]]))


def test_bad_collate_arguments_are_one_line_errors() -> None:
    source = (TEMPLATES, POOLS)
    with pytest.raises(ConfigError, match=r"has no collator options; pass collate=Collate"):
        PackedDataset(source, TOKENS, seed=0, max_seq_len=MAX_SEQ_LEN)
    with pytest.raises(ConfigError, match="got collate= and the collator option pad_token_id="):
        PackedDataset(
            source,
            TOKENS,
            seed=0,
            max_seq_len=MAX_SEQ_LEN,
            collate=CollateOptions(pad_token_id=0),
            pad_token_id=0,
        )
    with pytest.raises(ConfigError, match="collate is a dict; expected a CollateOptions"):
        PackedDataset(source, TOKENS, seed=0, max_seq_len=MAX_SEQ_LEN, collate={"pad_token_id": 0})
    with pytest.raises(TypeError, match="unexpected keyword argument 'pad_token'"):
        PackedIterableDataset(source, TOKENS, seed=0, max_seq_len=MAX_SEQ_LEN, pad_token=0)

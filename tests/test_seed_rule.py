"""One seed rule (issue 25): every public entry point that takes a seed accepts the signed 64-bit
range and refuses anything else with the same one-line `ConfigError`; seeds >= 0 give what they
always gave."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from seqpack_cli import CollateOptions
from seqpack_cli.cli.app import app
from seqpack_cli.data import PackedDataset, PackedIterableDataset
from seqpack_cli.epoch.permutations import FeistelPermutation
from seqpack_cli.epoch.plan import EpochPlan, materialize_epoch
from seqpack_cli.errors import ConfigError
from seqpack_cli.packing.per_sequence import greedy_pack_sequences, heap_pack_sequences
from seqpack_cli.seeding import INT64_MAX, INT64_MIN, check_seed, numpy_seed, shuffle_bins
from seqpack_cli.stats.baselines import estimate_sequential_packing
from seqpack_cli.stats.describe import StatsRequest
from seqpack_cli.stats.rank_balance import RankBalanceOptions
from seqpack_cli.stats.sweep import sweep_max_seq_len

_LENGTHS = [5, 3, 3, 7, 2, 9, 1, 4]
_SOURCE = (Counter({(3, 2): 1}), {3: np.array([0]), 2: np.array([1])})
_TOKENS = [[1, 2, 3], [4, 5]]
_COLLATE = CollateOptions(pad_token_id=0)

ENTRY_POINTS: dict[str, Callable[[Any], Any]] = {
    "EpochPlan": lambda seed: EpochPlan(Counter({(3,): 2}), {3: np.arange(2)}, seed),
    "FeistelPermutation": lambda seed: FeistelPermutation(10, seed),
    "shuffle_bins": lambda seed: shuffle_bins([1, 2, 3], seed),
    "greedy_pack_sequences": lambda seed: greedy_pack_sequences(_LENGTHS, 10, seed=seed),
    "heap_pack_sequences": lambda seed: heap_pack_sequences(_LENGTHS, 10, seed=seed),
    "estimate_sequential_packing": lambda seed: estimate_sequential_packing(
        {3: 4, 5: 2}, 10, seed=seed
    ),
    "RankBalanceOptions": lambda seed: RankBalanceOptions((2,), cost_per_token=1.0, seed=seed),
    "materialize_epoch": lambda seed: materialize_epoch(*_SOURCE, seed),
    "PackedDataset": lambda seed: PackedDataset(
        _SOURCE, _TOKENS, collate=_COLLATE, max_seq_len=5, seed=seed
    ),
    "PackedIterableDataset": lambda seed: PackedIterableDataset(
        _SOURCE, _TOKENS, collate=_COLLATE, max_seq_len=5, seed=seed
    ),
    "sweep_max_seq_len": lambda seed: sweep_max_seq_len({3: 4, 5: 2}, [10], seed=seed),
    "StatsRequest": lambda seed: StatsRequest(
        ["unused.parquet"], max_seq_lens=(10,), length_column="n", seed=seed
    ),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("seed", [0, 1, -5, INT64_MIN, INT64_MAX, np.int64(-3), np.uint8(7)])
def test_every_entry_point_accepts_the_signed_64_bit_range(entry: str, seed: Any) -> None:
    ENTRY_POINTS[entry](seed)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("seed", [INT64_MAX + 1, INT64_MIN - 1, 1.5, "7", True])
def test_every_entry_point_refuses_the_same_way(entry: str, seed: Any) -> None:
    with pytest.raises(ConfigError) as raised:
        ENTRY_POINTS[entry](seed)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("seed is ")
    assert "expected an integer in the signed 64-bit range" in message
    assert "seed_from_components" in message


def test_none_is_a_seed_only_where_the_entry_point_is_deterministic_without_one() -> None:
    assert check_seed(None) is None
    with pytest.raises(ConfigError, match="seed is None of type NoneType; expected an integer in"):
        check_seed(None, optional=False)
    with pytest.raises(ConfigError, match="seed is None"):
        FeistelPermutation(4, None)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.integers(INT64_MIN, INT64_MAX))
def test_numpy_seed_keeps_every_non_negative_seed_and_maps_the_rest_into_range(seed: int) -> None:
    mapped = numpy_seed(seed)
    assert 0 <= mapped < 2**64
    assert (mapped == seed) == (seed >= 0)
    np.random.default_rng(mapped)  # a seed numpy takes


@pytest.mark.parametrize("seed", ["-5", str(INT64_MIN), str(INT64_MAX)])
def test_the_cli_seed_option_takes_the_signed_64_bit_range(tmp_path: Any, seed: str) -> None:
    path = tmp_path / "lengths.parquet"
    pq.write_table(pa.table({"n": [5, 3, 3, 7]}), path)
    result = CliRunner().invoke(
        app, ["stats", str(path), "--length-column", "n", "--max-seq-len", "10", "--seed", seed]
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("seed", [str(INT64_MAX + 1), str(INT64_MIN - 1)])
def test_the_cli_refuses_a_seed_out_of_range_in_one_line_naming_the_option(
    tmp_path: Any, seed: str
) -> None:
    path = tmp_path / "lengths.parquet"
    pq.write_table(pa.table({"n": [5, 3, 3, 7]}), path)
    result = CliRunner().invoke(
        app, ["stats", str(path), "--length-column", "n", "--max-seq-len", "10", "--seed", seed]
    )
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert f"--seed is {seed}" in lines[0]
    assert "expected an integer in the signed 64-bit range" in lines[0]

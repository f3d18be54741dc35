"""One seed rule (issue 25): every public entry point that takes a seed accepts the signed 64-bit
range and refuses anything else with the same one-line `ConfigError`; seeds >= 0 give what they
always gave."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.epoch.permutations import FeistelPermutation
from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.errors import ConfigError
from seqpack_cli.packing.per_sequence import greedy_pack_sequences, heap_pack_sequences
from seqpack_cli.seeding import INT64_MAX, INT64_MIN, check_seed, numpy_seed, shuffle_bins
from seqpack_cli.stats.baselines import estimate_sequential_packing
from seqpack_cli.stats.rank_balance import RankBalanceOptions

_LENGTHS = [5, 3, 3, 7, 2, 9, 1, 4]

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

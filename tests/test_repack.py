"""`Prepared.repack` and length multiples: the histogram conserved, the limits respected, the
same templates as `prepare` with those options, the over-cap policies, `ConcatPool` reads, the
epoch over slot pools, the padding `stats` reports, and the datasets over a repacked directory."""

from __future__ import annotations

import itertools
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ParquetDataset, make_dataset
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from seqpack_cli.epoch.concat_pools import ConcatPool
from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.errors import ConfigError, PreparedFormatError
from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.prepared import load_prepared
from seqpack_cli.prepared.slot_pools import SlotPools

MAX_SEQ_LEN = 512


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> ParquetDataset:
    return make_dataset(tmp_path_factory.mktemp("repack_in"), num_rows=800, max_length=300)


@pytest.fixture(scope="module")
def prepared_path(dataset: ParquetDataset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("repack") / "prepared"
    prepare_dataset(_config(dataset, output, MAX_SEQ_LEN))
    return output


def _config(dataset: ParquetDataset, output: Path, max_seq_len: int, **options: Any) -> Any:
    return PrepareConfig(
        inputs=[dataset.root],
        length_column="num_tokens",
        id_column="doc_id",
        max_seq_len=max_seq_len,
        output=output,
        overwrite=True,
        **options,
    )


def _length_of(dataset: ParquetDataset) -> dict[int, int]:
    return {int(i): int(n) for i, n in zip(dataset.ids, dataset.lengths, strict=True)}


def _epoch_bins(templates: Any, pools: Any, seed: int = 7) -> list[list[int]]:
    return [list(b) for b in EpochPlan(templates, pools, seed)]


# --- ConcatPool --------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=6),
    data=st.data(),
)
def test_concat_pool_reads_equal_a_concatenated_copy(sizes: list[int], data: Any) -> None:
    rng = np.random.default_rng(sum(sizes))
    parts = [rng.integers(0, 10**12, size=n) for n in sizes]
    pool = ConcatPool(parts, range(1, len(parts) + 1))
    whole = np.concatenate(parts)
    assert len(pool) == pool.size == whole.size and pool.shape == whole.shape
    assert np.array_equal(np.asarray(pool), whole)
    if whole.size == 0:
        return
    positions = np.array(
        data.draw(st.lists(st.integers(0, whole.size - 1), max_size=100)), dtype=np.int64
    )
    assert np.array_equal(pool.take(positions), whole[positions])
    assert np.array_equal(pool[positions], whole[positions])
    out = np.full(positions.size, -1, dtype=np.int64)
    pool.take(positions, out=out, mode="clip")
    assert np.array_equal(out, whole[positions])
    for position in positions[:10].tolist():
        assert pool[position] == whole[position]
    with pytest.raises(IndexError):
        pool[whole.size]


# --- repack: the histogram, the limits, prepare's templates -------------------------------------


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    max_seq_len=st.sampled_from([64, 128, 256, 300, 512]),
    multiple=st.sampled_from([None, 1, 2, 4, 8, 16]),
    cap=st.sampled_from([None, 2, 5, 16]),
    over_cap=st.sampled_from(["drop", "truncate"]),
)
def test_repack_conserves_the_histogram_and_respects_the_limits(
    prepared_path: Path,
    dataset: ParquetDataset,
    max_seq_len: int,
    multiple: int | None,
    cap: int | None,
    over_cap: str,
) -> None:
    m = multiple or 1
    if max_seq_len % m:
        with pytest.raises(ConfigError, match="does not divide"):
            load_prepared(prepared_path).repack(max_seq_len, cap, multiple, over_cap)
        return
    base = load_prepared(prepared_path)
    repacked = base.repack(max_seq_len, cap, multiple, over_cap)
    lengths = dataset.lengths
    if over_cap == "drop":
        expected = Counter(int(n) for n in lengths if n <= max_seq_len)
    else:
        expected = Counter(min(int(n), max_seq_len) for n in lengths)
    assert repacked.counts == dict(sorted(expected.items()))
    slots = Counter({-(-n // m) * m: 0 for n in expected})
    for n, count in expected.items():
        slots[-(-n // m) * m] += count
    used: Counter[int] = Counter()
    for template, number in repacked.templates.items():
        assert sum(template) <= max_seq_len
        assert cap is None or len(template) <= cap
        assert all(length % m == 0 for length in template)
        for length in template:
            used[length] += number
    assert used == slots
    assert {length: len(repacked.pools[length]) for length in repacked.pools} == dict(slots)
    config = repacked.manifest["config"]
    assert (config["max_seq_len"], config["length_multiple"], config["max_seqs_per_bin"]) == (
        max_seq_len,
        m,
        cap,
    )
    assert repacked.max_seq_len == max_seq_len and repacked.length_multiple == m
    summary = repacked.summary
    assert summary["num_sequences"] == sum(expected.values())
    assert summary["num_tokens"] == sum(n * c for n, c in expected.items())
    assert summary["num_multiple_padding"] == sum(
        (-(-n // m) * m - n) * c for n, c in expected.items()
    )
    assert summary["efficiency"] == pytest.approx(
        summary["num_tokens"] / (summary["num_bins"] * max_seq_len)
    )
    # Nothing was changed in the loaded one: it still describes the directory.
    assert base.max_seq_len == MAX_SEQ_LEN and base.length_multiple == 1


@pytest.mark.parametrize(
    ("max_seq_len", "multiple", "cap"),
    [(512, 4, None), (512, 8, 6), (256, 16, None), (128, 2, 4), (512, None, 3)],
)
def test_repack_gives_the_templates_prepare_writes(
    prepared_path: Path,
    dataset: ParquetDataset,
    tmp_path: Path,
    max_seq_len: int,
    multiple: int | None,
    cap: int | None,
) -> None:
    repacked = load_prepared(prepared_path).repack(max_seq_len, cap, multiple, "drop")
    options = {"length_multiple": multiple, "max_seqs_per_bin": cap, "over_cap": "drop"}
    prepare_dataset(_config(dataset, tmp_path / "again", max_seq_len, **options))
    again = load_prepared(tmp_path / "again")
    assert repacked.templates == again.templates
    assert repacked.counts == again.counts
    for key in ("num_sequences", "num_tokens", "num_bins", "efficiency", "lower_bound_bins"):
        assert repacked.summary[key] == again.summary[key], key
    assert repacked.summary["num_multiple_padding"] == again.summary.get("num_multiple_padding", 0)
    # The pools of each slot hold the same ids (the loaded directory keys them by slot too).
    assert set(repacked.pools) == set(again.pools)
    for slot in again.pools:
        assert np.array_equal(
            np.sort(np.asarray(repacked.pools[slot])), np.sort(np.asarray(again.pools[slot]))
        )


def test_a_repack_of_a_repack_starts_from_the_directory(prepared_path: Path) -> None:
    base = load_prepared(prepared_path)
    once = base.repack(max_seq_len=128, over_cap="drop")
    # The dropped sequences come back at a larger max_seq_len: the directory still holds them.
    twice = once.repack(max_seq_len=512, length_multiple=8)
    assert twice.counts == base.counts
    assert twice.templates == base.repack(length_multiple=8).templates
    assert twice.manifest["config"]["repacked_from"]["max_seq_len"] == MAX_SEQ_LEN


# --- over-cap policies -------------------------------------------------------------------------


def test_policy_error_says_how_many_no_longer_fit_and_what_to_pass(
    prepared_path: Path, dataset: ParquetDataset
) -> None:
    over = int((dataset.lengths > 100).sum())
    with pytest.raises(ConfigError) as caught:
        load_prepared(prepared_path).repack(max_seq_len=100)  # prepared with over_cap error
    message = str(caught.value)
    assert "\n" not in message
    assert f"{over} sequences" in message and "over_cap='drop'" in message
    assert "over_cap='truncate'" in message


def test_bad_options_are_one_line_config_errors(prepared_path: Path) -> None:
    base = load_prepared(prepared_path)
    for options, text in [
        ({"length_multiple": 0}, "length_multiple"),
        ({"length_multiple": 3}, "pass max_seq_len=510"),
        ({"max_seq_len": 0}, "max_seq_len"),
        ({"over_cap": "split"}, "over_cap"),
        ({"max_seqs_per_bin": 0}, "max_seqs_per_bin"),
    ]:
        with pytest.raises(ConfigError, match=text) as caught:
            base.repack(**options)
        assert "\n" not in str(caught.value)


def test_truncate_after_a_prepare_that_truncated_refuses_a_larger_max_seq_len(
    dataset: ParquetDataset, tmp_path: Path
) -> None:
    prepare_dataset(_config(dataset, tmp_path / "cut", 200, over_cap="truncate"))
    cut = load_prepared(tmp_path / "cut")
    num_cut = int((dataset.lengths > 200).sum())
    with pytest.raises(ConfigError, match=f"{num_cut} sequences are stored cut to 200"):
        cut.repack(max_seq_len=256)
    # Same limit, another multiple: the stored cuts stand, and the collator must still cut.
    again = cut.repack(length_multiple=8, over_cap="drop")
    assert again.manifest["config"]["over_cap"] == "truncate"
    # A smaller limit that drops them: nothing kept is cut any more.
    dropped = cut.repack(max_seq_len=128, over_cap="drop")
    assert dropped.manifest["config"]["over_cap"] == "drop"


# --- the epoch over slot pools -----------------------------------------------------------------


@pytest.mark.parametrize(("multiple", "over_cap"), [(4, "drop"), (8, "truncate"), (32, "drop")])
def test_the_epoch_over_a_multiple_plan_gives_every_id_once_in_a_slot_of_its_length(
    prepared_path: Path, dataset: ParquetDataset, multiple: int, over_cap: str
) -> None:
    max_seq_len = 256
    repacked = load_prepared(prepared_path).repack(max_seq_len, None, multiple, over_cap)
    assert isinstance(repacked.pools, SlotPools)
    assert any(isinstance(repacked.pools[slot], ConcatPool) for slot in repacked.pools)
    length_of = _length_of(dataset)
    kept = {
        i
        for i, n in length_of.items()
        if n <= max_seq_len or over_cap == "truncate"  # the others were dropped
    }
    plan = EpochPlan(repacked.templates, repacked.pools, 11)
    seen: list[int] = []
    bins_of: Counter[tuple[int, ...]] = Counter()
    for ids in plan:
        slots = sorted(
            (-(-min(length_of[i], max_seq_len) // multiple) * multiple for i in ids), reverse=True
        )
        bins_of[tuple(slots)] += 1
        seen.extend(ids)
    # Each bin's ids fill the slots of one template: the bins are the templates, each as often.
    assert bins_of == repacked.templates
    assert sorted(seen) == sorted(kept)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=4), min_size=1, max_size=6),
    st.lists(st.integers(1, 3), min_size=1, max_size=3),
    st.one_of(st.none(), st.integers(0, 2**40)),
    st.integers(0, 64),
)
def test_the_epoch_over_concat_pools_reads_each_part_through_its_own_permutation(
    part_sizes: list[list[int]], shape: list[int], seed: int | None, merged_pool_ids: int
) -> None:
    # The rule (seqpack_cli.epoch.tables): the templates consume the positions of a slot's pool
    # in canonical order, as for a plain pool; position p of it falls in part i (exact length
    # l_i) at p - start_i, and reads part_i[perm_l(p - start_i)], perm_l seeded by (seed, l).
    # Checked against that rule written out here, over templates of 1-3 slots (shape) whose
    # occurrences straddle the part boundaries anywhere, small pools merged or not.
    from seqpack_cli.epoch.permutations import FeistelPermutation
    from seqpack_cli.epoch.tuning import EpochTuning
    from seqpack_cli.seeding import seed_from_components

    slots = [(8 * (s + 1), sizes) for s, sizes in enumerate(part_sizes) if sum(sizes)]
    assume(slots)
    pools: dict[int, Any] = {}
    part_of: dict[int, tuple[int, int, np.ndarray]] = {}  # code -> (length, local, part)
    codes: dict[int, np.ndarray] = {}  # slot -> the code of each position of its pool
    first_id = 0
    for slot, sizes in slots:
        parts, lengths, slot_codes = [], [], []
        for k, size in enumerate(sizes):
            part = np.arange(first_id, first_id + size, dtype=np.int64)[::-1].copy()
            first_id += size
            parts.append(part)
            lengths.append(slot - k)
            for local in range(size):
                part_of[len(part_of)] = (slot - k, local, part)
                slot_codes.append(len(part_of) - 1)
        pools[slot] = ConcatPool(parts, lengths)
        codes[slot] = np.array(slot_codes, dtype=np.int64)
    # Templates: `shape[i]` slots of one length each, as often as the pool allows, then singles.
    templates: Counter[tuple[int, ...]] = Counter()
    for i, (slot, _) in enumerate(slots):
        per_bin = shape[i % len(shape)]
        size = len(codes[slot])
        if size // per_bin:
            templates[(slot,) * per_bin] += size // per_bin
        if size % per_bin:
            templates[(slot,)] += size % per_bin
    tuning = EpochTuning(merged_pool_ids=merged_pool_ids, min_batch_ids=64, batch_ids=64)
    plan = EpochPlan(templates, pools, seed, tuning=tuning)
    # The canonical positions: the plain, unseeded plan over the codes (identity everywhere).
    canonical = list(EpochPlan(templates, codes, None))
    order = (
        FeistelPermutation(len(canonical), seed_from_components(seed, 0))
        if seed is not None
        else None
    )

    def read(code: int) -> int:
        length, local, part = part_of[code]
        if seed is not None:
            local = FeistelPermutation(len(part), seed_from_components(seed, length))[local]
        return int(part[local])

    expected = [
        [read(code) for code in canonical[order[g] if order is not None else g]]
        for g in range(len(canonical))
    ]
    assert list(plan) == expected
    assert [plan[k] for k in range(len(plan))] == expected
    ids, offsets = plan.bin_arrays(0, len(plan))
    assert [ids[a:b].tolist() for a, b in itertools.pairwise(offsets.tolist())] == expected
    assert sorted(i for b in expected for i in b) == list(range(first_id))


def test_the_epoch_reads_a_concat_pool_in_place() -> None:
    from seqpack_cli.epoch.pools import pool_arrays

    parts = [np.arange(5, dtype=np.int64), np.arange(100, 103, dtype=np.int64)]
    pool = ConcatPool(parts, [4, 3])
    assert pool_arrays({4: pool}, {4: 8})[4] is pool  # never concatenated into a copy
    bins = _epoch_bins(Counter({(4,): 8}), {4: pool}, seed=2)
    assert sorted(i for b in bins for i in b) == [0, 1, 2, 3, 4, 100, 101, 102]


def test_load_prepared_keys_a_multiple_directory_by_slot(
    dataset: ParquetDataset, tmp_path: Path
) -> None:
    prepare_dataset(_config(dataset, tmp_path / "m8", 512, length_multiple=8))
    loaded = load_prepared(tmp_path / "m8", verify=True)
    assert loaded.length_multiple == 8
    assert loaded.counts == dataset.counts()  # exact lengths, as on disk
    assert all(slot % 8 == 0 for slot in loaded.pools)
    on_disk = sorted(p.name for p in (tmp_path / "m8" / "pools").iterdir())
    assert on_disk == sorted(f"{n}.npy" for n in dataset.counts())  # pools per exact length
    ids = [i for bin_ids in _epoch_bins(loaded.templates, loaded.pools) for i in bin_ids]
    assert sorted(ids) == sorted(int(i) for i in dataset.ids)
    padding = sum((-(-int(n) // 8) * 8 - int(n)) for n in dataset.lengths)
    assert loaded.summary["num_multiple_padding"] == padding
    assert loaded.summary["num_tokens"] == int(dataset.lengths.sum())  # real tokens
    # A manifest whose multiple does not divide max_seq_len is refused in one line.
    import json

    manifest = json.loads((tmp_path / "m8" / "manifest.json").read_text())
    manifest["config"]["length_multiple"] = 7
    (tmp_path / "m8" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PreparedFormatError, match="length_multiple 7 does not divide"):
        load_prepared(tmp_path / "m8")


def test_prepare_refuses_a_multiple_that_does_not_divide_max_seq_len(
    dataset: ParquetDataset, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="pass max_seq_len=504"):
        _config(dataset, tmp_path / "x", 510, length_multiple=8)


# --- memory and pickling -----------------------------------------------------------------------


def test_a_repacked_prepared_pickles_as_its_location_and_options(prepared_path: Path) -> None:
    base = load_prepared(prepared_path)
    repacked = base.repack(max_seq_len=128, length_multiple=4, over_cap="truncate")
    pools_bytes = pickle.dumps(repacked.pools)
    # The distinct lengths and options, never an id: far smaller than the ids themselves.
    assert len(pools_bytes) < 8 * sum(repacked.counts.values()) / 2
    assert b"ConcatPool" not in pools_bytes
    again = pickle.loads(pickle.dumps(repacked))
    assert again.templates == repacked.templates and again.counts == repacked.counts
    assert [list(b) for b in EpochPlan(again.templates, again.pools, 3)] == [
        list(b) for b in EpochPlan(repacked.templates, repacked.pools, 3)
    ]


# --- stats: the padding a multiple costs --------------------------------------------------------


@pytest.mark.parametrize("multiple", [2, 8, 64])
def test_stats_padding_of_a_multiple_equals_a_brute_force_count(
    dataset: ParquetDataset, tmp_path: Path, multiple: int
) -> None:
    from seqpack_cli.stats.describe import StatsRequest, describe

    prepare_dataset(_config(dataset, tmp_path / "p", 512, length_multiple=multiple))
    lengths = [int(n) for n in dataset.lengths]
    brute = sum(((n + multiple - 1) // multiple) * multiple - n for n in lengths)
    document = describe(StatsRequest([tmp_path / "p"])).to_dict()
    (cost,) = document["length_multiple"]
    bins = load_prepared(tmp_path / "p").summary["num_bins"]
    assert cost["padding"] == brute and cost["num_bins"] == bins
    assert cost["padding_share"] == pytest.approx(brute / (bins * 512))
    assert document["stats"]["num_tokens"] == sum(lengths)  # real tokens, not slots
    sweep = describe(
        StatsRequest(
            [dataset.root],
            max_seq_lens=[256, 512],
            length_column="num_tokens",
            length_multiple=multiple,
        )
    ).to_dict()
    for row in sweep["length_multiple"]:
        fit = [n for n in lengths if n <= row["max_seq_len"]]
        assert row["padding"] == sum(-(-n // multiple) * multiple - n for n in fit)
        assert row["num_tokens"] == sum(fit)


# --- the datasets and the collator over a repacked directory -------------------------------------


def _token_source(dataset: ParquetDataset) -> dict[int, list[int]]:
    """Sequence id -> tokens whose values name the id and position, so a cut shows."""
    return {
        int(i): [int(i) * 1000 + p + 1 for p in range(int(n))]
        for i, n in zip(dataset.ids, dataset.lengths, strict=True)
    }


@pytest.mark.parametrize("over_cap", ["drop", "truncate"])
def test_the_iterable_dataset_over_a_repacked_prepared_gives_every_kept_id_once(
    prepared_path: Path, dataset: ParquetDataset, over_cap: str
) -> None:
    pytest.importorskip("torch")
    from seqpack_cli.collate import CollateOptions
    from seqpack_cli.data import PackedIterableDataset

    max_seq_len = 128
    repacked = load_prepared(prepared_path).repack(
        max_seq_len=max_seq_len, length_multiple=4, over_cap=over_cap
    )
    source = pickle.loads(pickle.dumps(repacked))  # as a spawned worker receives it
    data = PackedIterableDataset(
        source,
        _token_source(dataset),
        collate=CollateOptions(pad_token_id=0),
        seed=1,
        rows_per_rank=4,
    )
    tokens_of: dict[int, int] = Counter()
    for batch in data:
        values = batch["input_ids"].numpy().ravel()
        for value in values[values > 0].tolist():
            tokens_of[(value - 1) // 1000] += 1
    length_of = _length_of(dataset)
    expected = {
        i: min(n, max_seq_len)
        for i, n in length_of.items()
        if n <= max_seq_len or over_cap == "truncate"
    }
    assert dict(tokens_of) == expected


def test_thd_collator_with_cp_2_over_a_repack_with_multiple_4_never_asks_for_a_repack(
    prepared_path: Path, dataset: ParquetDataset
) -> None:
    pytest.importorskip("torch")
    from seqpack_cli.collate import PackedCollator

    tokens = _token_source(dataset)
    plain = load_prepared(prepared_path).repack(max_seq_len=64, over_cap="truncate")
    repacked = plain.repack(length_multiple=4)
    collators = [
        PackedCollator(tokens, 64, 0, format="thd", cp_size=2, cp_rank=r, truncate=True)
        for r in range(2)
    ]
    bins = _epoch_bins(repacked.templates, repacked.pools)
    for k in range(0, len(bins), 3):
        for collator in collators:
            collator(bins[k : k + 3])  # rows fit: no InputError
    # The plain packing, padded to multiples of 4, overflows some batch (what repack is for).
    plain_bins = _epoch_bins(plain.templates, plain.pools)
    from seqpack_cli.errors import InputError

    with pytest.raises(InputError, match="repack"):
        for k in range(len(plain_bins)):
            collators[0](plain_bins[k : k + 1])


def test_repack_of_a_manifest_without_over_cap_inherits_filter_over_cap_as_drop(
    dataset: ParquetDataset, tmp_path: Path
) -> None:
    # A manifest written before `over_cap` records drop as `filter_over_cap: true`; its rule
    # (`Prepared.over_cap`, the one a repack inherits) is drop, not error.
    import json

    from seqpack_cli.over_cap import OverCap
    from seqpack_cli.prepared.integrity import seal_manifest

    output = tmp_path / "prepared"
    prepare_dataset(_config(dataset, output, MAX_SEQ_LEN, filter_over_cap=True))
    manifest = json.loads((output / "manifest.json").read_text())
    del manifest["config"]["over_cap"]
    (output / "manifest.json").write_text(json.dumps(seal_manifest(manifest)))
    prepared = load_prepared(output)
    assert prepared.over_cap == OverCap("drop", MAX_SEQ_LEN)
    repacked = prepared.repack(max_seq_len=200)
    num_over = sum(1 for length in dataset.lengths if length > 200)
    assert num_over > 0
    assert max(repacked.counts) <= 200
    assert sum(repacked.counts.values()) == len(dataset.lengths) - num_over
    assert repacked.over_cap == OverCap("drop", 200)

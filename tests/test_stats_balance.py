"""`seqpack stats --world-size`: the rank imbalance of a run's plans, without and with balancing.

Every figure is checked against the plan a training run builds itself, `EpochPlan(templates,
pools, seed_from_components(seed, 0), ...).step_costs(...)` on the real pools, for every world
size, rows per rank and balance, from a prepared directory and from parquet inputs.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from conftest import write_parquet
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.epoch import EpochPlan
from seqpack_cli.epoch.dealing import DEFAULT_BALANCE_WINDOW
from seqpack_cli.errors import ConfigError
from seqpack_cli.packing.histogram import pack_length_histogram_batched
from seqpack_cli.prepared import load_prepared
from seqpack_cli.seeding import seed_from_components
from seqpack_cli.stats import rank_balance as rank_balance_module
from seqpack_cli.stats.describe import JSON_SCHEMA, StatsRequest, describe
from seqpack_cli.stats.rank_balance import RankBalanceOptions, plan_balance
from seqpack_cli.stats.sweep import SWEEP_LP_EFFORT

runner = CliRunner()
C = 24576.0  # 12 x hidden 2048, the coefficient
BALANCE_ARGS = ("--world-size", "1,3,8", "--rows-per-rank", "1,2", "--cost-per-token", "24576")


def _invoke(*args: str) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "150"})


def _one_line_error(result: Any, exit_code: int) -> str:
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def _direct(
    templates: Any, pools: Any, *, seed: int, world_size: int, rows: int, balance: Any, **kw: Any
) -> dict[str, Any]:
    """The figures straight from the real plan's step costs (no chunking, plain numpy)."""
    plan = EpochPlan(
        templates,
        pools,
        seed_from_components(seed, 0),  # epoch 0, as the datasets seed it
        world_size=world_size,
        rows_per_rank=rows,
        balance=balance,
        **kw,
    )
    costs = plan.step_costs(0, plan.num_steps)
    assert costs.shape == (plan.num_steps, world_size)
    ratios = costs.max(axis=1) / costs.mean(axis=1)
    return {
        "num_steps": plan.num_steps,
        "mean_max_over_mean": float(np.mean(ratios)),
        "worst_max_over_mean": float(ratios.max()),
        "worst_step": int(np.argmax(ratios)),
    }


def _check_plans(
    document: dict[str, Any], packings: dict[tuple[int, Any], tuple[Any, Any]]
) -> None:
    """Every plan of `document["rank_balance"]` equals the direct computation on its packing's
    real templates and pools (`packings`: (max_seq_len, cap) -> (templates, pools))."""
    section = document["rank_balance"]
    assert tuple(section) == JSON_SCHEMA["rank_balance"]
    seed, window, c = section["seed"], section["balance_window"], section["cost_per_token"]
    assert section["epoch_seed"] == seed_from_components(seed, 0)
    seen = []
    for entry in section["plans"]:
        assert tuple(entry) == JSON_SCHEMA["rank_balance plan"]
        templates, pools = packings[(entry["max_seq_len"], entry["max_seqs_per_bin"])]
        expected = _direct(
            templates,
            pools,
            seed=seed,
            world_size=entry["world_size"],
            rows=entry["rows_per_rank"],
            balance=entry["balance"],
            cost_per_token=c,
            balance_window=window,
        )
        got = {key: entry[key] for key in expected}
        assert got["num_steps"] == expected["num_steps"]
        assert got["worst_step"] == expected["worst_step"]
        assert got["mean_max_over_mean"] == pytest.approx(expected["mean_max_over_mean"], rel=1e-12)
        assert got["worst_max_over_mean"] == expected["worst_max_over_mean"]
        seen.append(
            (entry["max_seq_len"], entry["max_seqs_per_bin"], entry["world_size"],
             entry["rows_per_rank"], entry["balance"])
        )  # fmt: skip
    # every packing x world size x rows per rank, without then with balancing
    expected_keys = [
        (length, cap, w, b, balance)
        for length, cap in packings
        for w in (1, 3, 8)
        for b in (1, 2)
        for balance in (None, "cost")
    ]
    assert seen == expected_keys


# ---- a prepared directory -------------------------------------------------------------------


def test_prepared_json_equals_the_real_plans(prepared_dir: Path) -> None:
    result = _invoke(
        "stats", str(prepared_dir), *BALANCE_ARGS, "--balance-window", "3", "--seed", "7", "--json"
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert list(document)[-1] == "rank_balance"
    assert document["rank_balance"]["balance_window"] == 3
    assert document["rank_balance"]["seed"] == 7
    assert document["rank_balance"]["cost_per_token"] == C
    prepared = load_prepared(prepared_dir)
    key = (prepared.max_seq_len, None)
    _check_plans(document, {key: (prepared.templates, prepared.pools)})
    # what balancing buys, on this small dataset: a lower mean at every W > 1
    plans = document["rank_balance"]["plans"]
    for none, cost in zip(plans[::2], plans[1::2], strict=True):
        assert (none["balance"], cost["balance"]) == (None, "cost")
        assert none["num_steps"] == cost["num_steps"]
        if none["world_size"] > 1:
            assert cost["mean_max_over_mean"] < none["mean_max_over_mean"]
        else:  # one rank: nothing to wait for
            assert none["worst_max_over_mean"] == cost["worst_max_over_mean"] == 1.0


def test_prepared_terminal_and_html_show_both_rows(prepared_dir: Path, tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    result = _invoke("stats", str(prepared_dir), *BALANCE_ARGS, "--html", str(html), "--quiet")
    assert result.exit_code == 0, result.output
    document = json.loads(_invoke("stats", str(prepared_dir), *BALANCE_ARGS, "--json").stdout)
    lines = result.stdout.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("Rank balance"))
    table = lines[title:]
    page = html.read_text()
    assert "Rank balance" in page
    for plan in document["rank_balance"]["plans"]:
        name = "none" if plan["balance"] is None else "cost"
        mean = f"{plan['mean_max_over_mean']:.3f}"
        worst = f"{plan['worst_max_over_mean']:.3f}"
        steps = f"{plan['num_steps']:,}"
        # each plan is its own row: its steps, balance, mean and worst side by side
        assert any(line.split()[-5:-1] == [steps, name, mean, worst] for line in table), plan
        assert f"<td>{name}</td><td>{mean}</td><td>{worst}</td>" in page
    assert "24,576" in result.stdout.replace("\n", " ")


def test_without_world_size_nothing_changes(prepared_dir: Path) -> None:
    document = json.loads(_invoke("stats", str(prepared_dir), "--json").stdout)
    assert tuple(document) == JSON_SCHEMA["prepared"]
    assert "Rank balance" not in _invoke("stats", str(prepared_dir)).stdout


# ---- parquet inputs: one packing per sweep row ------------------------------------------------


def test_parquet_sweep_json_equals_the_real_plans(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    lengths = np.minimum(rng.lognormal(5.0, 1.0, 4_000).astype(np.int64) + 1, 2_000)
    write_parquet(tmp_path / "lengths.parquet", {"n": lengths})
    result = _invoke(
        "stats",
        str(tmp_path / "lengths.parquet"),
        "--length-column",
        "n",
        "--max-seq-len",
        "512,1024",
        "--max-seqs-per-bin",
        "4,none",
        *BALANCE_ARGS,
        "--json",
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert tuple(document)[:-1] == JSON_SCHEMA["sweep"]
    packings = {}
    ids = np.arange(len(lengths))
    for max_seq_len in (512, 1024):
        kept = lengths[lengths <= max_seq_len]
        values, counts = np.unique(kept, return_counts=True)
        histogram = dict(zip(values.tolist(), counts.tolist(), strict=True))
        pools = {int(v): ids[lengths == v] for v in values}  # the row indices: real, distinct ids
        for cap in (4, None):
            templates = pack_length_histogram_batched(
                histogram, max_seq_len, max_seqs_per_bin=cap, lp_effort=SWEEP_LP_EFFORT
            )
            packings[(max_seq_len, cap)] = (templates, pools)
    _check_plans(document, packings)


def test_a_packing_with_no_bin_has_no_step(tmp_path: Path) -> None:
    write_parquet(tmp_path / "long.parquet", {"n": np.full(10, 900)})
    result = _invoke(
        "stats", str(tmp_path), "--length-column", "n", "--max-seq-len", "512,1024",
        "--world-size", "2", "--cost-per-token", "0", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)["rank_balance"]["plans"]
    empty = [plan for plan in plans if plan["max_seq_len"] == 512]
    assert [plan["num_steps"] for plan in empty] == [0, 0]
    assert all(plan["mean_max_over_mean"] is None for plan in empty)
    full = [plan for plan in plans if plan["max_seq_len"] == 1024]
    assert [plan["num_steps"] for plan in full] == [5, 5]  # 10 bins of one sequence, 2 ranks
    assert all(plan["worst_max_over_mean"] == 1.0 for plan in full)  # equal bins
    table = _invoke(
        "stats", str(tmp_path), "--length-column", "n", "--max-seq-len", "512,1024",
        "--world-size", "2", "--cost-per-token", "0",
    ).stdout  # fmt: skip
    assert "1.000" in table and "-" in table


# ---- the library ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    histogram=st.dictionaries(st.integers(1, 64), st.integers(1, 40), min_size=1, max_size=12),
    max_seq_len=st.sampled_from([64, 100, 128]),
    world_size=st.integers(1, 6),
    rows=st.integers(1, 3),
    window=st.integers(1, 5),
    balance=st.sampled_from([None, "cost"]),
    cost_per_token=st.sampled_from([0.0, 1.0, 37.5, 24576.0]),
    seed=st.integers(0, 2**31),
    chunk_bins=st.sampled_from([1, 5, 64, 1 << 18]),
)
def test_plan_balance_equals_the_real_plan(
    histogram: dict[int, int],
    max_seq_len: int,
    world_size: int,
    rows: int,
    window: int,
    balance: Any,
    cost_per_token: float,
    seed: int,
    chunk_bins: int,
) -> None:
    """Zero-stride pools and chunked steps give the real plan's figures, whatever the chunks."""
    templates = pack_length_histogram_batched(histogram, max_seq_len)
    rng = np.random.default_rng(seed)
    ids = rng.permutation(sum(histogram.values())) * 3 + 11
    starts = np.cumsum([0, *histogram.values()])
    pools = {length: ids[a:b] for length, a, b in zip(histogram, starts, starts[1:], strict=False)}
    options = RankBalanceOptions(
        (world_size,), (rows,), cost_per_token, balance_window=window, seed=seed
    )
    with mock.patch.object(rank_balance_module, "_CHUNK_BINS", chunk_bins):
        got = plan_balance(
            Counter(templates),
            max_seq_len=max_seq_len,
            max_seqs_per_bin=None,
            world_size=world_size,
            rows_per_rank=rows,
            balance=balance,
            options=options,
        )
    expected = _direct(
        templates,
        pools,
        seed=seed,
        world_size=world_size,
        rows=rows,
        balance=balance,
        cost_per_token=cost_per_token,
        balance_window=window,
    )
    assert got.num_steps == expected["num_steps"]
    assert got.worst_step == expected["worst_step"]
    assert got.worst_max_over_mean == expected["worst_max_over_mean"]
    assert got.mean_max_over_mean == pytest.approx(expected["mean_max_over_mean"], rel=1e-12)
    assert 1.0 <= got.mean_max_over_mean <= got.worst_max_over_mean <= world_size


def test_request_checks_the_options(prepared_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"cost_per_token.*seqpack_cli\.hf\.cost_per_token"):
        StatsRequest([prepared_dir], world_sizes=[8])
    with pytest.raises(ConfigError, match="world_sizes is 0"):
        StatsRequest([prepared_dir], world_sizes=[8, 0], cost_per_token=C)
    with pytest.raises(ConfigError, match=r"cost_per_token is -1\.0"):
        StatsRequest([prepared_dir], world_sizes=8, cost_per_token=-1)
    with pytest.raises(ConfigError, match="cost_per_token is inf"):
        StatsRequest([prepared_dir], world_sizes=8, cost_per_token=math.inf)
    with pytest.raises(ConfigError, match="rows_per_rank is 0"):
        StatsRequest([prepared_dir], world_sizes=8, rows_per_rank=[0], cost_per_token=C)
    with pytest.raises(ConfigError, match="balance_window"):
        StatsRequest([prepared_dir], world_sizes=8, cost_per_token=C, balance_window=0)
    with pytest.raises(ConfigError, match="describes the plans of world_sizes"):
        StatsRequest([prepared_dir], cost_per_token=C)
    request = StatsRequest([prepared_dir], world_sizes=4, cost_per_token=C)
    assert request.rank_balance is not None
    assert request.rank_balance.balance_window == DEFAULT_BALANCE_WINDOW
    report = describe(request)
    assert [(p.world_size, p.rows_per_rank, p.balance) for p in report.rank_balance] == [
        (4, 1, None),
        (4, 1, "cost"),
    ]


# ---- the command line: usage errors, help ---------------------------------------------------


_W8 = ("--world-size", "8")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--world-size", "0", "--cost-per-token", "1"), ["--world-size", "'0'", "8,64"]),
        (("--world-size", "8,x", "--cost-per-token", "1"), ["--world-size", "'x'"]),
        (_W8, ["--cost-per-token", "seqpack_cli.hf.cost_per_token", "24576"]),
        ((*_W8, "--cost-per-token", "-1"), ["--cost-per-token", "-1", "24576"]),
        ((*_W8, "--cost-per-token", "nan"), ["--cost-per-token", "nan"]),
        ((*_W8, "--cost-per-token", "1", "--rows-per-rank", "0"), ["--rows-per-rank", "'0'"]),
        ((*_W8, "--cost-per-token", "1", "--balance-window", "0"), ["--balance-window", "0"]),
    ],
)
def test_bad_values_are_one_line_usage_errors(
    prepared_dir: Path, args: tuple[str, ...], words: list[str]
) -> None:
    line = _one_line_error(_invoke("stats", str(prepared_dir), *args), exit_code=2)
    for word in words:
        assert word in line, (word, line)


def test_options_without_world_size_are_one_line_errors(prepared_dir: Path) -> None:
    result = _invoke("stats", str(prepared_dir), "--cost-per-token", "24576")
    line = _one_line_error(result, exit_code=1)
    assert "--cost-per-token" in line and "--world-size" in line


def test_help_names_the_options_and_the_helper() -> None:
    text = " ".join(_invoke("stats", "--help").stdout.split())
    for phrase in ("--world-size", "--rows-per-rank", "--cost-per-token", "--balance-window"):
        assert phrase in text
    assert "seqpack_cli.hf.cost_per_token" in text.replace(" ", "")
    assert f"default {DEFAULT_BALANCE_WINDOW}" in text  # the CLI's words match the library
    assert "mean_max_over_mean" in text  # the --json keys

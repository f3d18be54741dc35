"""Shared fixtures: small parquet datasets, and a prepared directory built from one.

`parquet_dataset` (session-wide, read-only) is three parquet files, one of them in a hive-style
`part=b/` folder and one with its columns in another order, with a length column `num_tokens`, a
unique shuffled id column `doc_id` and a text column. `prepared_dir` is `seqpack prepare` run on
it (max_seq_len 512, ids from `doc_id`). `write_parquet` writes one file from plain columns.
Tests that change files copy them first. `dask_cluster` (session-wide) is a Dask `LocalCluster`
of 2 worker processes of a thread each, for the `--engine dask` tests (skipped without Dask).
`reference_packers` is benchmarks/reference_packers.py,
the per-item packers the packing tests use as oracles (`from conftest import reference_packers`).
`with_default_signals(command)` is how a test starts a child it will send SIGINT or SIGTERM.
Tests of whole clusters, of processes killed at random, and of the big dataset are marked `slow`
here (`SLOW`), beside those marked in their modules: `make test` leaves them out, `make test-all`
and CI run them.

Hypothesis runs under the `seqpack` profile (`HYPOTHESIS_PROFILE`): no deadline and no
too-slow health check, since both time the test and a loaded machine (a fresh clone's
`make test` beside other jobs) then fails tests that are right; a module's own `settings` may
change the number of examples, never add a deadline (tests/test_hypothesis_settings.py checks
the modules). Examples stay random: each run draws one seed for every property test, printed in
the header and the summary, and `--hypothesis-seed=N` runs those examples again.
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, core, settings

# No deadline and no too-slow health check: both measure time, which says nothing of a test's
# correctness on a machine busy with other work. print_blob: a failure prints the decorator
# that replays its example.
HYPOTHESIS_PROFILE = "seqpack"
settings.register_profile(
    HYPOTHESIS_PROFILE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_configure(config: pytest.Config) -> None:
    # One seed for the run, random unless --hypothesis-seed names one, so that it can be printed
    # and the same examples drawn again.
    if config.getoption("hypothesis_seed", None) is None:
        core.global_force_seed = random.SystemRandom().randrange(2**32)


def hypothesis_seed_line() -> str:
    seed = core.global_force_seed
    return f"hypothesis seed {seed} (the same examples again: --hypothesis-seed={seed})"


def pytest_report_header(config: pytest.Config) -> str:
    return hypothesis_seed_line()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(hypothesis_seed_line())


# What makes a test slow, wherever it lives: the fixtures that start a Dask cluster or write the
# 1.5M-row dataset, the modules that start clusters of processes of their own, and single tests
# that run many processes (`module.py::test_name`). They keep every assertion; `make test-all`
# and CI run them.
SLOW = {
    "fixtures": {"dask_cluster", "stale_cluster", "big_dataset"},
    "modules": {"test_dask_cli.py", "test_dask_local_cluster.py"},
    "tests": {
        # a local cluster of 2 worker processes, started by --workers
        "test_dask_engine.py::test_workers_start_a_local_cluster_and_json_names_the_engine",
        # 18 runs of `python -m seqpack_cli.prepare`
        "test_output_safety.py::test_random_signals_always_leave_a_complete_output",
        # 5-15 s each in a run of the fast selection (1,300 tests in 306 s, 2 busy cores)
        "test_reader.py::test_70000_distinct_lengths_run_a_full_epoch_with_bounded_mappings",
        "test_reader.py::test_fuzz_manifest_counts_and_templates",
        "test_lp_packing.py::test_large_capped_histogram_bound_is_certified_near_the_packing",
        "test_lp_packing.py::test_same_packing_in_another_process",
        "test_batches.py::test_resume_after_step_k_yields_the_batches_after_k",
        "test_histogram.py::test_pattern_groups_equal_the_one_candidate_at_a_time_reference",
    },
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.name
        name = f"{module}::{getattr(item, 'originalname', item.name)}"
        if (
            module in SLOW["modules"]
            or name in SLOW["tests"]
            or SLOW["fixtures"] & set(getattr(item, "fixturenames", ()))
        ):
            item.add_marker(pytest.mark.slow)


def write_parquet(
    path: Path, columns: Mapping[str, Any], *, row_group_size: int | None = None
) -> Path:
    """Write `columns` ({name: list or array}) as one parquet file; returns its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(dict(columns)), path, row_group_size=row_group_size)
    return path


@dataclass(frozen=True)
class ParquetDataset:
    """A small dataset on disk and, in global row order (files sorted by path), its columns."""

    root: Path
    files: list[Path]
    lengths: np.ndarray
    ids: np.ndarray
    length_column: str = "num_tokens"
    id_column: str = "doc_id"

    def pools(self, *, by_row_index: bool = False, max_seq_len: int | None = None) -> dict:
        """The expected pools: {length: ascending ids} (ids = doc_id or the row index)."""
        ids = np.arange(len(self.lengths)) if by_row_index else self.ids
        keep = (
            np.ones(len(self.lengths), bool) if max_seq_len is None else self.lengths <= max_seq_len
        )
        return {
            int(length): np.sort(ids[keep & (self.lengths == length)])
            for length in np.unique(self.lengths[keep])
        }

    def counts(self, *, max_seq_len: int | None = None) -> dict[int, int]:
        return {length: len(ids) for length, ids in self.pools(max_seq_len=max_seq_len).items()}


def make_dataset(
    root: Path, num_rows: int = 3000, *, seed: int = 0, max_length: int = 300
) -> ParquetDataset:
    """Three files (sizes 40% / 35% / 25%), lengths 1..max_length, ids a shuffled sparse set."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(4.0, 0.9, num_rows), 1, max_length).astype(np.int64)
    ids = rng.permutation(num_rows).astype(np.int64) * 7 + 1_000
    cuts = [0, int(num_rows * 0.4), int(num_rows * 0.75), num_rows]
    names = [root / "a.parquet", root / "part=b" / "b.parquet", root / "c.parquet"]
    for i, path in enumerate(names):
        part = slice(cuts[i], cuts[i + 1])
        columns: dict[str, Any] = {
            "doc_id": ids[part],
            "num_tokens": lengths[part],
            "text": [f"doc {x}" for x in ids[part]],
        }
        if i == 2:  # same columns, another order
            columns = {k: columns[k] for k in ("text", "num_tokens", "doc_id")}
        write_parquet(path, columns, row_group_size=500)
    files = sorted(names, key=lambda p: p.as_posix())
    # Global row order follows the sorted file paths: a, c, part=b/b.
    order = [0, 2, 1]
    lengths_sorted = np.concatenate([lengths[cuts[i] : cuts[i + 1]] for i in order])
    ids_sorted = np.concatenate([ids[cuts[i] : cuts[i + 1]] for i in order])
    return ParquetDataset(root, files, lengths_sorted, ids_sorted)


@pytest.fixture(scope="session")
def parquet_dataset(tmp_path_factory: pytest.TempPathFactory) -> ParquetDataset:
    """A read-only three-file dataset (see the module docstring)."""
    return make_dataset(tmp_path_factory.mktemp("parquet_dataset"))


@pytest.fixture(scope="session")
def prepared_dir(parquet_dataset: ParquetDataset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`seqpack prepare` of `parquet_dataset` (max_seq_len 512, ids from doc_id); read-only."""
    from seqpack_cli.prepare import PrepareConfig, prepare_dataset

    output = tmp_path_factory.mktemp("prepared") / "prepared"
    config = PrepareConfig(
        inputs=[parquet_dataset.root],
        length_column="num_tokens",
        id_column="doc_id",
        max_seq_len=512,
        output=output,
    )
    prepare_dataset(config)
    return output


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/{name}.py as a module (benchmarks/ is not a package), registered in
    sys.modules (its dataclasses look their module up there)."""
    path = Path(__file__).parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# The per-item packers written for the benchmark are the oracles of the packing tests (one
# obvious implementation each, shared rather than copied).
reference_packers = load_benchmark("reference_packers")


# The reference's worked example (max_seq_len=10): 9 sequences (ids 0..8), 41 tokens, 5 bins.
REFERENCE_LENGTHS = [7, 5, 5, 5, 5, 5, 3, 3, 3]
REFERENCE_TEMPLATES = Counter({(5, 5): 2, (7, 3): 1, (5, 3): 1, (3,): 1})
REFERENCE_POOLS = {7: np.array([0]), 5: np.array([1, 2, 3, 4, 5]), 3: np.array([6, 7, 8])}


# A background job (`make test &`, nohup, some CI runners) starts with SIGINT ignored, and its
# children inherit that: Python then installs no KeyboardInterrupt handler, seqpack rightly leaves
# an ignored SIGINT ignored, and a test's SIGINT is lost. This launcher gives the child the
# dispositions an interactive shell would (exec keeps a default disposition), then runs it.
_WITH_DEFAULT_SIGNALS = """
import os, signal, sys
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])
"""


def assert_failed_cleanly(result: Any, output: Path, *fragments: str) -> None:
    """A `seqpack` run (CliRunner's result) that failed as bad input must: exit code 1, one line
    on stderr holding every fragment and no traceback, and nothing written at `output` (nor a
    temporary sibling of it)."""
    assert result.exit_code == 1, result.output
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1 and "Traceback" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert not output.exists()
    assert not [p for p in output.parent.iterdir() if p.name.startswith(f".{output.name}")]


def with_default_signals(command: Sequence[str]) -> list[str]:
    """`command` (its program a path, such as sys.executable) as a command line that runs it with
    SIGINT and SIGTERM at their defaults, whatever this process ignores: for tests that signal
    the child."""
    return [sys.executable, "-c", _WITH_DEFAULT_SIGNALS, *command]


def run_in_fresh_process(code: str, *, hash_seed: str) -> str:
    """Run `code` in a new interpreter with another PYTHONHASHSEED; return its stdout.

    Anything built on Python's hash() would change with the hash seed; seqpack's output may not.
    """
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": hash_seed, "PATH": ""},
    )
    return out.stdout


def small_config(tmp_path: Path, **changes: Any) -> Any:
    """The PrepareConfig of the one-file dataset a test wrote to tmp_path/in (length column "n",
    max_seq_len 10), into tmp_path/out; `changes` override any option."""
    from seqpack_cli.prepare import PrepareConfig

    options: dict[str, Any] = {
        "inputs": [tmp_path / "in"],
        "length_column": "n",
        "max_seq_len": 10,
        "output": tmp_path / "out",
    }
    options.update(changes)
    return PrepareConfig(**options)


def same_batch(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two collated batches hold the same keys and equal values (tensors, arrays, ints)."""
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if hasattr(x, "equal") and hasattr(x, "dtype"):  # a torch tensor
            if not x.equal(y):
                return False
        elif isinstance(x, np.ndarray):
            if not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


def next_fit_plan(lengths: list[int], max_seq_len: int) -> tuple[Counter, dict[int, np.ndarray]]:
    """(templates, pools) by next-fit over the lengths sorted descending: any valid packing
    will do for tests of what is built on a plan."""
    templates: Counter = Counter()
    current: list[int] = []
    for length in sorted(lengths, reverse=True):
        if sum(current) + length > max_seq_len:
            templates[tuple(current)] += 1
            current = []
        current.append(length)
    templates[tuple(current)] += 1
    array = np.array(lengths)
    pools = {length: np.flatnonzero(array == length).astype(np.int64) for length in set(lengths)}
    return templates, pools


def simulated_workers(
    dataset: Any, num_workers: int, item: Any = lambda x: x
) -> tuple[list[list[Any]], list[Any]]:
    """`dataset` iterated as each of `num_workers` DataLoader workers would iterate it, in this
    process (`seqpack_cli.sharding.get_worker_info` stands in for torch's): (each worker's
    items, mapped by `item`; all of them merged round-robin, as torch's in-order DataLoader
    yields them)."""
    from types import SimpleNamespace

    from seqpack_cli import sharding

    original = sharding.get_worker_info
    streams = []
    try:
        for worker in range(num_workers):
            info = SimpleNamespace(num_workers=num_workers, id=worker)
            sharding.get_worker_info = lambda info=info: info  # type: ignore[assignment]
            streams.append([item(x) for x in dataset])
    finally:
        sharding.get_worker_info = original  # type: ignore[assignment]
    longest = max(map(len, streams), default=0)
    merged = [s[i] for i in range(longest) for s in streams if i < len(s)]
    return streams, merged


@pytest.fixture(scope="session")
def dask_cluster() -> Any:
    """A Dask `LocalCluster` of 2 worker processes of a thread each, shared by the modules that
    run `--engine dask` on it (a worker a test kills is started again by its nanny)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as local:
        yield local

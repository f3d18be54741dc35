"""Integers at the edges of their types, through `prepare --tokens-column` (both local paths:
the one pass, and the two passes it falls back to).

- token ids in a `list<uint64>` column: up to int64's maximum they are served exactly; over it
  (where serving them as int64, torch's index type, would turn them negative) they are refused
  in one line before anything is written;
- unique ids whose sorted neighbours lie more than 2**63 - 1 apart (-5e18 and 5e18), where a
  subtraction of neighbours wraps around;
- input files whose columns have different integer widths (`list<int32>` next to
  `list<int64>`, `list` next to `large_list`, `uint16` ids next to `int64` ones), as different
  tokenisers write them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from token_datasets import store_config, write_token_files
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.errors import InputError
from seqpack_cli.prepare import load_prepared, prepare_dataset
from seqpack_cli.prepare import one_pass as one_pass_module
from seqpack_cli.prepare.footers import widened_type
from seqpack_cli.prepare.token_files import write_token_source
from seqpack_cli.prepare.token_stream import Fault

INT64_MAX = int(np.iinfo(np.int64).max)
INT64_MIN = int(np.iinfo(np.int64).min)
UINT64_MAX = int(np.iinfo(np.uint64).max)


_config = store_config


@pytest.fixture(params=["one pass", "two passes"])
def passes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs on both local paths: the one pass, and the two passes (forced here as on
    any fault the one pass meets)."""
    if request.param == "two passes":

        def give_up(*args: Any, **kwargs: Any) -> one_pass_module.Fallback:
            return one_pass_module.Fallback(Fault("the test forces the two passes"))

        monkeypatch.setattr(one_pass_module, "read_in_one_pass", give_up)
    return str(request.param)


def _served(root: Path, ids: list[int]) -> list[list[int]]:
    """The tokens `load_prepared` serves for each of `ids`, as Python ints."""
    tokens = load_prepared(root / "out").tokens
    assert tokens is not None
    values, lengths = tokens.take(np.array(ids, dtype=np.int64))
    assert values.dtype == np.int64
    cuts = np.cumsum(lengths)[:-1]
    return [part.tolist() for part in np.split(values, cuts)]


# ---- token ids in list<uint64> ----------------------------------------------------------------


@pytest.mark.parametrize("statistics", [True, False], ids=["statistics", "no statistics"])
def test_uint64_token_ids_over_int64_are_refused_in_one_line(
    tmp_path: Path, passes: str, statistics: bool
) -> None:
    sequences = [[5, 6, 7], [UINT64_MAX, 3], [4]]
    write_token_files(tmp_path, sequences, token_type=pa.list_(pa.uint64()), statistics=statistics)
    with pytest.raises(InputError) as caught:
        prepare_dataset(_config(tmp_path))
    message = str(caught.value)
    assert "\n" not in message
    assert f"token column 'input_ids' in {tmp_path / 'in' / 'part-000.parquet'}" in message
    assert f"holds token id {UINT64_MAX}, over int64's {INT64_MAX}" in message
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_the_command_line_says_it_in_one_line(tmp_path: Path) -> None:
    write_token_files(tmp_path, [[2**63, 1]], token_type=pa.list_(pa.uint64()))
    args = ["prepare", str(tmp_path / "in"), "--length-column", "n", "--tokens-column"]
    args += ["input_ids", "--max-seq-len", "8", "--output", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: token column 'input_ids'") and f"token id {2**63}," in line


def test_uint64_token_ids_up_to_int64s_maximum_are_served_exactly(
    tmp_path: Path, passes: str
) -> None:
    sequences = [[INT64_MAX, 3], [2**32, 2**62 + 1, 0], [7]]
    write_token_files(tmp_path, sequences, token_type=pa.list_(pa.uint64()))
    prepare_dataset(_config(tmp_path))
    assert _served(tmp_path, [0, 1, 2]) == sequences


def test_a_uint64_token_source_refuses_ids_over_int64(tmp_path: Path) -> None:
    # write_token_source with an explicit uint64 dtype: every value is checked, row named.
    write_token_files(tmp_path, [[1, 2], [3, UINT64_MAX]], token_type=pa.list_(pa.uint64()))
    with pytest.raises(
        InputError, match=r"at row 1 \(0-based\) holds token id 18446744073709551615"
    ):
        write_token_source(tmp_path / "in", "input_ids", output=tmp_path / "source", dtype="uint64")
    assert sorted(os.listdir(tmp_path)) == ["in"]
    write_token_files(tmp_path, [[1, 2], [3, INT64_MAX]], token_type=pa.list_(pa.uint64()))
    source = write_token_source(
        tmp_path / "in", "input_ids", output=tmp_path / "source", dtype="uint64"
    )
    assert source.take(np.array([1]))[0].tolist() == [3, INT64_MAX]


# ---- ids far apart ----------------------------------------------------------------------------

FAR_APART = [-(5 * 10**18), 5 * 10**18]  # neighbours 1e19 apart: over int64 as a difference


@pytest.mark.parametrize("over_cap", ["drop", "truncate"])
def test_ids_further_apart_than_int64_are_served(
    tmp_path: Path, passes: str, over_cap: str
) -> None:
    sequences = [[1, 2, 3], [4, 5], [6] * 20, [7]]
    ids = [FAR_APART[1], FAR_APART[0], FAR_APART[1] + 1, INT64_MIN]
    write_token_files(tmp_path, sequences, ids=ids)
    prepared = prepare_dataset(_config(tmp_path, id_column="doc", over_cap=over_cap))
    kept = [0, 1, 3] if over_cap == "drop" else [0, 1, 2, 3]
    pooled = sorted(int(i) for length in prepared.counts for i in prepared.pools[length])
    assert pooled == sorted(ids[k] for k in kept)
    served = [sequences[k] for k in kept]
    assert _served(tmp_path, [ids[k] for k in kept]) == served
    stored = np.load(tmp_path / "out" / "tokens" / "ids.npy", mmap_mode="r")
    assert stored.dtype.str == "<i8" and stored.tolist() == sorted(ids)


def test_split_pieces_of_far_apart_ids_take_ids_past_the_largest(tmp_path: Path) -> None:
    write_token_files(tmp_path, [[2, 3], [1] * 20, [4]], ids=[FAR_APART[0], 7, FAR_APART[1]])
    prepared = prepare_dataset(_config(tmp_path, id_column="doc", over_cap="split"))
    pooled = sorted(int(i) for length in prepared.counts for i in prepared.pools[length])
    assert pooled == [FAR_APART[0], *(FAR_APART[1] + k for k in range(3))]
    assert _served(tmp_path, pooled) == [[2, 3], [4], [1] * 16, [1] * 4]


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ids=st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=1, max_size=12, unique=True),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_unique_int64_ids_serve_their_own_tokens(tmp_path_factory, ids, seed) -> None:
    root = tmp_path_factory.mktemp("ids")
    rng = np.random.default_rng(seed)
    sequences = [rng.integers(0, 1000, rng.integers(1, 17)).tolist() for _ in ids]
    write_token_files(root, sequences, ids=ids, cuts=(len(ids) // 2,) if len(ids) > 1 else ())
    prepare_dataset(_config(root, id_column="doc"))
    assert _served(root, ids) == sequences


# ---- inputs of different integer widths --------------------------------------------------------

_INTEGERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_INTEGERS += [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


def _write_mixed(root: Path, types: list[tuple[pa.DataType, pa.DataType]]) -> Path:
    """The same four rows over two files, file k's tokens and ids of types[k]."""
    sequences = [[1, 2, 3], [100, 5], [70, 8, 9, 10], [11]]
    ids = [3, 0, 1000, 7]
    for k, (token_type, id_type) in enumerate(types):
        part = slice(2 * k, 2 * k + 2)
        columns = {
            "input_ids": pa.array(sequences[part], token_type),
            "n": pa.array([len(s) for s in sequences[part]], pa.int64()),
            "doc": pa.array(ids[part], id_type),
        }
        (root / "in").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns), root / "in" / f"part-{k}.parquet")
    return root


def _outputs(root: Path) -> dict[str, bytes]:
    """What prepare wrote, but the two files that record the inputs' paths and sizes."""
    out = root / "out"
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name not in ("manifest.json", "token_source.json")
    }


@pytest.mark.parametrize(
    "types",
    [
        [(pa.list_(pa.int32()), pa.uint16()), (pa.list_(pa.int64()), pa.int64())],
        [(pa.large_list(pa.uint16()), pa.int32()), (pa.list_(pa.int8()), pa.uint32())],
        [(pa.list_(pa.uint64()), pa.int64()), (pa.large_list(pa.uint8()), pa.int16())],
    ],
    ids=["int32 and int64 lists", "large_list and list", "uint64 lists"],
)
@pytest.mark.parametrize("length_column", ["n", "input_ids"])
def test_inputs_of_other_integer_widths_prepare_as_the_widest(
    tmp_path: Path, passes: str, types: list[tuple[pa.DataType, pa.DataType]], length_column: str
) -> None:
    mixed = _write_mixed(tmp_path / "mixed", types)
    same = _write_mixed(tmp_path / "same", [(pa.list_(pa.int64()), pa.int64())] * 2)
    for root in (mixed, same):
        prepare_dataset(_config(root, id_column="doc", length_column=length_column))
    assert _outputs(mixed) == _outputs(same)
    assert _served(mixed, [3, 0, 1000, 7]) == [[1, 2, 3], [100, 5], [70, 8, 9, 10], [11]]


def test_length_column_alone_of_other_widths(tmp_path: Path) -> None:
    mixed = _write_mixed(
        tmp_path / "mixed",
        [(pa.list_(pa.int32()), pa.uint16())] * 1 + [(pa.large_list(pa.int64()), pa.int64())],
    )
    prepared = prepare_dataset(
        _config(mixed, id_column="doc", length_column="input_ids", tokens_column=None)
    )
    assert prepared.counts == {1: 1, 2: 1, 3: 1, 4: 1}
    assert sorted(int(i) for n in prepared.counts for i in prepared.pools[n]) == [0, 3, 7, 1000]


@pytest.mark.parametrize(
    ("second", "shown"),
    [
        ((pa.list_(pa.float64()), pa.int64()), "column 'input_ids' is list<element: double> there"),
        ((pa.list_(pa.int64()), pa.uint64()), "column 'doc' is uint64 there but int64 in"),
        ((pa.int64(), pa.int64()), "column 'input_ids' is int64 there but list<element: int32>"),
    ],
    ids=["floats next to integers", "uint64 next to int64", "integers next to lists"],
)
def test_types_that_do_not_widen_to_one_are_refused_in_one_line(
    tmp_path: Path, passes: str, second: tuple[pa.DataType, pa.DataType], shown: str
) -> None:
    first = (pa.list_(pa.int32()), pa.int64())
    if second[0] == pa.int64():
        _write_mixed(tmp_path, [first])
        columns = {"input_ids": pa.array([5, 6]), "n": pa.array([1, 1]), "doc": pa.array([8, 9])}
        pq.write_table(pa.table(columns), tmp_path / "in" / "part-1.parquet")
    else:
        _write_mixed(tmp_path, [first, second])
    with pytest.raises(InputError) as caught:
        prepare_dataset(_config(tmp_path, id_column="doc"))
    message = str(caught.value)
    assert "\n" not in message and f"input file {tmp_path / 'in' / 'part-1.parquet'}" in message
    assert shown in message and str(tmp_path / "in" / "part-0.parquet") in message
    if "uint64" in shown:
        assert "(no integer type holds both)" in message
    assert sorted(os.listdir(tmp_path)) == ["in"]


@given(a=st.sampled_from(_INTEGERS), b=st.sampled_from(_INTEGERS), large=st.booleans())
def test_the_widened_type_is_the_narrowest_that_holds_both(a, b, large) -> None:
    def limits(kind: pa.DataType) -> tuple[int, int]:
        info = np.iinfo(kind.to_pandas_dtype())
        return int(info.min), int(info.max)

    def holds(kind: pa.DataType, other: pa.DataType) -> bool:
        return limits(kind)[0] <= limits(other)[0] and limits(other)[1] <= limits(kind)[1]

    wide = widened_type(a, b)
    fitting = [kind for kind in _INTEGERS if holds(kind, a) and holds(kind, b)]
    if not fitting:
        assert wide is None  # uint64 next to a signed type
        return
    assert wide is not None and holds(wide, a) and holds(wide, b)
    assert all(wide.bit_width <= kind.bit_width for kind in fitting)
    assert widened_type(b, a) == wide
    listed = widened_type(pa.large_list(a) if large else pa.list_(a), pa.list_(b))
    assert listed == (pa.large_list(wide) if large else pa.list_(wide))
    assert widened_type(pa.list_(a), pa.list_(pa.float32())) is None

"""seqpack_cli.prepared.reader and .schema: what `load_prepared` and `seqpack stats DIR` accept.

- pools: tens of thousands of distinct lengths run a full epoch with a bounded number of
  memory mappings (the kernel allows 65530 per process by default);
- the manifest, counts.json and templates.json follow their schema: a wrong type, a missing
  field or a bool for an integer is one `PreparedFormatError` naming the field and the value;
- a directory whose files agree with their hashes but not with each other (templates over
  max_seq_len, templates that do not use every sequence once) is refused;
- a fuzz test: random junk in any of the three files never gives a traceback, and never an
  accepted directory that is not usable.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import pickle
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.errors import ConfigError, PreparedFormatError
from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.prepared import load_prepared, templates_to_json, write_prepared
from seqpack_cli.prepared import reader as reader_module
from seqpack_cli.prepared.integrity import seal_manifest

runner = CliRunner()

COUNTS = {3: 2, 5: 3, 7: 1}
POOLS = {3: [40, 10], 5: [2, 99, 50], 7: [8]}
TEMPLATES = Counter({(7, 3): 1, (5, 5): 1, (5, 3): 1})


def _write(path: Path, **manifest: Any) -> Path:
    return write_prepared(
        path,
        counts=COUNTS,
        templates=TEMPLATES,
        pools=POOLS,
        manifest={"config": {"max_seq_len": 10}, **manifest},
    )


def _rewrite(path: Path, name: str, document: Any) -> None:
    """Replace one JSON file and record its new size and sha256: the hashes agree again."""
    data = (json.dumps(document) + "\n").encode()
    (path / name).write_bytes(data)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (path / "manifest.json").write_text(json.dumps(seal_manifest(manifest)))


def _edit_manifest(path: Path, change: Any) -> None:
    """Edit the manifest and seal it again (its own digest agrees: the other checks must tell)."""
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    (path / "manifest.json").write_text(json.dumps(seal_manifest(manifest)))


def _stats(path: Path, *args: str) -> Any:
    # A small sample for the sequential baseline: the default (1,000,000) costs ~0.1 s a run.
    return runner.invoke(
        app, ["stats", str(path), "--sample-size", "100", *args], env={"COLUMNS": "150"}
    )


def _stats_error(path: Path) -> str:
    """`seqpack stats PATH`: one `error:` line on stderr and exit code 1; returns the line."""
    result = _stats(path)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


# ---- pools: a bounded number of mappings ---------------------------------------------------


_MANY_LENGTHS_SCRIPT = """
import sys
from collections import Counter

import numpy as np

from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.prepared import load_prepared, reader, write_prepared


def num_mappings():
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


num_lengths = 70_000
counts = dict.fromkeys(range(1, num_lengths + 1), 1)
counts.update(dict.fromkeys(range(1, 11), 40))  # ten big pools: these stay mapped
pools = {length: np.arange(count) * num_lengths + length for length, count in counts.items()}
templates = Counter({(length,): count for length, count in counts.items()})
path = write_prepared(
    sys.argv[1],
    counts=counts,
    templates=templates,
    pools=pools,
    manifest={"config": {"max_seq_len": num_lengths}},
)
before = num_mappings()
prepared = load_prepared(path)
plan = EpochPlan(prepared.templates, prepared.pools)
ids, offsets = plan.bin_arrays(0, len(plan))
during = num_mappings()

expected = np.sort(np.concatenate(list(pools.values())))
assert np.array_equal(np.sort(ids), expected)  # every id exactly once
assert len(offsets) - 1 == sum(counts.values())
# Each bin holds one id of its template's length (id % num_lengths is its length).
sample = range(0, len(plan), 997)
lengths = np.array([plan.lengths(k)[0] for k in sample]) % num_lengths
assert np.array_equal(ids[offsets[:-1][::997]] % num_lengths, lengths)
assert prepared.pools.num_mapped == reader.MAX_MAPPED_POOLS
for length in range(1, 11):
    assert not prepared.pools[length].flags.owndata  # mapped, not copied
print(during - before)
"""


def test_70000_distinct_lengths_run_a_full_epoch_with_bounded_mappings(tmp_path: Path) -> None:
    # One pool per length and one mapping per pool used to stop at vm.max_map_count (65530):
    # "pools/65281.npy cannot be read ... (Cannot allocate memory); re-run seqpack prepare".
    # Now only the MAX_MAPPED_POOLS largest pools are mapped, the rest read into memory. Run in
    # its own process: a process out of mappings can hang instead of failing.
    result = subprocess.run(
        [sys.executable, "-c", _MANY_LENGTHS_SCRIPT, str(tmp_path / "long")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    added = int(result.stdout.split()[-1])
    assert added <= reader_module.MAX_MAPPED_POOLS + 512, added


def test_only_the_largest_pools_are_mapped(tmp_path: Path) -> None:
    prepared = load_prepared(_write(tmp_path / "prepared"), max_mapped_pools=2)
    pools = prepared.pools
    assert [pools[length].tolist() for length in (3, 5, 7)] == [[10, 40], [2, 50, 99], [8]]
    assert pools.num_mapped == 2
    assert not pools[5].flags.owndata and not pools[3].flags.owndata  # 3 and 2 ids: mapped
    assert pools[7].flags.owndata and not pools[7].flags.writeable  # 1 id: read, read-only
    # A DataLoader worker reopening the pools keeps the bound.
    reopened = pickle.loads(pickle.dumps(pools))
    assert reopened.max_mapped_pools == 2 and reopened[7].flags.owndata


@pytest.mark.parametrize("bad", [-1, 2.5, True])
def test_max_mapped_pools_must_be_a_count(tmp_path: Path, bad: Any) -> None:
    path = _write(tmp_path / "prepared")
    with pytest.raises(
        ConfigError, match=r"max_mapped_pools is .*; expected a non-negative integer"
    ):
        load_prepared(path, max_mapped_pools=bad)


def test_a_pool_that_cannot_be_mapped_is_read_instead(
    tmp_path: Path, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def out_of_mappings(fd: int, size: int) -> Any:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(reader_module, "_map_readonly", out_of_mappings)
    prepared = load_prepared(_write(tmp_path / "prepared"))
    with caplog.at_level(logging.WARNING, logger="seqpack_cli.prepared.reader"):
        assert prepared.pools[5].tolist() == [2, 50, 99]
    assert prepared.pools.num_mapped == 0
    assert "cannot memory-map" in caplog.text and "vm.max_map_count" in caplog.text


# ---- the manifest's schema -------------------------------------------------------------------


def _set(*keys: str, value: Any) -> Any:
    def change(manifest: dict[str, Any]) -> None:
        node = manifest
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return change


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # Used to be an AttributeError traceback ('int' object has no attribute 'get').
        (_set("files", "counts.json", value=5), r'files\["counts.json"\] is 5 \(integer\)'),
        (
            _set("files", "templates.json", "bytes", value="47"),
            r'files\["templates.json"\]\.bytes is "47" \(string\); expected an integer',
        ),
        (
            _set("files", "counts.json", "sha256", value=None),
            r'files\["counts.json"\]\.sha256 is null \(null\); expected a sha256',
        ),
        (_set("files", value=[]), r"field files is \[\] \(array\); expected an object"),
        (
            _set("files", "../../etc/passwd", value={"bytes": 1, "sha256": "0" * 64}),
            r'field files lists "../../etc/passwd", which is not a file of a prepared directory',
        ),
        # Used to be a ValueError traceback (int("abc")), or silently int("512").
        (
            _set("config", "max_seq_len", value="abc"),
            r'config\.max_seq_len is "abc" \(string\); expected an integer in \[1, 2147483647\]',
        ),
        (_set("config", "max_seq_len", value="10"), r'config\.max_seq_len is "10" \(string\)'),
        (_set("config", "max_seq_len", value=10.5), r"config\.max_seq_len is 10.5 \(number\)"),
        (_set("config", "max_seq_len", value=True), r"config\.max_seq_len is true \(boolean\)"),
        (
            _set("config", "max_seq_len", value=2**64),
            r"config\.max_seq_len is 18446744073709551616",
        ),
        (_set("config", value="x"), r'field config is "x" \(string\); expected an object'),
        # Used to be accepted: True == 1 == 1.0.
        (_set("format_version", value=True), r"format_version is true \(boolean\); expected the"),
        (_set("format_version", value=1.0), r"format_version is 1.0 \(number\); expected the"),
        (_set("format", value="other"), r'has format "other" \(string\), expected "seqpack-prep'),
        (_set("summary", value=[1]), r"field summary is \[1\] \(array\); expected an object"),
        (
            _set("inputs", value={"num_files": "3"}),
            r'inputs\.num_files is "3" \(string\); expected an integer in \[0, 2\*\*63 - 1\]',
        ),
        (_set("max_seq_len", value=12), r"has max_seq_len 12 but config.max_seq_len 10"),
        (_set("n_bins", value=4), r"field n_bins is 4 but templates.json holds 3 bins"),
        (_set("n_sequences", value=-1), r"field n_sequences is -1 \(integer\); expected an"),
    ],
)
def test_a_manifest_off_its_schema_is_one_clear_error(
    tmp_path: Path, change: Any, expected: str
) -> None:
    path = _write(tmp_path / "prepared", max_seq_len=10, n_sequences=6, n_bins=3)
    load_prepared(path)
    _edit_manifest(path, change)
    with pytest.raises(PreparedFormatError, match=expected) as caught:
        load_prepared(path)
    assert "re-run `seqpack prepare" in str(caught.value) or "format" in str(caught.value)
    assert _stats_error(path) == f"error: {caught.value.cli_message()}"


def test_a_missing_required_field_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path / "prepared")
    _edit_manifest(path, lambda manifest: manifest["config"].pop("max_seq_len"))
    with pytest.raises(PreparedFormatError, match=r'field config has no "max_seq_len"'):
        load_prepared(path)
    _edit_manifest(path, lambda manifest: manifest.pop("config"))
    with pytest.raises(PreparedFormatError, match=r'manifest\.json has no "config"'):
        load_prepared(path)


def test_manifests_from_before_the_format_key_and_minimal_ones_load(tmp_path: Path) -> None:
    path = _write(tmp_path / "prepared")
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(manifest) == {
        "format",
        "format_version",
        "seqpack_version",
        "config",
        "files",
        "manifest_sha256",
    }
    _edit_manifest(path, lambda manifest: manifest.pop("format"))
    assert load_prepared(path, verify=True).templates == TEMPLATES


def test_json_that_is_not_strict_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "prepared")
    text = (path / "manifest.json").read_text()
    (path / "manifest.json").write_text(text.replace('"config": {', '"config": {"a": NaN, ', 1))
    with pytest.raises(PreparedFormatError, match=r"manifest\.json cannot be read \(NaN"):
        load_prepared(path)
    _rewrite(path, "counts.json", {})
    (path / "manifest.json").write_text(text)
    (path / "counts.json").write_text('{"3": 2, "3": 2, "5": 3, "7": 1}')
    with pytest.raises(PreparedFormatError, match=r"key '3' appears twice"):
        load_prepared(path)


def test_a_prepare_manifest_passes_the_schema(prepared_dir: Path) -> None:
    # What `seqpack prepare` writes (every key of prepare.job._manifest) is what the schema expects.
    manifest = load_prepared(prepared_dir, verify=True).manifest
    assert {"format", "config", "inputs", "summary", "stats", "n_bins"} <= set(manifest)


# ---- counts.json and templates.json: types, and agreement with each other ----------------------


@pytest.mark.parametrize(
    ("name", "document", "expected"),
    [
        ("counts.json", [1, 2], r"counts\.json holds \[1, 2\] \(array\); expected an object"),
        ("counts.json", {"3": 2, "5": 3, "7": True}, r"has true \(boolean\) sequences of length 7"),
        ("counts.json", {"3": 2, "5": 3.0, "7": 1}, r"has 3.0 \(number\) sequences of length 5"),
        ("counts.json", {"3": 2, "05": 3, "7": 1}, r'counts\.json has the key "05"; expected'),
        ("counts.json", {"3": 2, "5": 3, "7": 1, "11": 0}, r"length 11, longer than config\.max"),
        ("templates.json", {"a": 1}, r"templates\.json holds .* \(object\); expected an array"),
        ("templates.json", [[[7, 3], 1], [[5, 5], 1], [[5, "3"], 1]], r"entry 2 is \[\[5, \"3\""),
        ("templates.json", [[[7, 3], 1], [[5, 5], 1], [[5, 3], True]], r"entry 2 is .*integer"),
        ("templates.json", [[[7, 3], 1], [[5, 5], 1], [[3, 5], 1]], r"not sorted descending"),
        ("templates.json", [[[7, 3], 1], [[5, 5], 1], [[5, 3], 0]], r"has multiplicity 0"),
        ("templates.json", [[[7, 3], 1], [[5, 5], 1], [[5, 3], 1], [[], 1]], r"is empty"),
        ("templates.json", [[[7, 3], 1], [[5, 5], 1], [[5, 3], 1], [[4], 1]], r"has length 4,"),
        (
            "templates.json",
            [[[7, 3], 1], [[5, 5], 1], [[5, 3], 1], [[5, 3], 1]],
            r"entry 3 .* appears twice",
        ),
        # Consistent but wrong: hashes agree, the templates do not fit or lose sequences.
        (
            "templates.json",
            [[[7, 5, 3], 1], [[5, 5], 1], [[3], 1]],
            r"entry 0 \(\[\[7, 5, 3\], 1\] \(array\)\) holds 15 tokens, more than config\.max_seq",
        ),
        (
            "templates.json",
            [[[7, 3], 1], [[5, 5], 1], [[5, 3], 2]],
            r"hold 3 sequences of length 3 but counts\.json says 2: every sequence",
        ),
        (
            "templates.json",
            [[[7, 3], 1], [[5, 5], 1]],
            r"hold 1 sequences of length 3 but counts\.json says 2",
        ),
    ],
)
def test_counts_and_templates_are_checked(
    tmp_path: Path, name: str, document: Any, expected: str
) -> None:
    path = _write(tmp_path / "prepared")
    _rewrite(path, name, document)
    with pytest.raises(PreparedFormatError, match=expected) as caught:
        load_prepared(path, verify=True)  # the hashes agree: only the checks can tell
    assert _stats_error(path) == f"error: {caught.value.cli_message()}"


def test_a_max_seq_len_below_the_templates_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "prepared")
    _edit_manifest(path, _set("config", "max_seq_len", value=9))
    with pytest.raises(
        PreparedFormatError,
        match=r"entry 0 \(\[\[7, 3\], 1\] \(array\)\) holds 10 tokens, more than config\.max",
    ):
        load_prepared(path)


def test_templates_over_max_seqs_per_bin_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "prepared")
    _edit_manifest(path, _set("config", "max_seqs_per_bin", value=1))
    with pytest.raises(PreparedFormatError, match=r"holds 2 sequences, more than config\.max_seqs"):
        load_prepared(path)
    _edit_manifest(path, _set("config", "max_seqs_per_bin", value=2))
    assert load_prepared(path).templates == TEMPLATES


def test_templates_are_written_canonical(tmp_path: Path) -> None:
    # write_prepared writes what load_prepared accepts: lengths descending, each template once.
    unsorted = {(3, 7): 1, (5, 5): 1, (3, 5): 1, (4, 4): 0}
    assert templates_to_json(unsorted) == templates_to_json(TEMPLATES)
    path = write_prepared(
        tmp_path / "prepared",
        counts=COUNTS,
        templates=unsorted,
        pools=POOLS,
        manifest={"config": {"max_seq_len": 10}},
    )
    assert load_prepared(path).templates == TEMPLATES


# ---- fuzz: junk anywhere, never a traceback, never an accepted unusable directory -------------


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`seqpack prepare` output with every manifest key: 13 rows, one over the cap dropped."""
    root = tmp_path_factory.mktemp("tiny")
    lengths = [3, 5, 5, 7, 2, 9, 3, 4, 6, 8, 1, 10, 20]
    write_parquet(
        root / "in.parquet", {"n": lengths, "doc": [100 + i for i in range(len(lengths))]}
    )
    config = PrepareConfig(
        inputs=[root / "in.parquet"],
        length_column="n",
        id_column="doc",
        max_seq_len=12,
        max_seqs_per_bin=3,
        filter_over_cap=True,
        output=root / "prepared",
    )
    return prepare_dataset(config).path


_LEAF = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([0, -1, 1, 2, 12, 2**31, 2**63 - 1, 2**63, 2**64])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
_JUNK = st.recursive(
    _LEAF,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=5,
)
_FILES = ("manifest.json", "counts.json", "templates.json")


def _nudged(value: Any, how: str) -> Any:
    """A value changed the way a plausible corruption would: same type, another number."""
    if type(value) is not int:
        return value
    return {"+1": value + 1, "-1": value - 1, "x2": value * 2, "neg": -value}[how]


def _mutate(document: Any, data: st.DataObject) -> Any:
    """Walk to a random node of a JSON document and replace, delete, nudge or add there."""
    replace = data.draw(st.integers(0, 9), label="replace the whole document") == 0
    if replace or not isinstance(document, (dict, list)):
        return data.draw(_JUNK, label="document")
    node = document
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            return document
        key = data.draw(st.sampled_from(keys), label="key")
        child = node[key]
        deeper = isinstance(child, (dict, list)) and child
        if deeper and data.draw(st.booleans(), label="deeper"):
            node = child
            continue
        action = data.draw(st.sampled_from(["junk", "nudge", "delete", "add"]), label="action")
        if action == "junk":
            node[key] = data.draw(_JUNK, label="junk")
        elif action == "nudge":
            node[key] = _nudged(child, data.draw(st.sampled_from(["+1", "-1", "x2", "neg"])))
        elif action == "delete":
            del node[key]
        elif isinstance(node, dict):
            node[data.draw(st.text(max_size=6), label="new key")] = data.draw(_JUNK)
        else:
            node.append(data.draw(_JUNK, label="new item"))
        return document


def _assert_usable(path: Path, original: Any) -> None:
    """What a loaded directory must give: every id once, in bins of their own lengths that fit."""
    prepared = load_prepared(path, verify=True)
    assert prepared.counts == original.counts and prepared.templates == original.templates
    assert isinstance(prepared.max_seq_len, int)
    plan = EpochPlan(prepared.templates, prepared.pools)
    length_of = {int(i): length for length, ids in original.pools.items() for i in ids}
    seen = []
    for k in range(len(plan)):
        template = plan.lengths(k)
        assert sum(template) <= prepared.max_seq_len
        assert sorted((length_of[i] for i in plan[k]), reverse=True) == list(template)
        seen += plan[k]
    assert sorted(seen) == sorted(length_of)
    for name in ("summary", "inputs", "config", "stats"):
        assert isinstance(prepared.manifest.get(name, {}), dict)


@settings(
    max_examples=100,
    derandomize=True,  # the same examples every run: `make test` is reproducible
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzz_manifest_counts_and_templates(tiny_dir: Path, data: st.DataObject) -> None:
    original = load_prepared(tiny_dir, verify=True)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "prepared"
        shutil.copytree(tiny_dir, path)
        for _ in range(data.draw(st.integers(1, 2), label="mutations")):
            name = data.draw(st.sampled_from(_FILES), label="file")
            document = _mutate(json.loads((path / name).read_text()), data)
            if name == "manifest.json":
                (path / name).write_text(json.dumps(document))
            else:
                try:
                    _rewrite(path, name, document)  # hashes agree: the deeper checks must tell
                except (KeyError, TypeError, AttributeError):  # the files table is junk already
                    (path / name).write_text(json.dumps(document))
        try:
            load_prepared(path)
        except PreparedFormatError as error:
            assert _stats_error(path) == f"error: {error.cli_message()}"
            return
        _assert_usable(path, original)
        result = _stats(path, "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["kind"] == "prepared"

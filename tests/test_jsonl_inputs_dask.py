"""`--engine dask` on JSON Lines inputs: the bytes of the local engine on the same rows as parquet.

The datasets of test_dask_engine (`dask_datasets.write_dataset`: uneven files, one empty, one in
a subfolder) are rewritten as JSON Lines (plain and gzipped; the empty file stays parquet, as an
empty JSON Lines file is refused), then prepared by the Dask engine on the test session's
`LocalCluster` of 2 worker processes, cut into many small file groups; the local engine prepares
the parquet originals. Each worker copies the JSON Lines columns it reads on its own
(`jsonl_staging`), so no task reads another's copy.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from dask_datasets import tree, write_dataset
from test_jsonl_inputs import write_jsonl

from seqpack_cli.errors import InputError
from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.prepare.engines.dask.tuning import ClusterTuning

pytest.importorskip("distributed")

SMALL = ClusterTuning(group_rows=300, merge_ids=150, check_ids=200, block_ids=64, samples=8)
ON_DISK = dataclasses.replace(SMALL, memory_ids=1)


def _as_jsonl(parquet_root: Path, jsonl_root: Path) -> None:
    """Every non-empty parquet file of `parquet_root` as JSON Lines under the same name (every
    other one gzipped), the empty one copied as parquet."""
    for i, path in enumerate(sorted(parquet_root.rglob("*.parquet"))):
        relative = path.relative_to(parquet_root)
        table = pq.read_table(path)
        if not table.num_rows:
            target = jsonl_root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
            continue
        suffix = ".jsonl.gz" if i % 2 else ".jsonl"
        write_jsonl((jsonl_root / relative).with_suffix(suffix), table.to_pylist())


def _manifest(path: Path) -> dict[str, Any]:
    manifest = json.loads((path / "manifest.json").read_text())
    for key in ("engine", "manifest_sha256", "inputs"):
        manifest.pop(key, None)
    return manifest


CASES = {
    "sparse ids": ({"ids": "sparse"}, {}),
    "row indexes": ({"ids": "rows"}, {"id_column": None}),
    "row indexes, on disk": ({"ids": "rows"}, {"id_column": None, "tuning": ON_DISK}),
    "hashed ids, truncated": ({"ids": "hashed"}, {"max_seq_len": 30, "over_cap": "truncate"}),
    "token lists": ({"ids": "sparse", "lists": True, "rows": 800},
                    {"max_seq_len": 64, "over_cap": "drop"}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_dask_on_jsonl_gives_the_local_bytes_of_parquet(
    dask_cluster: Any, tmp_path: Path, case: str
) -> None:
    data, options = CASES[case]
    options = dict(options)
    tuning = options.pop("tuning", SMALL)
    parquet = write_dataset(tmp_path / "parquet", **data)
    _as_jsonl(parquet, tmp_path / "jsonl")
    base: dict[str, Any] = {"length_column": "n", "max_seq_len": 512, "id_column": "doc_id"}
    base.update(options)
    local, dask = tmp_path / "local", tmp_path / "dask"
    prepare_dataset(PrepareConfig(inputs=[parquet], output=local, **base))
    prepare_dataset(
        PrepareConfig(
            inputs=[tmp_path / "jsonl"],
            output=dask,
            engine="dask",
            scheduler=dask_cluster.scheduler_address,
            cluster_tuning=tuning,
            **base,
        )
    )
    assert tree(dask) == tree(local)
    assert _manifest(dask) == _manifest(local)
    listed = json.loads((dask / "manifest.json").read_text())["inputs"]["files"]
    assert [Path(f["path"]).name.split(".")[1] for f in listed] == [
        "jsonl" if i != 1 else "parquet" for i in range(len(listed))
    ]


def test_dask_words_a_bad_line_as_the_local_engine(dask_cluster: Any, tmp_path: Path) -> None:
    parquet = write_dataset(tmp_path / "parquet", ids="sparse")
    _as_jsonl(parquet, tmp_path / "jsonl")
    victim = tmp_path / "jsonl" / "part-04.jsonl.gz"
    with gzip.open(victim, "rt") as lines:
        rows = [json.loads(line) for line in lines]
    rows[5]["n"] = "7"  # a string among integers: found by the read, by its line
    write_jsonl(victim, rows)
    messages = []
    dask = {"engine": "dask", "scheduler": dask_cluster.scheduler_address, "cluster_tuning": SMALL}
    for engine in ({}, dask):
        config = PrepareConfig(
            inputs=[tmp_path / "jsonl"], output=tmp_path / "out", length_column="n",
            max_seq_len=512, id_column="doc_id", **engine,
        )  # fmt: skip
        with pytest.raises(InputError) as raised:
            prepare_dataset(config)
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    assert 'part-04.jsonl.gz line 6 holds "7"' in messages[0]
    assert not (tmp_path / "out").exists()

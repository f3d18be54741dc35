"""The `prepared/` directory: the on-disk index that `seqpack prepare` writes once.

- `format`: file names, the format version, canonical JSON bytes, `Prepared`;
- `writer`: `PreparedWriter` (atomic: temporary sibling, manifest last, one swap), `write_prepared`;
- `staging`: the hidden temporary sibling the writer builds in: created, locked, discarded;
- `pool_files`: the `pools/{length}.npy` files, created with their headers, filled by appends;
- `pool_creation`: the pool files created in a background thread while the caller scans;
- `swap`: `move_into_place`, the one step that puts the new directory where the output is;
- `output_checks`: `check_output`, what an output may replace;
- `siblings`: the hidden temporary siblings' names, renameat2, `recover_siblings` after killed runs;
- `reader`: `load_prepared` and `PoolMap` (memory-mapped pools, checks, `verify=True` hashes);
- `schema`: what manifest.json must hold (`check_manifest`), one schema checked in one place;
- `consistency`: counts.json and templates.json agree with each other and the manifest;
- `strict_json`: the strict JSON every file of the directory is read with;
- `integrity`: the manifest's own digest and the token store's edge digests;
- `snapshot`: one consistent copy read through a descriptor of the directory itself;
- `mounts`: other filesystems mounted inside an output, found up front and never entered;
- `store`: the token store opened (`tokens/`, `labels/`, `loss_mask/`);
- `remote_check`: `load_prepared(verify=True)` asks the store whether remote inputs changed;
- `tokenizer_check`: `Prepared.check_tokenizer`, a tokenizer compared with the one recorded;
- `alignment`: whether a token source matches the directory's pools (`check_pool_lengths`);
- `repack`: `Prepared.repack`, the directory re-targeted at load time; `multiples`: templates
  packed on lengths rounded up to a multiple; `slot_pools`: `SlotPools`, the pools keyed by slot.

Part of the training-time runtime: imports neither duckdb nor rich.
"""

from __future__ import annotations

from seqpack_cli.prepared.format import (
    COUNTS_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    TEMPLATES_NAME,
    Prepared,
    counts_to_json,
    inputs_overview,
    templates_to_json,
)
from seqpack_cli.prepared.output_checks import check_output
from seqpack_cli.prepared.pool_files import pool_file_name
from seqpack_cli.prepared.reader import PoolMap, load_prepared
from seqpack_cli.prepared.siblings import recover_siblings
from seqpack_cli.prepared.writer import PreparedWriter, write_prepared

__all__ = [
    "COUNTS_NAME",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "TEMPLATES_NAME",
    "PoolMap",
    "Prepared",
    "PreparedWriter",
    "check_output",
    "counts_to_json",
    "inputs_overview",
    "load_prepared",
    "pool_file_name",
    "recover_siblings",
    "templates_to_json",
    "write_prepared",
]

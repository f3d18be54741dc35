"""The batch job behind `seqpack prepare`: parquet files -> a `prepared/` directory.

- `job`: `PrepareConfig` (every option, validated) and `prepare_dataset` (footers, length
  histogram, packing, the pools pass, the atomic write);
- `__main__`: `python -m seqpack_cli.prepare --input ...`, the reference's spelling of the command.

`load_prepared` is re-exported here under the reference's path (`seqpack_cli.prepare`).
"""

from __future__ import annotations

from seqpack_cli.prepare.job import PACKERS, PrepareConfig, load_prepared, prepare_dataset

__all__ = ["PACKERS", "PrepareConfig", "load_prepared", "prepare_dataset"]

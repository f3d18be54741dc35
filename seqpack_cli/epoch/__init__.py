"""Epochs: the packing plan's templates bound to concrete ids, a new seeded pairing every epoch.

- `plan`: `EpochPlan` (random access to any bin of any epoch, batched, sharded by rank) and
  `materialize_epoch`, the reference's generator over one epoch's bins.
"""

from __future__ import annotations

from seqpack_cli.epoch.plan import EpochPlan, materialize_epoch

__all__ = ["EpochPlan", "materialize_epoch"]

"""Epochs: the packing plan's templates bound to concrete ids, a new seeded pairing every epoch.

Modules, from the public surface down:
- `plan`: `EpochPlan` (random access to any bin of any epoch, batched, sharded by rank) and
  `materialize_epoch`, the reference's generator over one epoch's bins.
- `dealing`: how the bins are dealt to ranks step by step: strided (`DistributedSampler`'s
  order) or balanced by attention cost.
- `cursor`: `EpochCursor`, what is left of an epoch (resume on another world size), and the
  stream of positions a plan deals.
- `tuning`: `EpochTuning`, the frozen tunables of a plan (batch sizes, tables, list layout).
- `batches`: one batch of bins in one vectorised pass (`BatchDrawer`), cut into lists (`Chunk`).
- `tables`: the canonical layout: the template of each canonical bin, the pool position of each
  slot (`TemplateTables`, with its bucket table).
- `pools`: the id pools, checked against the templates and read through their permutations
  (`IdPools`), the smallest merged into one array.
- `concat_pools`: `ConcatPool`, a slot length's exact-length pools under a length multiple.
- `permutations`: `FeistelPermutation` and `FeistelFamily`, stateless seeded permutations.
- `feistel`: the Feistel network and cycle walking, vectorised over numpy words.
- `scratch`: `Scratch`, the work arrays reused from batch to batch.
"""

from __future__ import annotations

from seqpack_cli.epoch.cursor import EpochCursor
from seqpack_cli.epoch.plan import EpochPlan, materialize_epoch
from seqpack_cli.epoch.tuning import EpochTuning

__all__ = ["EpochCursor", "EpochPlan", "EpochTuning", "materialize_epoch"]

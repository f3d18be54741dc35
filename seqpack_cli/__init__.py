"""seqpack: sequence packing for transformer training.

Everything public is importable from here. Names are resolved lazily (PEP 562), so
`import seqpack_cli` costs nothing: training code pays only for the modules it uses, and torch
is imported only when a torch builder is first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from seqpack_cli.errors import MissingDependencyError

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # errors
    "SeqpackError": "errors",
    "InputError": "errors",
    "ConfigError": "errors",
    "MissingDependencyError": "errors",
    "PreparedFormatError": "errors",
    # seeding
    "seed_from_components": "seeding",
    "shuffle_bins": "seeding",
    # per-sequence and histogram packing
    "BinTemplate": "packing.histogram",
    "sort_indices_by_length": "packing.per_sequence",
    "greedy_pack_sequences": "packing.per_sequence",
    "heap_pack_sequences": "packing.per_sequence",
    "length_histogram_from_lengths": "packing.per_sequence",
    "pack_length_histogram": "packing.histogram",
    "pack_length_histogram_batched": "packing.histogram",
    # epochs
    "EpochPlan": "epoch.plan",
    "EpochCursor": "epoch.cursor",
    "materialize_epoch": "epoch.plan",
    # statistics
    "PackingStats": "packing.efficiency",
    # prepared/ directories
    "Prepared": "prepared",
    "load_prepared": "prepared",
    "prepare_dataset": "prepare",
    "PrepareConfig": "prepare",
    "write_token_source": "prepare.token_files",
    "check_token_source": "prepare.token_files",
    # torch builders, collation, datasets, streaming
    "build_packing_attention_bias": "masking",
    "build_packing_cu_seqlens": "masking",
    "build_position_ids": "masking",
    "build_segment_ids": "masking",
    "build_flex_block_mask": "masking",
    "pack_one_bin": "collate",
    "PackedCollator": "collate",
    "CollateOptions": "collate",
    "FlatTokenSource": "collate",
    "PackedDataset": "data",
    "PackedIterableDataset": "data",
    "PackedDataLoader": "data",
    "pack_stream": "packing.online",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


# The optional dependencies a public name's module may import, and the extra that installs each.
_EXTRAS = {"torch": "torch"}


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'seqpack_cli' has no attribute {name!r}")
    try:
        module = importlib.import_module(f"seqpack_cli.{module_name}")
    except (ModuleNotFoundError, MissingDependencyError) as error:
        # `from seqpack_cli import PackedDataset` without torch: say which extra to install, not
        # torch's bare "No module named 'torch'" from deep inside the datasets.
        missing = (error.name or "").partition(".")[0]
        if missing not in _EXTRAS:
            raise
        raise MissingDependencyError(
            f"seqpack_cli.{name} needs {missing}, which is not installed: "
            f"pip install 'seqpack-cli[{_EXTRAS[missing]}]'"
        ) from None
    value = getattr(module, name)
    globals()[name] = value  # cache: later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return __all__

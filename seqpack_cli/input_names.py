"""Which file and object names are inputs, by their ending (any case): one definition for local
files (`prepare.inputs`) and remote objects (`remote.listing`).

A directory search, a glob or a prefix takes parquet files and JSON Lines files ending in
`.jsonl` or `.jsonl.gz`; a `.json` file is an input only when named (or spelled by a glob),
since metadata files such as `dataset_info.json` sit beside datasets.
"""

from __future__ import annotations

__all__ = ["JSONL_SUFFIXES", "PARQUET_SUFFIXES", "SEARCHED_JSONL_SUFFIXES", "SEARCHED_SUFFIXES"]

PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")
"""Parquet by extension."""

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json")
"""JSON Lines (one JSON object per line) by name ending."""

SEARCHED_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz")
"""The JSON Lines endings a search takes."""

SEARCHED_SUFFIXES = (*PARQUET_SUFFIXES, *SEARCHED_JSONL_SUFFIXES)
"""Every ending a directory search, a glob or a prefix takes."""

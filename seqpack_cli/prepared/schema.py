"""What a prepared directory's JSON files must hold, checked in one place before anything is used.

- `check_manifest`: manifest.json against its schema (below): what readers rely on is required
  (`format_version`, `config.max_seq_len`, `files` with every file's `bytes` and `sha256`), every
  other known field is type-checked when present, unknown fields are kept (`write_prepared`
  passes the caller's own keys through). Manifests written before the `format` key existed have
  none: accepted.
(counts.json and templates.json, and their agreement with each other and the manifest, are
checked in `seqpack_cli.prepared.consistency`.)

Every problem is a `PreparedFormatError` naming the file, the field, the bad value, what was
expected and how to rebuild the directory (`unusable`). Plain Python over the parsed JSON, no
dependency. Integers are bounded by int64 (ids, counts and sizes are int64 at run time) and
`max_seq_len` by `MAX_SEQ_LEN_LIMIT`, as `seqpack prepare` bounds it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from seqpack_cli import __version__
from seqpack_cli.checks import MAX_SEQ_LEN_LIMIT
from seqpack_cli.errors import PreparedFormatError
from seqpack_cli.over_cap import OVER_CAP
from seqpack_cli.prepared.format import (
    COUNTS_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    READABLE_FORMAT_VERSIONS,
    STORE_ROLES,
    TEMPLATES_NAME,
)
from seqpack_cli.prepared.pool_files import POOLS_DIR
from seqpack_cli.prepared.strict_json import show

__all__ = [
    "INT_RANGE_MAX",
    "MAX_INT",
    "check_manifest",
    "unusable",
]

MAX_INT = 2**63 - 1
"""The largest integer any field may hold: ids, counts and sizes are int64 at run time."""

INT_RANGE_MAX = "2**63 - 1"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_POOL_NAME = re.compile(rf"{POOLS_DIR}/([1-9][0-9]{{0,18}})\.npy")
_STORE_NAME = re.compile(
    rf"({'|'.join(STORE_ROLES)})/(tokens\.npy|offsets\.npy|ids\.npy|rows\.npy|token_source\.json)"
    r"|tokens/pieces\.npy|(labels|loss_mask)/num_targets\.npy"
)


class _Invalid(Exception):
    """A schema problem, worded without the directory; `unusable` adds it and the fix."""


def unusable(path: Path, problem: str) -> PreparedFormatError:
    """The error for a prepared directory that cannot be used, with the command that rebuilds it."""
    error = PreparedFormatError(
        f"{path} is not a usable prepared directory: {problem}; re-run `seqpack prepare ... "
        f"--output {path} --overwrite` to rebuild it"
    )
    error.problem = problem  # the bare problem, for callers that word their own fix
    return error


def _field(where: str) -> str:
    """How a manifest field is named in a message: `manifest.json field config.max_seq_len`."""
    return f"{MANIFEST_NAME} field {where}" if where else MANIFEST_NAME


def _child(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _expect(where: str, value: Any, expected: str) -> NoReturn:
    raise _Invalid(f"{_field(where)} is {show(value)}; expected {expected}")


# ---- checks: each is check(value, where) and raises _Invalid -----------------------------------

_Check = Callable[[Any, str], None]


def _integer(minimum: int = 0, maximum: int = MAX_INT, *, nullable: bool = False) -> _Check:
    top = INT_RANGE_MAX if maximum == MAX_INT else str(maximum)
    bottom = "-2**63" if minimum == -MAX_INT - 1 else str(minimum)
    expected = f"an integer in [{bottom}, {top}]" + (" or null" if nullable else "")

    def check(value: Any, where: str) -> None:
        if value is None and nullable:
            return
        if type(value) is not int or not minimum <= value <= maximum:
            _expect(where, value, expected)

    return check


def _fraction(value: Any, where: str) -> None:
    if type(value) not in (int, float) or not 0 <= value <= 1:
        _expect(where, value, "a number in [0, 1]")


def _number(value: Any, where: str) -> None:
    if type(value) not in (int, float) or not -float(MAX_INT) <= value <= float(MAX_INT):
        _expect(where, value, "a number")


def _string(*, choices: tuple[str, ...] = (), nullable: bool = False) -> _Check:
    expected = " or ".join(json.dumps(c) for c in choices) if choices else "a string"
    expected += " or null" if nullable else ""

    def check(value: Any, where: str) -> None:
        if value is None and nullable:
            return
        if not isinstance(value, str) or (choices and value not in choices):
            _expect(where, value, expected)

    return check


def _boolean(value: Any, where: str) -> None:
    if not isinstance(value, bool):
        _expect(where, value, "true or false")


def _sha256(value: Any, where: str) -> None:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        _expect(where, value, "a sha256 digest (64 lowercase hexadecimal digits)")


def _object(fields: Mapping[str, tuple[bool, _Check]]) -> _Check:
    """A JSON object with these fields (required or not); other keys are left alone."""

    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            _expect(where, value, "an object")
        for key, (required, check_field) in fields.items():
            if key in value:
                check_field(value[key], _child(where, key))
            elif required:
                raise _Invalid(f"{_field(where)} has no {json.dumps(key)}")

    return check


def _array_of(check_item: _Check) -> _Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, list):
            _expect(where, value, "an array")
        for i, item in enumerate(value):
            check_item(item, f"{where}[{i}]")

    return check


def _object_of(check_item: _Check) -> _Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            _expect(where, value, "an object")
        for key, item in value.items():
            check_item(item, f"{where}[{json.dumps(key)}]")

    return check


def _file_names(value: Any, where: str) -> None:
    for name in value:
        if name not in (COUNTS_NAME, TEMPLATES_NAME) and not (
            _POOL_NAME.fullmatch(name) or _STORE_NAME.fullmatch(name)
        ):
            raise _Invalid(
                f"{_field(where)} lists {json.dumps(name)[:60]}, which is not a file of a prepared "
                f"directory (expected {COUNTS_NAME}, {TEMPLATES_NAME} and {POOLS_DIR}/LENGTH.npy)"
            )
    for name in (COUNTS_NAME, TEMPLATES_NAME):
        if name not in value:
            raise _Invalid(f"{_field(where)} does not list {name}")


def _store_roles(value: Any, where: str) -> None:
    for role in value:
        if role not in STORE_ROLES:
            raise _Invalid(
                f"{_field(where)} has {json.dumps(role)[:60]}; expected only "
                f"{', '.join(STORE_ROLES)}"
            )
    if "tokens" not in value:
        raise _Invalid(f'{_field(where)} has no "tokens"')
    if "labels" in value and "loss_mask" in value:
        raise _Invalid(f'{_field(where)} has both "labels" and "loss_mask"')


def _all(*checks: _Check) -> _Check:
    def check(value: Any, where: str) -> None:
        for each in checks:
            each(value, where)

    return check


_COUNT = _integer(0)
# Token totals over the inputs (prepare's over-cap counts): a uint64 length column may hold
# lengths past int64 (dropped or truncated, but counted exactly), so sums may pass int64.
_TOKEN_TOTAL = _integer(0, 2**127)
_MAX_SEQ_LEN = _integer(1, MAX_SEQ_LEN_LIMIT)
_ID = _integer(-MAX_INT - 1, nullable=True)
_STORE_DTYPES = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")


def _nullable_sha256(value: Any, where: str) -> None:
    if value is not None:
        _sha256(value, where)


# `prepare --tokenizer`'s record (`tokenize.TokenizerSpec.record` and `TokenizeOptions.to_json`).
_TOKENIZER = _object(
    {
        "sha256": (True, _sha256),
        "vocab_size": (True, _integer(1)),
        "special_tokens": (
            False,
            _object_of(_object({"token": (True, _string()), "id": (False, _ID)})),
        ),
        "chat_template_sha256": (False, _nullable_sha256),
        "kind": (True, _string(choices=("text", "messages", "prompt_completion"))),
        "columns": (False, _array_of(_string())),
        "train_on": (False, _string(choices=("assistant", "all"))),
        "add_special_tokens": (False, _boolean),
    }
)

# What `seqpack prepare` writes (prepare/job.py `_manifest`, prepared/writer.py `commit`).
# format and format_version are checked first, by `check_manifest` itself.
_MANIFEST = _object(
    {
        "seqpack_version": (False, _string()),
        "max_seq_len": (False, _MAX_SEQ_LEN),  # the reference's key; equals config.max_seq_len
        "n_sequences": (False, _COUNT),
        "n_bins": (False, _COUNT),
        "efficiency": (False, _fraction),
        "config": (
            True,
            _object(
                {
                    "max_seq_len": (True, _MAX_SEQ_LEN),
                    "length_column": (False, _string()),
                    "id_column": (False, _string(nullable=True)),
                    "ids": (False, _string(choices=("id_column", "row_index"))),
                    "packer": (False, _string()),
                    "max_seqs_per_bin": (False, _integer(1, nullable=True)),
                    "filter_over_cap": (False, _boolean),
                    "over_cap": (False, _string(choices=OVER_CAP)),
                }
            ),
        ),
        "inputs": (
            False,
            _object(
                {
                    "num_files": (False, _COUNT),
                    "num_rows": (False, _COUNT),
                    "num_bytes": (False, _COUNT),
                    "files": (
                        False,
                        _array_of(
                            _object(
                                {
                                    "path": (True, _string()),
                                    "bytes": (False, _COUNT),
                                    "num_rows": (False, _COUNT),
                                }
                            )
                        ),
                    ),
                }
            ),
        ),
        "summary": (
            False,
            _object(
                {
                    **dict.fromkeys(
                        (
                            "num_input_rows",
                            "num_sequences",
                            "num_tokens",
                            "num_bins",
                            "lower_bound_bins",
                            "num_distinct_lengths",
                            "num_templates",
                            "min_length",
                            "max_length",
                            "num_dropped",
                            "num_over_cap",
                            "num_truncated",
                            "num_split",
                            "num_pieces",
                        ),
                        (False, _COUNT),
                    ),
                    **dict.fromkeys(
                        (
                            "num_input_tokens",
                            "num_tokens_over_cap",
                            "num_tokens_dropped",
                            "num_tokens_truncated",
                            "num_tokens_split",
                        ),
                        (False, _TOKEN_TOTAL),
                    ),
                    "efficiency": (False, _fraction),
                    "dropped": (False, _object_of(_COUNT)),
                    "id_min": (False, _ID),
                    "id_max": (False, _ID),
                }
            ),
        ),
        "stats": (False, _object_of(_number)),
        "manifest_sha256": (False, _sha256),  # checked against the content by `integrity`
        "tokenizer": (False, _TOKENIZER),
        "token_store": (
            False,
            _all(
                _object_of(
                    _object(
                        {
                            "column": (True, _string()),
                            "dtype": (True, _string(choices=_STORE_DTYPES)),
                            "num_sequences": (False, _COUNT),
                            "num_tokens": (False, _COUNT),
                        }
                    )
                ),
                _store_roles,
            ),
        ),
        "files": (
            True,
            _all(
                _object_of(
                    _object(
                        {
                            "bytes": (True, _COUNT),
                            "sha256": (True, _sha256),
                            "edges_sha256": (False, _sha256),
                        }
                    )
                ),
                _file_names,
            ),
        ),
    }
)


def check_manifest(path: Path, manifest: Any) -> dict[str, Any]:
    """`manifest` (parsed manifest.json of the directory `path`), checked against the schema."""
    where = MANIFEST_NAME
    if not isinstance(manifest, dict):
        raise unusable(path, f"{where} holds {show(manifest)}; expected an object")
    if "format" in manifest and manifest["format"] != FORMAT_NAME:
        raise PreparedFormatError(
            f"{path} is not a seqpack prepared directory: its {where} has format "
            f"{show(manifest['format'])}, expected {json.dumps(FORMAT_NAME)}; give a directory "
            "written by `seqpack prepare`"
        )
    if "format_version" not in manifest:
        raise unusable(path, f"{where} has no format_version")
    version = manifest["format_version"]
    if type(version) is not int:
        expected = f"expected the integer {FORMAT_VERSION} (or 1, before the digests)"
        raise unusable(path, f"{where} field format_version is {show(version)}; {expected}")
    if version not in READABLE_FORMAT_VERSIONS:
        writer = manifest.get("seqpack_version")
        if not isinstance(writer, str) or not writer.isprintable():
            writer = "unknown version"
        raise PreparedFormatError(
            f"{path} has format_version {str(version)[:40]}, but seqpack {__version__} reads only "
            f"format_version {FORMAT_VERSION} (and 1); rebuild it with this seqpack "
            f"(`seqpack prepare ... --output {path} --overwrite`) or load it with the seqpack "
            "that wrote it "
            f"({writer[:40]})"
        )
    try:
        _MANIFEST(manifest, "")
    except _Invalid as problem:
        raise unusable(path, str(problem)) from None
    top, config = manifest.get("max_seq_len"), manifest["config"]["max_seq_len"]
    if top is not None and top != config:
        raise unusable(
            path,
            f"{where} has max_seq_len {top} but config.max_seq_len {config}; they must agree",
        )
    return manifest

"""Strict JSON for a prepared directory's files, and values shown as they are written there.

`parse_json` refuses what `json.loads` lets through but no writer of ours produces (NaN,
Infinity, a key twice in one object), so a hand-edited or corrupted file is caught, not guessed
at; `show` quotes a value in a message as its JSON text and type.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

__all__ = ["parse_json", "show"]


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key {key!r} appears twice in one object")
            seen.add(key)
    return result


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str) -> Any:
    """Strict JSON: no NaN or Infinity, no key twice in one object. Raises ValueError (also for
    nesting too deep to parse)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def show(value: Any) -> str:
    """A value as its JSON text (shortened) and JSON type, e.g. `true (boolean)`."""
    try:
        text = json.dumps(value)
    except (ValueError, RecursionError):
        text = "..."
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({_json_type(value)})"

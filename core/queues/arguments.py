"""Argument tables (of exchanges, queues and bindings) as JSON, without losing their value types.

Arguments arrive as plain Python values: str, bytes, bool, int, float, Decimal, datetime, None, and
lists and mappings of those. JSON alone would turn bytes into nothing and Decimal into float, so
each value is stored as a one-key object naming its type:

    {"s": "text"} {"b": "<base64>"} {"t": true} {"i": 12} {"f": 1.5} {"d": "1.25"}
    {"ts": 1700000000} {"n": null} {"a": [...]} {"m": {"key": {...}}}
"""

from __future__ import annotations

import base64
import datetime
import decimal
from collections.abc import Mapping
from typing import Any

Arguments = Mapping[str, Any]


def to_json(arguments: Arguments) -> dict[str, Any]:
    return {str(key): _value_to_json(value) for key, value in arguments.items()}


def from_json(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _value_from_json(value) for key, value in doc.items()}


def _value_to_json(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"t": value}
    if isinstance(value, int):
        return {"i": int(value)}
    if isinstance(value, float):
        return {"f": float(value)}
    if isinstance(value, str):
        return {"s": str(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"b": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, decimal.Decimal):
        return {"d": str(value)}
    if isinstance(value, datetime.datetime):
        return {"ts": int(value.timestamp())}
    if value is None:
        return {"n": None}
    if isinstance(value, Mapping):
        return {"m": to_json(value)}
    if isinstance(value, (list, tuple)):
        return {"a": [_value_to_json(item) for item in value]}
    raise TypeError(f"no stored form for an argument of type {type(value).__name__}")


def _value_from_json(doc: Mapping[str, Any]) -> Any:
    (tag, value), = doc.items()
    if tag in ("t", "i", "f", "s", "n"):
        return value
    if tag == "b":
        return base64.b64decode(value)
    if tag == "d":
        return decimal.Decimal(value)
    if tag == "ts":
        return datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
    if tag == "m":
        return from_json(value)
    if tag == "a":
        return [_value_from_json(item) for item in value]
    raise ValueError(f"unknown stored argument type {tag!r}")

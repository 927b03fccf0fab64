"""The vocabulary every Kafka API is declared in, once, as data (schema/<api>.py).

    PRODUCE = Api(0, "Produce", (0, 9), flexible="9+",
        request=(F("transactional_id", STRING, "3+", nullable="3+"), F("acks", INT16), ...),
        response=(...))

A field has Kafka's name in snake_case, a type, the versions it exists in ("0+", "3+", "1-4",
"none"), the versions it may be null in, an optional tag (tagged fields of flexible versions) and
an optional default. A struct is a tuple of fields; ARRAY(x) wraps a type or a struct. The codec
for each (api, version, direction) is compiled from this by compile.py; ApiVersions and the handler
registry are derived from the same declarations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Primitive type names.
INT8, INT16, INT32, INT64, UINT16, UINT32, FLOAT64 = "int8", "int16", "int32", "int64", "uint16", "uint32", "float64"
BOOL, UUID, STRING, BYTES, RECORDS = "bool", "uuid", "string", "bytes", "records"

MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class Versions:
    low: int
    high: int | None   # None: no upper bound

    @classmethod
    def parse(cls, text: str | None) -> "Versions":
        if text is None or text == "none":
            return cls(1, 0)  # empty
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            low, high = text.split("-")
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return version >= self.low and (self.high is None or version <= self.high)


@dataclass(frozen=True, slots=True)
class Array:
    item: Any  # a primitive name or a struct (tuple of Field)


def ARRAY(item: Any) -> Array:
    return Array(tuple(item) if isinstance(item, list) else item)


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: Any
    versions: Versions
    nullable: Versions
    tag: int | None = None
    tagged: Versions = field(default_factory=lambda: Versions(1, 0))
    default: Any = MISSING


def F(name: str, type_: Any, versions: str = "0+", *, nullable: str | None = None, tag: int | None = None,
      tagged: str | None = None, default: Any = MISSING) -> Field:
    if isinstance(type_, list):
        type_ = tuple(type_)
    return Field(name, type_, Versions.parse(versions), Versions.parse(nullable), tag,
                 Versions.parse(tagged if tagged is not None else (versions if tag is not None else None)), default)


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    versions: tuple[int, int]          # (min, max) served
    flexible: Versions
    request: tuple[Field, ...]
    response: tuple[Field, ...]

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible


def api(key: int, name: str, versions: tuple[int, int], *, flexible: str = "none",
        request: tuple | list, response: tuple | list) -> Api:
    return Api(key, name, versions, Versions.parse(flexible), tuple(request), tuple(response))

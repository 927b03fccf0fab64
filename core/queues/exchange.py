"""Exchanges, bindings, and how each exchange type matches a message against a binding.

- direct: the routing key equals the binding key.
- fanout: every binding.
- topic: binding keys are dot-separated words where "*" stands for exactly one word and "#" for
  zero or more ("stock.*.nyse", "audit.#"); words may be empty ("a..b" has three).
- headers: the binding's arguments are the pattern. "x-match" says how it applies: "all" (the
  default: every pattern entry matches), "any" (at least one), and "all-with-x" / "any-with-x",
  which also count pattern entries whose names start with "x-" (plain all/any skip them). An entry
  matches when the message has a header of that name and, unless the pattern's value is None
  (presence only), an equal value of the same kind (numbers of any width compare as numbers;
  a boolean is not a number).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from core.queues import arguments as stored_arguments


class ExchangeType(enum.StrEnum):
    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"


class DestinationKind(enum.StrEnum):
    QUEUE = "queue"
    EXCHANGE = "exchange"


ALTERNATE_EXCHANGE = "alternate-exchange"


@dataclass(frozen=True, slots=True)
class Exchange:
    name: str
    type: ExchangeType
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)

    @property
    def alternate(self) -> str | None:
        """The exchange that gets what this one cannot route (the "alternate-exchange" argument)."""
        value = self.arguments.get(ALTERNATE_EXCHANGE)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        return value if isinstance(value, str) and value else None

    def to_doc(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type.value, "durable": self.durable, "auto_delete": self.auto_delete,
                "internal": self.internal, "arguments": stored_arguments.to_json(self.arguments)}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "Exchange":
        return cls(doc["name"], ExchangeType(doc["type"]), doc["durable"], doc["auto_delete"], doc["internal"],
                   stored_arguments.from_json(doc["arguments"]))


@dataclass(frozen=True, slots=True)
class Binding:
    source: str                  # an exchange
    destination: str             # a queue or an exchange, as `kind` says
    kind: DestinationKind
    key: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)

    @property
    def binding_id(self) -> str:
        """Stable over restarts and equal for equal bindings, so binding twice stores one row."""
        doc = json.dumps([self.source, self.kind.value, self.destination, self.key,
                          stored_arguments.to_json(self.arguments)], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(doc.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def same_as(self, other: "Binding") -> bool:
        return self.binding_id == other.binding_id

    def to_doc(self) -> dict[str, Any]:
        return {"source": self.source, "destination": self.destination, "kind": self.kind.value, "key": self.key,
                "arguments": stored_arguments.to_json(self.arguments)}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "Binding":
        return cls(doc["source"], doc["destination"], DestinationKind(doc["kind"]), doc["key"],
                   stored_arguments.from_json(doc["arguments"]))


# --- topic ------------------------------------------------------------------------------------------

def topic_words(pattern: str) -> tuple[str, ...]:
    return tuple(pattern.split("."))


def topic_matches(pattern: tuple[str, ...], key: tuple[str, ...]) -> bool:
    """Does the routing key's word list match the binding pattern's ("*" one word, "#" any number)?"""
    # reachable[j]: the pattern so far can consume exactly the first j words of the key
    reachable = [True] + [False] * len(key)
    for word in pattern:
        if word == "#":
            for j in range(1, len(key) + 1):
                reachable[j] = reachable[j] or reachable[j - 1]
        else:
            for j in range(len(key), 0, -1):
                reachable[j] = reachable[j - 1] and (word == "*" or word == key[j - 1])
            reachable[0] = False
    return reachable[len(key)]


# --- headers ----------------------------------------------------------------------------------------

X_MATCH = "x-match"
_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")


@dataclass(frozen=True, slots=True)
class HeadersPattern:
    match_all: bool
    entries: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> "HeadersPattern":
        mode = arguments.get(X_MATCH, "all")
        if isinstance(mode, bytes):
            mode = mode.decode("utf-8", "replace")
        if mode not in _MATCH_MODES:
            raise ValueError(f"x-match must be one of {', '.join(_MATCH_MODES)}, got {mode!r}")
        with_x = mode.endswith("-with-x")
        entries = tuple((name, value) for name, value in arguments.items()
                        if name != X_MATCH and (with_x or not name.startswith("x-")))
        return cls(mode.startswith("all"), entries)

    def matches(self, headers: Mapping[str, Any]) -> bool:
        if self.match_all:
            return all(_entry_matches(name, value, headers) for name, value in self.entries)
        return any(_entry_matches(name, value, headers) for name, value in self.entries)


def _entry_matches(name: str, expected: Any, headers: Mapping[str, Any]) -> bool:
    if name not in headers:
        return False
    if expected is None:
        return True
    actual = headers[name]
    return _kind(actual) == _kind(expected) and actual == expected


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float, Decimal)):
        return "number"
    if isinstance(value, (str, bytes)):
        return "string"
    return type(value).__name__

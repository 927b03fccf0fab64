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
- x-consistent-hash: each message goes to exactly one binding, picked on a hash ring
  (core/queues/hash_ring.py) where a binding's key is its weight; what is hashed is the routing
  key, or the header named by the argument "hash-header", or the property named by "hash-property"
  (message_id, correlation_id, timestamp). A message without that header or property still goes
  to one binding (they all hash alike), as RabbitMQ's plugin does.
- x-delayed-message: routes by the rules of the type named by its argument "x-delayed-type";
  holding a message until its delay has passed is the publisher's decision (core/delayed).
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
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
    CONSISTENT_HASH = "x-consistent-hash"
    DELAYED = "x-delayed-message"


class DestinationKind(enum.StrEnum):
    QUEUE = "queue"
    EXCHANGE = "exchange"


ALTERNATE_EXCHANGE = "alternate-exchange"
DELAYED_TYPE = "x-delayed-type"
HASH_HEADER = "hash-header"
HASH_PROPERTY = "hash-property"
HASH_PROPERTIES = ("correlation_id", "message_id", "timestamp")


@dataclass(frozen=True, slots=True)
class Exchange:
    name: str
    type: ExchangeType
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)
    declared_by: str = field(default="", compare=False)   # a transient exchange's broker process (cluster)

    @property
    def alternate(self) -> str | None:
        """The exchange that gets what this one cannot route (the "alternate-exchange" argument)."""
        value = self.arguments.get(ALTERNATE_EXCHANGE)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        return value if isinstance(value, str) and value else None

    @property
    def routing_type(self) -> ExchangeType:
        """The type whose rules route its messages: a delayed exchange's x-delayed-type."""
        if self.type is ExchangeType.DELAYED:
            return ExchangeType(_text(self.arguments.get(DELAYED_TYPE)))
        return self.type

    @property
    def hash_on(self) -> tuple[str, str] | None:
        """A consistent-hash exchange's ("header" | "property", name), or None: the routing key."""
        header, prop = _text(self.arguments.get(HASH_HEADER)), _text(self.arguments.get(HASH_PROPERTY))
        if header is not None:
            return ("header", header)
        if prop is not None:
            return ("property", prop)
        return None

    def to_doc(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type.value, "durable": self.durable, "auto_delete": self.auto_delete,
                "internal": self.internal, "arguments": stored_arguments.to_json(self.arguments),
                **({"declared_by": self.declared_by} if self.declared_by else {})}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "Exchange":
        return cls(doc["name"], ExchangeType(doc["type"]), doc["durable"], doc["auto_delete"], doc["internal"],
                   stored_arguments.from_json(doc["arguments"]), doc.get("declared_by", ""))


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


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def check_exchange(exchange: Exchange) -> None:
    """ValueError (with RabbitMQ's words) if a new exchange's arguments do not fit its type."""
    if exchange.type is ExchangeType.DELAYED:
        delayed_type = _text(exchange.arguments.get(DELAYED_TYPE))
        if delayed_type == ExchangeType.DELAYED:
            raise ValueError("Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'")
        if not isinstance(delayed_type, str) or delayed_type not in ExchangeType.__members__.values():
            raise ValueError("Invalid argument, 'x-delayed-type' must be an existing exchange type")
    if exchange.routing_type is ExchangeType.CONSISTENT_HASH:
        header, prop = exchange.arguments.get(HASH_HEADER), exchange.arguments.get(HASH_PROPERTY)
        for name, value in ((HASH_HEADER, header), (HASH_PROPERTY, prop)):
            if value is not None and not isinstance(_text(value), str):
                raise ValueError(f"Invalid argument, '{name}' must be a string")
        if header is not None and prop is not None:
            raise ValueError("hash-header and hash-property are mutually exclusive")
        if prop is not None and _text(prop) not in HASH_PROPERTIES:
            raise ValueError(f"Unsupported property: {_text(prop)}")


def check_binding(source: Exchange, binding: "Binding") -> None:
    """ValueError (with RabbitMQ's words) if the binding does not fit its source's type."""
    routing_type = source.routing_type
    if routing_type is ExchangeType.HEADERS:
        HeadersPattern.of(binding.arguments)
    elif routing_type is ExchangeType.CONSISTENT_HASH:
        binding_weight(binding.key)


_INTEGER = re.compile(r"[+-]?[0-9]+")


def binding_weight(key: str) -> int:
    """A consistent-hash binding's weight: its key, a positive integer."""
    if not _INTEGER.fullmatch(key):
        raise ValueError(f'The binding key must be an integer: <<"{key}">>')
    weight = int(key)
    if weight < 1:
        raise ValueError("The binding key must be greater than 0")
    return weight


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

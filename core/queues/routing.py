"""Routing a message through a namespace's exchanges and bindings to the queues it lands in.

One `RoutingTable` per namespace, in memory, rebuilt per exchange when its bindings change. A route
follows exchange-to-exchange bindings (each exchange visited once, so cycles end) and an exchange's
alternate exchange when the exchange itself matched no binding. The default exchange (named "")
routes to the queue named by the routing key, if there is one.

Headers and properties are only looked at by headers and consistent-hash exchanges, so the
caller passes them as functions and a message routed elsewhere never has them decoded. A delayed
exchange routes by the rules of its x-delayed-type (whether to hold the message first is the
caller's decision).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from core.queues.exchange import (Binding, DestinationKind, Exchange, ExchangeType, HeadersPattern, binding_weight,
                                  topic_matches, topic_words)
from core.queues.hash_ring import HashRing

HeadersFunction = Callable[[], Mapping[str, Any]]
PropertiesFunction = Callable[[], Mapping[str, Any]]    # a message's properties by name: message_id, ...
Destination = tuple[DestinationKind, str]
_UNDEFINED = b"\0undefined"     # what a missing hash header or property hashes as


def no_properties() -> Mapping[str, Any]:
    return {}


def _hashed(value: Any) -> bytes:
    if value is None:
        return _UNDEFINED
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, bool):
        return b"true" if value else b"false"
    return str(value).encode("utf-8", "surrogateescape")

DEFAULT_EXCHANGE = ""


class _Matcher:
    """One exchange's bindings, indexed for its type."""

    __slots__ = ("type", "by_key", "everything", "topics", "headers", "ring", "hash_on")

    def __init__(self, exchange: Exchange, bindings: Collection[Binding]) -> None:
        try:
            exchange_type = exchange.routing_type
        except ValueError:      # refused when declared; a stored one that no longer parses matches nothing
            exchange_type, bindings = ExchangeType.FANOUT, ()
        self.type = exchange_type
        self.by_key: dict[str, list[Destination]] = {}
        self.everything: list[Destination] = []
        self.topics: list[tuple[tuple[str, ...], Destination]] = []
        self.headers: list[tuple[HeadersPattern, Destination]] = []
        self.hash_on = exchange.hash_on
        weighted: list[tuple[Destination, str, int]] = []
        for binding in bindings:
            destination = (binding.kind, binding.destination)
            if exchange_type is ExchangeType.CONSISTENT_HASH:
                try:
                    weighted.append((destination, f"{binding.kind.value}:{binding.destination}",
                                     binding_weight(binding.key)))
                except ValueError:
                    pass   # refused when bound
            elif exchange_type is ExchangeType.DIRECT:
                self.by_key.setdefault(binding.key, []).append(destination)
            elif exchange_type is ExchangeType.FANOUT:
                self.everything.append(destination)
            elif exchange_type is ExchangeType.TOPIC:
                self.topics.append((topic_words(binding.key), destination))
            else:
                try:
                    self.headers.append((HeadersPattern.of(binding.arguments), destination))
                except ValueError:
                    pass   # refused when bound; a stored one that no longer parses matches nothing
        self.ring = HashRing(weighted) if weighted else None

    def match(self, routing_key: str, headers: HeadersFunction, properties: PropertiesFunction) -> list[Destination]:
        if self.type is ExchangeType.DIRECT:
            return self.by_key.get(routing_key, [])
        if self.type is ExchangeType.FANOUT:
            return self.everything
        if self.type is ExchangeType.TOPIC:
            words = topic_words(routing_key)
            return [destination for pattern, destination in self.topics if topic_matches(pattern, words)]
        if self.type is ExchangeType.CONSISTENT_HASH:
            if self.ring is None:
                return []
            return [self.ring.pick(self._hash_value(routing_key, headers, properties))]
        if not self.headers:
            return []
        values = headers()
        return [destination for pattern, destination in self.headers if pattern.matches(values)]

    def _hash_value(self, routing_key: str, headers: HeadersFunction, properties: PropertiesFunction) -> bytes:
        if self.hash_on is None:
            return _hashed(routing_key)
        kind, name = self.hash_on
        values = headers() if kind == "header" else properties()
        return _hashed(values.get(name))


class RoutingTable:
    def __init__(self) -> None:
        self.exchanges: dict[str, Exchange] = {}
        self.bindings: dict[str, dict[str, Binding]] = {}     # source exchange -> binding id -> binding
        self._matchers: dict[str, _Matcher] = {}

    # --- changes ------------------------------------------------------------------------------

    def put_exchange(self, exchange: Exchange) -> None:
        self.exchanges[exchange.name] = exchange
        self._matchers.pop(exchange.name, None)

    def remove_exchange(self, name: str) -> list[Binding]:
        """Forget the exchange and every binding from or to it; returns those bindings."""
        self.exchanges.pop(name, None)
        self._matchers.pop(name, None)
        removed = list(self.bindings.pop(name, {}).values())
        removed += self.remove_destination(DestinationKind.EXCHANGE, name)
        return removed

    def add_binding(self, binding: Binding) -> bool:
        """False if an equal binding exists already."""
        bindings = self.bindings.setdefault(binding.source, {})
        if binding.binding_id in bindings:
            return False
        bindings[binding.binding_id] = binding
        self._matchers.pop(binding.source, None)
        return True

    def remove_binding(self, binding: Binding) -> bool:
        bindings = self.bindings.get(binding.source, {})
        if bindings.pop(binding.binding_id, None) is None:
            return False
        self._matchers.pop(binding.source, None)
        return True

    def remove_destination(self, kind: DestinationKind, name: str) -> list[Binding]:
        """Drop every binding to this queue or exchange; returns them."""
        removed = []
        for source, bindings in self.bindings.items():
            gone = [b for b in bindings.values() if b.kind is kind and b.destination == name]
            for binding in gone:
                del bindings[binding.binding_id]
            if gone:
                self._matchers.pop(source, None)
                removed += gone
        return removed

    def bindings_from(self, source: str) -> list[Binding]:
        return list(self.bindings.get(source, {}).values())

    def has_bindings_to(self, kind: DestinationKind, name: str) -> bool:
        return any(b.kind is kind and b.destination == name
                   for bindings in self.bindings.values() for b in bindings.values())

    # --- routing ------------------------------------------------------------------------------

    def route(self, exchange: str, routing_key: str, headers: HeadersFunction,
              queues: Collection[str], properties: PropertiesFunction = no_properties) -> list[str]:
        """The queues a message published to `exchange` lands in (each once), in routing order.
        `queues` are the existing queues (the default exchange's implicit bindings)."""
        if exchange == DEFAULT_EXCHANGE:
            return [routing_key] if routing_key in queues else []
        found: dict[str, None] = {}
        visited = {exchange}
        todo = [exchange]
        while todo:
            name = todo.pop()
            matched = self._matcher(name).match(routing_key, headers, properties) if name in self.exchanges else []
            for kind, destination in matched:
                if kind is DestinationKind.QUEUE:
                    if destination in queues:
                        found[destination] = None
                elif destination not in visited:
                    visited.add(destination)
                    todo.append(destination)
            if not matched:
                alternate = self.exchanges[name].alternate if name in self.exchanges else None
                if alternate is not None and alternate not in visited:
                    visited.add(alternate)
                    todo.append(alternate)
        return list(found)

    def _matcher(self, name: str) -> _Matcher:
        matcher = self._matchers.get(name)
        if matcher is None:
            matcher = _Matcher(self.exchanges[name], self.bindings.get(name, {}).values())
            self._matchers[name] = matcher
        return matcher

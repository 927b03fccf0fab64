"""Exchange types and the routing table: direct, fanout, topic, headers, e2e bindings, alternates."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.queues.exchange import (Binding, DestinationKind, Exchange, ExchangeType, HeadersPattern, topic_matches,
                                  topic_words)
from core.queues.routing import RoutingTable

Q, X = DestinationKind.QUEUE, DestinationKind.EXCHANGE


def no_headers():
    raise AssertionError("headers must not be decoded for this exchange type")


def table_with(*exchanges: Exchange, bindings: tuple[Binding, ...] = ()) -> RoutingTable:
    table = RoutingTable()
    for exchange in exchanges:
        table.put_exchange(exchange)
    for binding in bindings:
        table.add_binding(binding)
    return table


@pytest.mark.parametrize("pattern, key, expected", [
    ("a.b.c", "a.b.c", True),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.c", False),
    ("a.#", "a", True),
    ("a.#", "a.b.c", True),
    ("#.c", "c", True),
    ("#", "", True),
    ("*", "", True),
    ("*", "a.b", False),
    ("a.#.c", "a.c", True),
    ("a.#.c", "a.x.y.c", True),
    ("a.#.c", "a.x.y.d", False),
    ("#.#", "a", True),
    ("*.#", "", True),
    ("*.*", "a", False),
    ("a..b", "a..b", True),
    ("a.*.b", "a..b", True),
])
def test_topic_patterns_match_words_as_rabbitmq_does(pattern, key, expected) -> None:
    assert topic_matches(topic_words(pattern), topic_words(key)) is expected


def _reference_match(pattern: list[str], key: list[str]) -> bool:
    if not pattern:
        return not key
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_reference_match(rest, key[i:]) for i in range(len(key) + 1))
    return bool(key) and (head == "*" or head == key[0]) and _reference_match(rest, key[1:])


@given(st.lists(st.sampled_from(["a", "b", "*", "#"]), min_size=1, max_size=6),
       st.lists(st.sampled_from(["a", "b", ""]), min_size=1, max_size=6))
def test_topic_matching_agrees_with_a_recursive_reference(pattern, key) -> None:
    assert topic_matches(tuple(pattern), tuple(key)) == _reference_match(pattern, key)


def test_direct_exchange_routes_by_exact_key_to_each_queue_once() -> None:
    table = table_with(Exchange("d", ExchangeType.DIRECT), bindings=(
        Binding("d", "q1", Q, "red"), Binding("d", "q2", Q, "red"), Binding("d", "q1", Q, "blue")))
    queues = {"q1", "q2"}
    assert table.route("d", "red", no_headers, queues) == ["q1", "q2"]
    assert table.route("d", "blue", no_headers, queues) == ["q1"]
    assert table.route("d", "green", no_headers, queues) == []


def test_fanout_ignores_the_key_and_topic_uses_patterns() -> None:
    table = table_with(Exchange("f", ExchangeType.FANOUT), Exchange("t", ExchangeType.TOPIC), bindings=(
        Binding("f", "q1", Q, "x"), Binding("f", "q2", Q, ""),
        Binding("t", "q1", Q, "stock.*.nyse"), Binding("t", "q2", Q, "stock.#")))
    queues = {"q1", "q2"}
    assert sorted(table.route("f", "anything", no_headers, queues)) == ["q1", "q2"]
    assert sorted(table.route("t", "stock.ibm.nyse", no_headers, queues)) == ["q1", "q2"]
    assert table.route("t", "stock.ibm.lse", no_headers, queues) == ["q2"]


def test_default_exchange_routes_to_the_queue_named_by_the_key() -> None:
    table = RoutingTable()
    assert table.route("", "jobs", no_headers, {"jobs"}) == ["jobs"]
    assert table.route("", "missing", no_headers, {"jobs"}) == []


def test_headers_all_and_any_with_presence_only_entries() -> None:
    everything = HeadersPattern.of({"x-match": "all", "format": "pdf", "type": "report"})
    anything = HeadersPattern.of({"x-match": "any", "format": "pdf", "type": "report"})
    present = HeadersPattern.of({"flag": None})
    assert everything.matches({"format": "pdf", "type": "report", "extra": 1})
    assert not everything.matches({"format": "pdf"})
    assert anything.matches({"type": "report"})
    assert not anything.matches({"format": "zip"})
    assert present.matches({"flag": 7}) and not present.matches({})
    assert HeadersPattern.of({}).matches({}), "an empty all-pattern matches everything, as in RabbitMQ"
    assert not HeadersPattern.of({"x-match": "any"}).matches({"a": 1})


def test_headers_compare_kinds_and_skip_x_entries_unless_with_x() -> None:
    assert HeadersPattern.of({"n": 1}).matches({"n": 1})
    assert not HeadersPattern.of({"n": 1}).matches({"n": True}), "a boolean is not a number"
    assert not HeadersPattern.of({"n": 1}).matches({"n": "1"})
    plain = HeadersPattern.of({"x-match": "all", "x-tag": "a"})
    assert plain.matches({}), "x- entries are not part of an all pattern"
    with_x = HeadersPattern.of({"x-match": "all-with-x", "x-tag": "a"})
    assert not with_x.matches({}) and with_x.matches({"x-tag": "a"})
    with pytest.raises(ValueError, match="x-match"):
        HeadersPattern.of({"x-match": "some"})


def test_headers_exchange_decodes_headers_only_when_it_has_bindings() -> None:
    table = table_with(Exchange("h", ExchangeType.HEADERS))
    assert table.route("h", "", no_headers, {"q"}) == []
    table.add_binding(Binding("h", "q", Q, "", {"kind": "a"}))
    assert table.route("h", "", lambda: {"kind": "a"}, {"q"}) == ["q"]


def test_exchange_to_exchange_bindings_follow_and_cycles_end() -> None:
    table = table_with(Exchange("a", ExchangeType.FANOUT), Exchange("b", ExchangeType.FANOUT), bindings=(
        Binding("a", "b", X), Binding("b", "a", X), Binding("b", "q", Q)))
    assert table.route("a", "k", no_headers, {"q"}) == ["q"]


def test_alternate_exchange_takes_what_the_exchange_cannot_route() -> None:
    table = table_with(Exchange("main", ExchangeType.DIRECT, arguments={"alternate-exchange": "ae"}),
                       Exchange("ae", ExchangeType.FANOUT),
                       bindings=(Binding("main", "q1", Q, "known"), Binding("ae", "unrouted", Q)))
    queues = {"q1", "unrouted"}
    assert table.route("main", "known", no_headers, queues) == ["q1"]
    assert table.route("main", "other", no_headers, queues) == ["unrouted"]


def test_removing_a_destination_drops_its_bindings() -> None:
    table = table_with(Exchange("d", ExchangeType.DIRECT), bindings=(Binding("d", "q", Q, "k"),))
    assert [b.destination for b in table.remove_destination(Q, "q")] == ["q"]
    assert table.route("d", "k", no_headers, {"q"}) == []


def test_binding_ids_are_equal_for_equal_bindings_only() -> None:
    assert Binding("x", "q", Q, "k", {"a": 1}).binding_id == Binding("x", "q", Q, "k", {"a": 1}).binding_id
    assert Binding("x", "q", Q, "k").binding_id != Binding("x", "q", X, "k").binding_id
    assert Binding("x", "q", Q, "k", {"a": 1}).binding_id != Binding("x", "q", Q, "k", {"a": "1"}).binding_id

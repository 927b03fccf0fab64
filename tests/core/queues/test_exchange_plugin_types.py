"""The consistent-hash and delayed-message exchange types in the core: the ring, routing, the
declaration and binding checks, and a delayed exchange holding a message until it is due."""

from __future__ import annotations

import asyncio
import collections

import pytest

from core.errors import InvalidArgument
from core.queues.exchange import Binding, DestinationKind, Exchange, ExchangeType
from core.queues.hash_ring import HashRing
from core.queues.routing import RoutingTable
from core.queues.service import QueueService
from core.records.builder import Record

Q = DestinationKind.QUEUE
KEYS = [f"order-{n}".encode() for n in range(30_000)]


async def count_reaches(queue, count: int, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while await queue.message_count() < count:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"queue {queue.name} did not reach {count} messages")
        await asyncio.sleep(0.005)
    assert await queue.message_count() == count


# --- the ring ------------------------------------------------------------------------------------

@pytest.mark.parametrize("weights", [(1, 1, 1), (1, 2, 3), (5, 1, 10)])
def test_ring_shares_follow_the_weights(weights) -> None:
    ring = HashRing([(f"q{index}", f"queue:q{index}", weight) for index, weight in enumerate(weights)])
    counts = collections.Counter(ring.pick(key) for key in KEYS)
    for index, weight in enumerate(weights):
        expected = len(KEYS) * weight / sum(weights)
        assert abs(counts[f"q{index}"] - expected) < 0.1 * expected


def test_ring_is_the_same_whatever_the_order_it_was_built_in() -> None:
    members = [(f"q{index}", f"queue:q{index}", index + 1) for index in range(4)]
    one, other = HashRing(members), HashRing(list(reversed(members)))
    assert all(one.pick(key) == other.pick(key) for key in KEYS)


def test_adding_a_member_moves_only_its_share_and_only_to_it() -> None:
    members = [(f"q{index}", f"queue:q{index}", 1) for index in range(3)]
    before, after = HashRing(members), HashRing(members + [("q3", "queue:q3", 1)])
    moved = [key for key in KEYS if before.pick(key) != after.pick(key)]
    assert {after.pick(key) for key in moved} == {"q3"}
    assert 0.2 < len(moved) / len(KEYS) < 0.3


def test_an_empty_ring_picks_nothing_and_big_weights_are_capped() -> None:
    assert HashRing([]).pick(b"k") is None
    big = HashRing([("a", "queue:a", 1_000_000), ("b", "queue:b", 1_000_000)])
    assert len(big) <= 1 << 16
    counts = collections.Counter(big.pick(key) for key in KEYS[:10_000])
    assert abs(counts["a"] - 5_000) < 500


# --- routing -----------------------------------------------------------------------------------

def hash_table(**arguments) -> RoutingTable:
    table = RoutingTable()
    table.put_exchange(Exchange("ch", ExchangeType.CONSISTENT_HASH, arguments=arguments))
    for name in ("q1", "q2", "q3"):
        table.add_binding(Binding("ch", name, Q, "1"))
    return table


QUEUES = {"q1", "q2", "q3"}


def test_consistent_hash_routes_each_key_to_exactly_one_queue_and_always_the_same() -> None:
    table = hash_table()
    chosen = {key: table.route("ch", key, dict, QUEUES) for key in (f"k{n}" for n in range(300))}
    assert all(len(queues) == 1 for queues in chosen.values())
    assert {queues[0] for queues in chosen.values()} == QUEUES
    again = hash_table()
    assert all(again.route("ch", key, dict, QUEUES) == queues for key, queues in chosen.items())


def test_consistent_hash_on_a_header_or_a_property() -> None:
    by_header = hash_table(**{"hash-header": "customer"})
    spread = {by_header.route("ch", "same-key", lambda n=n: {"customer": f"c{n}"}, QUEUES)[0] for n in range(100)}
    assert spread == QUEUES          # the routing key no longer decides
    assert len(by_header.route("ch", "k", dict, QUEUES)) == 1     # no such header: still one queue
    by_property = hash_table(**{"hash-property": "message_id"})
    routed = {by_property.route("ch", "k", dict, QUEUES, lambda n=n: {"message_id": f"m{n}"})[0]
              for n in range(100)}
    assert routed == QUEUES


def test_a_delayed_exchange_routes_by_its_delayed_type() -> None:
    table = RoutingTable()
    table.put_exchange(Exchange("later", ExchangeType.DELAYED, arguments={"x-delayed-type": "topic"}))
    table.add_binding(Binding("later", "q1", Q, "orders.*"))
    assert table.route("later", "orders.eu", dict, QUEUES) == ["q1"]
    assert table.route("later", "orders.eu.x", dict, QUEUES) == []


# --- declaring and binding ------------------------------------------------------------------------

@pytest.fixture
async def service(core):
    service = QueueService(core)
    yield service
    await service.close()


async def test_declaration_and_binding_checks_speak_as_the_plugins_do(service) -> None:
    space = await service.namespace("public", "default")
    with pytest.raises(InvalidArgument, match="^Invalid argument, 'x-delayed-type' must be an existing exchange type$"):
        await space.declare_exchange("d", ExchangeType.DELAYED)
    with pytest.raises(InvalidArgument, match="'x-delayed-message' can't be used for 'x-delayed-type'"):
        await space.declare_exchange("d", ExchangeType.DELAYED, arguments={"x-delayed-type": "x-delayed-message"})
    with pytest.raises(InvalidArgument, match="^hash-header and hash-property are mutually exclusive$"):
        await space.declare_exchange("c", ExchangeType.CONSISTENT_HASH,
                                     arguments={"hash-header": "h", "hash-property": "message_id"})
    with pytest.raises(InvalidArgument, match="^Unsupported property: reply_to$"):
        await space.declare_exchange("c", ExchangeType.CONSISTENT_HASH, arguments={"hash-property": "reply_to"})
    await space.declare_exchange("c", ExchangeType.CONSISTENT_HASH)
    await space.declare_queue("q")
    with pytest.raises(InvalidArgument, match='^The binding key must be an integer: <<"heavy">>$'):
        await space.bind(Binding("c", "q", Q, "heavy"))
    with pytest.raises(InvalidArgument, match="^The binding key must be greater than 0$"):
        await space.bind(Binding("c", "q", Q, "0"))
    await space.bind(Binding("c", "q", Q, "+7"))
    # a delayed exchange checks bindings as its delayed type does
    await space.declare_exchange("dch", ExchangeType.DELAYED, arguments={"x-delayed-type": "x-consistent-hash"})
    with pytest.raises(InvalidArgument, match="must be an integer"):
        await space.bind(Binding("dch", "q", Q, "x"))


async def test_a_delayed_exchange_holds_messages_until_due_and_routes_them_by_its_type(core, service) -> None:
    space = await service.namespace("public", "default")
    await space.declare_exchange("later", ExchangeType.DELAYED, arguments={"x-delayed-type": "direct"})
    queue = await space.declare_queue("jobs")
    await space.bind(Binding("later", "jobs", Q, "run"))
    now = core.clock.now_ms()
    for value, delay in ((b"second", 2_000), (b"first", 1_000), (b"never", 1_500)):
        key = b"elsewhere" if value == b"never" else b"run"
        await space.hold("later", Record(now, key=key, value=value), now + delay)
    assert await queue.message_count() == 0
    core.clock.advance(1_000)
    await count_reaches(queue, 1)
    core.clock.advance(1_000)
    await count_reaches(queue, 2)
    got = [(await queue.get("me", auto_ack=True)).value for _ in range(2)]
    assert got == [b"first", b"second"]
    assert await queue.message_count() == 0

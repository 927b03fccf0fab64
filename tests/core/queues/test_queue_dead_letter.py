"""TTL, dead-lettering, length limits, delivery limits and unused-queue expiry in the core, on the
test clock: what expires when, where dead messages go with which history, cycles, overflow modes."""

from __future__ import annotations

import asyncio
import json

import pytest

from core.errors import InequivalentDeclaration, InvalidArgument
from core.queues import attributes
from core.queues.dead_letter import dead_copy, history, is_cycle, with_death
from core.queues.exchange import Binding, DestinationKind, ExchangeType
from core.queues.limits import PublishRefused
from core.queues.policy import QueuePolicy
from core.queues.service import QueueService, publish
from core.records.builder import Record
from tests.polling import eventually

Q = DestinationKind.QUEUE


class Taker:
    """A consumer that keeps what it was given."""

    def __init__(self, prefetch: int = 0) -> None:
        self.prefetch = prefetch
        self.auto_ack = False
        self.got = []

    def can_deliver(self) -> bool:
        return True

    def deliver(self, message) -> None:
        self.got.append(message)

    def queue_deleted(self) -> None:
        pass


@pytest.fixture
async def space(core):
    service = QueueService(core)
    yield await service.namespace("public", "default")
    await service.close()


def message(clock, value: bytes, key: bytes = b"rk", exchange: bytes = b"ex", expires_in: int | None = None) -> Record:
    headers = [(attributes.EXCHANGE, exchange), ("amqp.properties", b"\0\0")]
    if expires_in is not None:
        headers.append((attributes.EXPIRES_AT, str(clock.now_ms() + expires_in).encode()))
    return Record(clock.now_ms(), key=key, value=value, headers=tuple(headers))


async def put(space, name: str, *records: Record) -> None:
    for record in records:
        await asyncio.gather(*publish([space.queue(name)], record), return_exceptions=True)


async def dead_letter_setup(space, **arguments):
    """Queue "src" dead-lettering through fanout exchange "dlx" into queue "dlq"."""
    await space.declare_exchange("dlx", ExchangeType.FANOUT)
    dlq = await space.declare_queue("dlq")
    await space.bind(Binding("dlx", "dlq", Q, ""))
    src = await space.declare_queue("src", arguments={"x-dead-letter-exchange": "dlx", **arguments})
    await src.open()
    return src, dlq


async def wait_count(queue, count: int) -> None:
    for _ in range(400):
        if await queue.message_count() == count:
            return
        await asyncio.sleep(0.005)
    assert await queue.message_count() == count


def death(message_headers) -> dict:
    return history(message_headers)


# --- the death history ------------------------------------------------------------------------------

def test_death_history_counts_repeats_and_keeps_the_first() -> None:
    doc = with_death(None, queue="a", reason="expired", exchange="x", routing_keys=["k"], time_ms=1000,
                     original_expiration="50")
    doc = with_death(doc, queue="b", reason="rejected", exchange="dlx", routing_keys=["k"], time_ms=2000,
                     original_expiration=None)
    doc = with_death(doc, queue="a", reason="expired", exchange="other", routing_keys=["z"], time_ms=3000,
                     original_expiration=None)
    assert [(d["queue"], d["reason"], d["count"]) for d in doc["deaths"]] == [("a", "expired", 2), ("b", "rejected", 1)]
    assert doc["deaths"][0]["exchange"] == "x" and doc["deaths"][0]["original-expiration"] == "50"
    assert doc["first"] == {"queue": "a", "reason": "expired", "exchange": "x"}


@pytest.mark.parametrize("raw", [b"not json", b"[]", b'{"deaths": [1, "x"], "first": {}}', b'{"deaths": []}',
                                 b'{"deaths": [{"queue": "q", "reason": "r", "count": "many"}], "first": {}}'])
def test_a_death_header_not_written_by_the_core_is_ignored(raw) -> None:
    assert history(((attributes.DEATH, raw),)) is None


def test_cycles_are_deaths_back_into_a_queue_without_a_rejection_between() -> None:
    expired_in_a = [{"queue": "a", "reason": "expired"}]
    assert is_cycle("a", expired_in_a)
    assert not is_cycle("b", expired_in_a)
    assert not is_cycle("a", [{"queue": "a", "reason": "rejected"}])
    assert not is_cycle("a", [{"queue": "b", "reason": "rejected"}, {"queue": "a", "reason": "expired"}])
    assert is_cycle("a", [{"queue": "b", "reason": "maxlen"}, {"queue": "a", "reason": "expired"}])


def test_a_dead_copy_goes_through_the_dead_letter_exchange_without_its_expiry() -> None:
    headers = ((attributes.EXCHANGE, b"orders"), ("amqp.properties", b"raw"), (attributes.EXPIRES_AT, b"1500"),
               (attributes.TRANSIENT, b"1"))
    record, doc = dead_copy(1000, b"rk", b"body", headers, queue="q", reason="expired", exchange="dlx",
                            routing_key="new", now_ms=2000)
    assert record.key == b"new" and record.value == b"body" and record.timestamp_ms == 2000
    names = [name for name, _ in record.headers]
    assert names == [attributes.EXCHANGE, "amqp.properties", attributes.DEATH]
    assert dict(record.headers)[attributes.EXCHANGE] == b"dlx"
    assert doc["deaths"] == [{"queue": "q", "reason": "expired", "count": 1, "exchange": "orders",
                              "routing-keys": ["rk"], "time": 2000, "original-expiration": "500"}]
    assert json.loads(dict(record.headers)[attributes.DEATH]) == doc


# --- arguments ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("arguments, text", [
    ({"x-message-ttl": -1}, "invalid arg 'x-message-ttl' for queue 'q': {value_negative,-1}"),
    ({"x-message-ttl": "x"}, "invalid arg 'x-message-ttl' for queue 'q': \"expected integer, got longstr\""),
    ({"x-expires": 0}, "invalid arg 'x-expires' for queue 'q': {value_zero,0}"),
    ({"x-max-length": True}, "invalid arg 'x-max-length' for queue 'q': \"expected integer, got bool\""),
    ({"x-dead-letter-exchange": 5}, "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q'"),
    ({"x-dead-letter-routing-key": "k"}, "invalid arg 'x-dead-letter-routing-key' for queue 'q': "
                                         "routing_key_but_no_dlx_defined"),
    ({"x-overflow": "bogus"}, "invalid arg 'x-overflow' for queue 'q': invalid_overflow"),
    ({"x-queue-type": "bogus"}, "invalid arg 'x-queue-type' for queue 'q': \"unsupported queue type 'bogus'\""),
    ({"x-delivery-limit": 5}, "invalid arg 'x-delivery-limit' for queue 'q' of queue type rabbit_classic_queue"),
])
def test_bad_arguments_get_rabbitmqs_text(arguments, text) -> None:
    with pytest.raises(InvalidArgument) as refused:
        QueuePolicy.of("q", arguments)
    assert str(refused.value) == text


def test_quorum_queues_are_durable_shared_and_limit_deliveries_to_20_by_default() -> None:
    assert QueuePolicy.of("q", {"x-queue-type": "quorum"}).delivery_limit == 20
    assert QueuePolicy.of("q", {"x-queue-type": "quorum", "x-delivery-limit": -1}).delivery_limit is None
    assert QueuePolicy.of("q", {}).delivery_limit is None
    for flags, text in (({"durable": False}, "non-durable"), ({"exclusive": True}, "exclusive-owner"),
                        ({"auto_delete": True}, "auto-delete")):
        with pytest.raises(InvalidArgument, match=f"invalid property '{text}' for queue 'q'"):
            QueuePolicy.of("q", {"x-queue-type": "quorum"}, **flags)


async def test_redeclare_must_repeat_the_arguments_rabbitmq_compares(space) -> None:
    await space.declare_queue("q", arguments={"x-message-ttl": 1000})
    await space.declare_queue("q", arguments={"x-message-ttl": 1000, "x-custom": "ignored"})
    with pytest.raises(InequivalentDeclaration, match="received '2000' but current is '1000'"):
        await space.declare_queue("q", arguments={"x-message-ttl": 2000})
    with pytest.raises(InequivalentDeclaration, match="received none but current is the value '1000' of type "
                                                      "'signedint'"):
        await space.declare_queue("q")
    with pytest.raises(InequivalentDeclaration, match="inequivalent arg 'x-queue-type' for queue 'q': received the "
                                                      "value 'quorum' of type 'longstr' but current is none"):
        await space.declare_queue("q", arguments={"x-message-ttl": 1000, "x-queue-type": "quorum"})


# --- expiry -------------------------------------------------------------------------------------------

async def test_queue_ttl_dead_letters_expired_messages_with_their_history(core, space) -> None:
    clock = core.clock
    src, dlq = await dead_letter_setup(space, **{"x-message-ttl": 1000})
    await put(space, "src", message(clock, b"a"), message(clock, b"b"))
    await wait_count(src, 2)
    clock.advance(999)
    await asyncio.sleep(0.05)
    assert await src.message_count() == 2 and await dlq.message_count() == 0
    clock.advance(1)
    await wait_count(dlq, 2)
    assert await src.message_count() == 0
    got = await dlq.get("me", auto_ack=True)
    assert got.value == b"a" and got.key == b"rk"
    assert dict(got.headers)[attributes.EXCHANGE] == b"dlx"
    assert death(got.headers) == {
        "first": {"queue": "src", "reason": "expired", "exchange": "ex"},
        "deaths": [{"queue": "src", "reason": "expired", "count": 1, "exchange": "ex", "routing-keys": ["rk"],
                    "time": clock.now_ms()}]}


async def test_per_message_expiry_only_at_the_head_and_never_delivered(core, space) -> None:
    clock = core.clock
    src, dlq = await dead_letter_setup(space)
    await put(space, "src", message(clock, b"lives"), message(clock, b"dies", expires_in=100))
    await wait_count(src, 2)
    clock.advance(200)
    await asyncio.sleep(0.05)
    assert await dlq.message_count() == 0           # behind a message that does not expire
    assert (await src.get("me", auto_ack=True)).value == b"lives"
    assert await src.get("me", auto_ack=True) is None     # expired at the head: never handed out
    await wait_count(dlq, 1)
    got = await dlq.get("me", auto_ack=True)
    assert death(got.headers)["deaths"][0]["original-expiration"] == "100"
    assert not any(name == attributes.EXPIRES_AT for name, _ in got.headers)


async def test_ttl_zero_delivers_at_once_or_never(core, space) -> None:
    clock = core.clock
    queue = await space.declare_queue("zero", arguments={"x-message-ttl": 0})
    await put(space, "zero", message(clock, b"nobody-waits"))
    await asyncio.sleep(0.02)
    clock.advance(1)
    assert await queue.get("me", auto_ack=True) is None
    taker = Taker()
    await queue.add_consumer(taker)
    await put(space, "zero", message(clock, b"delivered"))
    await eventually(lambda: len(taker.got) == 1)
    assert taker.got[0].value == b"delivered"


async def test_expired_messages_without_a_dead_letter_exchange_are_dropped(core, space) -> None:
    clock = core.clock
    queue = await space.declare_queue("ttl", arguments={"x-message-ttl": 50})
    await put(space, "ttl", message(clock, b"x"), message(clock, b"y"))
    clock.advance(50)
    await wait_count(queue, 0)
    assert await queue.get("me", auto_ack=True) is None


# --- rejection, routing, cycles ----------------------------------------------------------------------

async def test_rejected_messages_go_to_the_dead_letter_routing_key(core, space) -> None:
    clock = core.clock
    await space.declare_exchange("dlx", ExchangeType.DIRECT)
    parked = await space.declare_queue("parked")
    await space.bind(Binding("dlx", "parked", Q, "parking"))
    src = await space.declare_queue("src", arguments={"x-dead-letter-exchange": "dlx",
                                                      "x-dead-letter-routing-key": "parking"})
    await put(space, "src", message(clock, b"bad", key=b"orders.new"))
    got = await src.get("me", auto_ack=False)
    src.subscription.reject([got.offset], requeue=False)
    await wait_count(parked, 1)
    await wait_count(src, 0)
    dead = await parked.get("me", auto_ack=True)
    assert dead.key == b"parking"
    assert death(dead.headers)["deaths"][0]["routing-keys"] == ["orders.new"]
    assert death(dead.headers)["deaths"][0]["reason"] == "rejected"


async def test_a_message_expiring_back_into_its_own_queue_is_dropped(core, space) -> None:
    clock = core.clock
    loop = await space.declare_queue("loop", arguments={"x-message-ttl": 10, "x-dead-letter-exchange": ""})
    await loop.open()
    await put(space, "loop", message(clock, b"x", key=b"loop"))
    clock.advance(10)
    await wait_count(loop, 0)
    await asyncio.sleep(0.05)
    assert await loop.message_count() == 0


async def test_rejection_breaks_a_cycle_and_counts_grow(core, space) -> None:
    clock = core.clock
    a = await space.declare_queue("a", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "b"})
    b = await space.declare_queue("b", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "a"})
    await put(space, "a", message(clock, b"x", key=b"a"))
    for _ in range(2):
        got = await a.get("me", auto_ack=False)
        a.subscription.reject([got.offset], requeue=False)
        await wait_count(b, 1)
        got = await b.get("me", auto_ack=False)
        b.subscription.reject([got.offset], requeue=False)
        await wait_count(a, 1)
    got = await a.get("me", auto_ack=True)
    doc = death(got.headers)
    assert [(d["queue"], d["count"]) for d in doc["deaths"]] == [("b", 2), ("a", 2)]
    assert doc["first"]["queue"] == "a"


# --- length limits ------------------------------------------------------------------------------------

async def test_max_length_drops_the_oldest_into_the_dead_letter_exchange(core, space) -> None:
    clock = core.clock
    src, dlq = await dead_letter_setup(space, **{"x-max-length": 2})
    await put(space, "src", *(message(clock, b"m%d" % i) for i in range(4)))
    await wait_count(dlq, 2)
    await wait_count(src, 2)
    assert [(await src.get("me", auto_ack=True)).value for _ in range(2)] == [b"m2", b"m3"]
    dead = [await dlq.get("me", auto_ack=True) for _ in range(2)]
    assert [d.value for d in dead] == [b"m0", b"m1"]
    assert {death(d.headers)["deaths"][0]["reason"] for d in dead} == {"maxlen"}


async def test_reject_publish_refuses_and_unacked_messages_do_not_count(core, space) -> None:
    clock = core.clock
    queue = await space.declare_queue("full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    await queue.open()
    first = publish([queue], message(clock, b"1"))
    second = publish([queue], message(clock, b"2"))
    await first[0]
    with pytest.raises(PublishRefused):
        await second[0]
    held = await queue.get("me", auto_ack=False)          # handed out: no longer counted
    await asyncio.gather(*publish([queue], message(clock, b"3")))
    assert held.value == b"1" and await queue.message_count() == 1


async def test_reject_publish_dlx_refuses_and_dead_letters(core, space) -> None:
    clock = core.clock
    src, dlq = await dead_letter_setup(space, **{"x-max-length": 0, "x-overflow": "reject-publish-dlx"})
    with pytest.raises(PublishRefused):
        await publish([src], message(clock, b"refused"))[0]
    await wait_count(dlq, 1)
    dead = await dlq.get("me", auto_ack=True)
    assert dead.value == b"refused" and death(dead.headers)["deaths"][0]["reason"] == "maxlen"
    assert await src.message_count() == 0


async def test_max_length_bytes_counts_ready_bodies(core, space) -> None:
    clock = core.clock
    src, dlq = await dead_letter_setup(space, **{"x-max-length-bytes": 10})
    await put(space, "src", message(clock, b"aaaa"), message(clock, b"bbbb"), message(clock, b"cccc"))
    await wait_count(dlq, 1)
    await wait_count(src, 2)
    assert (await dlq.get("me", auto_ack=True)).value == b"aaaa"
    held = await src.get("me", auto_ack=False)              # handed out: its bytes no longer count
    await put(space, "src", message(clock, b"dddddd"))
    await asyncio.sleep(0.05)
    assert held.value == b"bbbb" and await src.message_count() == 2 and await dlq.message_count() == 0


async def test_reject_publish_by_bytes_refuses_what_would_not_fit(core, space) -> None:
    clock = core.clock
    queue = await space.declare_queue("bytes", arguments={"x-max-length-bytes": 8, "x-overflow": "reject-publish"})
    await queue.open()
    await publish([queue], message(clock, b"12345"))[0]
    with pytest.raises(PublishRefused):
        await publish([queue], message(clock, b"6789"))[0]
    await publish([queue], message(clock, b"678"))[0]
    assert await queue.message_count() == 2
    await queue.get("me", auto_ack=True)
    await publish([queue], message(clock, b"abcd"))[0]     # the first is gone: room again
    assert await queue.message_count() == 2


# --- delivery limits ----------------------------------------------------------------------------------

async def test_quorum_delivery_limit_dead_letters_after_the_limit(core, space) -> None:
    clock = core.clock
    await space.declare_exchange("dlx", ExchangeType.FANOUT)
    dlq = await space.declare_queue("dlq")
    await space.bind(Binding("dlx", "dlq", Q, ""))
    qq = await space.declare_queue("qq", arguments={"x-queue-type": "quorum", "x-delivery-limit": 1,
                                                    "x-dead-letter-exchange": "dlx"})
    await put(space, "qq", message(clock, b"poison"))
    first = await qq.get("me", auto_ack=False)
    assert first.deliveries == 0
    qq.subscription.reject([first.offset], requeue=True)
    second = await qq.get("me", auto_ack=False)
    assert second.deliveries == 1
    qq.subscription.reject([second.offset], requeue=True)
    await wait_count(dlq, 1)
    assert await qq.get("me", auto_ack=False) is None
    assert death((await dlq.get("me", auto_ack=True)).headers)["deaths"][0]["reason"] == "delivery_limit"


# --- at least once ------------------------------------------------------------------------------------

async def test_the_original_stays_until_its_dead_copy_is_stored(core, space, monkeypatch) -> None:
    clock = core.clock
    src, dlq = await dead_letter_setup(space)
    await put(space, "src", message(clock, b"precious"))
    failures = []
    real_publish = dlq.publish

    def failing_once(record):
        if not failures:
            failures.append(record)
            future = asyncio.get_running_loop().create_future()
            future.set_exception(OSError("disk full"))
            return future
        return real_publish(record)

    monkeypatch.setattr(dlq, "publish", failing_once)
    monkeypatch.setattr("core.queues.dead_letter.RETRY_S", 0.05)
    got = await src.get("me", auto_ack=False)
    src.subscription.reject([got.offset], requeue=False)
    await asyncio.sleep(0.01)
    assert failures and not src.subscription.cursor.is_acked(got.offset)
    await wait_count(dlq, 1)
    await eventually(lambda: src.subscription.cursor.is_acked(got.offset))


# --- unused queues ------------------------------------------------------------------------------------

async def test_x_expires_deletes_a_queue_unused_for_that_long(core, space) -> None:
    clock = core.clock
    queue = await space.declare_queue("temp", arguments={"x-expires": 1000})
    clock.advance(600)
    await asyncio.sleep(0.01)
    await queue.get("me", auto_ack=True)             # a basic.get is a use
    clock.advance(600)
    await asyncio.sleep(0.02)
    assert "temp" in space.queues
    clock.advance(400)
    await eventually(lambda: "temp" not in space.queues)
    assert queue.deleted

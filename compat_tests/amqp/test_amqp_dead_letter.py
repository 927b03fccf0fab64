"""TTL, dead-lettering, length limits, quorum delivery limits and queue expiry, seen by pika and
aio-pika against a real `gateway serve` process.

The broker-neutral scenarios also run against a private RabbitMQ node (Debian's rabbitmq-server,
started on a free port for this module) so the fields compared here are RabbitMQ's own; they skip
there when rabbitmq-server is not installed. RabbitMQ 3.10 (Debian 12) differs from RabbitMQ 4,
whose defaults the gateway follows, in two places left out of the comparison: 3.10 writes
x-delivery-count 0 on a quorum queue's first delivery (4.x writes none), and it has no
x-last-death-* headers.
"""

from __future__ import annotations

import datetime
import time

import pika
import pika.exceptions
import pytest

from compat_tests.amqp.clients import connect, unique

WAIT_S = 10.0


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    process = start_gateway(tmp_path_factory.mktemp("amqp-dead-letter"))
    yield process
    process.stop()


@pytest.fixture
def channel(broker):
    """A channel in confirm mode: a publish returns once the broker has the message."""
    conn = connect(broker)
    channel = conn.channel()
    channel.confirm_delivery()
    yield channel
    if conn.is_open:
        conn.close()


def next_message(channel, queue: str, timeout: float = WAIT_S):
    """One delivery of `queue` (acknowledged) as (method, properties, body), or None."""
    for method, properties, body in channel.consume(queue, inactivity_timeout=timeout):
        channel.cancel()
        if method is None:
            return None
        channel.basic_ack(method.delivery_tag)
        return method, properties, body
    return None


def dead_letter_queue(channel) -> tuple[str, str]:
    """A fanout exchange and the queue bound to it."""
    dlx, dlq = unique("dlx"), unique("dlq")
    channel.exchange_declare(dlx, "fanout", auto_delete=False)
    channel.queue_declare(dlq)
    channel.queue_bind(dlq, dlx)
    return dlx, dlq


def assert_death(headers, *, queue: str, reason: str, routing_keys: list[str], exchange: str = "",
                 count: int = 1) -> dict:
    deaths = headers["x-death"]
    entry = deaths[0]
    assert entry["count"] == count
    assert entry["reason"] == reason
    assert entry["queue"] == queue
    assert entry["exchange"] == exchange
    assert entry["routing-keys"] == routing_keys
    assert isinstance(entry["time"], datetime.datetime)
    assert abs(entry["time"].timestamp() - time.time()) < 60
    return entry


# --- TTL ----------------------------------------------------------------------------------------------

def test_queue_ttl_dead_letters_with_x_death(channel) -> None:
    dlx, dlq = dead_letter_queue(channel)
    source = unique("ttl")
    channel.queue_declare(source, arguments={"x-message-ttl": 200, "x-dead-letter-exchange": dlx})
    channel.basic_publish("", source, b"late", pika.BasicProperties(headers={"app": "kept"}))
    method, properties, body = next_message(channel, dlq)
    assert body == b"late"
    assert method.exchange == dlx and method.routing_key == source
    headers = properties.headers
    assert headers["app"] == "kept"
    entry = assert_death(headers, queue=source, reason="expired", routing_keys=[source])
    assert "original-expiration" not in entry
    assert headers["x-first-death-reason"] == "expired"
    assert headers["x-first-death-queue"] == source
    assert headers["x-first-death-exchange"] == ""
    assert channel.queue_declare(source, passive=True).method.message_count == 0


def test_per_message_expiration_is_recorded_and_removed(channel) -> None:
    dlx, dlq = dead_letter_queue(channel)
    source = unique("exp")
    channel.queue_declare(source, arguments={"x-dead-letter-exchange": dlx})
    channel.basic_publish("", source, b"short-lived", pika.BasicProperties(expiration="100"))
    method, properties, body = next_message(channel, dlq)
    assert body == b"short-lived"
    entry = assert_death(properties.headers, queue=source, reason="expired", routing_keys=[source])
    assert entry["original-expiration"] == "100"
    assert properties.expiration is None


def test_expired_messages_are_never_delivered_and_stop_being_counted(channel) -> None:
    source = unique("gone")
    channel.queue_declare(source, arguments={"x-message-ttl": 100})
    for _ in range(3):
        channel.basic_publish("", source, b"x")
    time.sleep(1.5)
    assert channel.queue_declare(source, passive=True).method.message_count == 0
    assert channel.basic_get(source, auto_ack=True) == (None, None, None)


def test_expired_heads_go_without_a_consumer_or_a_queue_ttl(channel) -> None:
    queue = unique("own-ttl")
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"brief", pika.BasicProperties(expiration="100"))
    time.sleep(1.5)
    assert channel.queue_declare(queue, passive=True).method.message_count == 0


def test_an_invalid_expiration_closes_the_channel(broker) -> None:
    conn = connect(broker)
    channel = conn.channel()
    queue = unique("bad-exp")
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"x", pika.BasicProperties(expiration="-5"))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(queue, passive=True)
    assert closed.value.reply_code == 406
    assert "invalid expiration '-5': {value_negative,-5}" in closed.value.reply_text
    conn.close()


# --- rejection ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("settle", ["reject", "nack"])
def test_rejected_messages_are_dead_lettered_with_the_routing_key(channel, settle) -> None:
    dlx = unique("dlx-direct")
    parked = unique("parked")
    channel.exchange_declare(dlx, "direct")
    channel.queue_declare(parked)
    channel.queue_bind(parked, dlx, routing_key="parking")
    source = unique("work")
    channel.queue_declare(source, arguments={"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "parking"})
    channel.basic_publish("", source, b"bad input")
    method, _, _ = channel.basic_get(source)
    if settle == "reject":
        channel.basic_reject(method.delivery_tag, requeue=False)
    else:
        channel.basic_nack(method.delivery_tag, requeue=False)
    method, properties, body = next_message(channel, parked)
    assert body == b"bad input"
    assert method.exchange == dlx and method.routing_key == "parking"
    assert_death(properties.headers, queue=source, reason="rejected", routing_keys=[source])


def test_a_reject_cycle_counts_each_death(channel) -> None:
    a, b = unique("cycle-a"), unique("cycle-b")
    channel.queue_declare(a, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b})
    channel.queue_declare(b, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": a})
    channel.basic_publish("", a, b"ping-pong")
    for _ in range(2):
        for queue in (a, b):
            method = None
            deadline = time.monotonic() + WAIT_S
            while method is None and time.monotonic() < deadline:
                method, _, _ = channel.basic_get(queue)
            channel.basic_reject(method.delivery_tag, requeue=False)
    _, properties, _ = next_message(channel, a)
    deaths = properties.headers["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [(b, "rejected", 2), (a, "rejected", 2)]
    assert properties.headers["x-first-death-queue"] == a


# --- length limits ------------------------------------------------------------------------------------

def test_max_length_drops_the_oldest_into_the_dead_letter_exchange(channel) -> None:
    dlx, dlq = dead_letter_queue(channel)
    source = unique("short")
    channel.queue_declare(source, arguments={"x-max-length": 2, "x-dead-letter-exchange": dlx})
    for i in range(4):
        channel.basic_publish("", source, b"m%d" % i)
    dead = [next_message(channel, dlq) for _ in range(2)]
    assert [body for _, _, body in dead] == [b"m0", b"m1"]
    for _, properties, _ in dead:
        assert_death(properties.headers, queue=source, reason="maxlen", routing_keys=[source])
    assert channel.queue_declare(source, passive=True).method.message_count == 2
    assert [channel.basic_get(source, auto_ack=True)[2] for _ in range(2)] == [b"m2", b"m3"]


def test_max_length_bytes_drops_by_body_size(channel) -> None:
    dlx, dlq = dead_letter_queue(channel)
    source = unique("bytes")
    channel.queue_declare(source, arguments={"x-max-length-bytes": 10, "x-dead-letter-exchange": dlx})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        channel.basic_publish("", source, body)
    _, properties, body = next_message(channel, dlq)
    assert body == b"aaaa"
    assert_death(properties.headers, queue=source, reason="maxlen", routing_keys=[source])
    assert channel.queue_declare(source, passive=True).method.message_count == 2


def test_reject_publish_nacks_under_confirms(channel) -> None:
    source = unique("bounded")
    channel.queue_declare(source, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    channel.basic_publish("", source, b"fits")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", source, b"refused")
    assert channel.queue_declare(source, passive=True).method.message_count == 1


# --- quorum queues ------------------------------------------------------------------------------------

def test_quorum_delivery_limit_and_delivery_count(channel) -> None:
    dlx, dlq = dead_letter_queue(channel)
    source = unique("quorum")
    channel.queue_declare(source, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 1,
                                                           "x-dead-letter-exchange": dlx})
    channel.basic_publish("", source, b"poison")
    counts = []
    for method, properties, _ in channel.consume(source, inactivity_timeout=2.0):
        if method is None:
            break
        counts.append(((properties.headers or {}).get("x-delivery-count", 0), method.redelivered))
        channel.basic_reject(method.delivery_tag, requeue=True)
    channel.cancel()
    assert counts == [(0, False), (1, True)]
    _, properties, body = next_message(channel, dlq)
    assert body == b"poison"
    assert_death(properties.headers, queue=source, reason="delivery_limit", routing_keys=[source])


def test_quorum_queues_must_be_durable(broker) -> None:
    conn = connect(broker)
    channel = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(unique("qq"), durable=False, arguments={"x-queue-type": "quorum"})
    assert closed.value.reply_code == 406 and "invalid property 'non-durable'" in closed.value.reply_text
    conn.close()


# --- arguments and unused queues ----------------------------------------------------------------------

def test_bad_and_inequivalent_arguments_get_rabbitmqs_texts(broker) -> None:
    conn = connect(broker)
    name = unique("args")
    channel = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(name, arguments={"x-message-ttl": -1})
    assert closed.value.reply_text == (f"PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue '{name}' in "
                                       "vhost '/': {value_negative,-1}")
    channel = conn.channel()
    channel.queue_declare(name, arguments={"x-message-ttl": 1000})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(name, arguments={"x-message-ttl": 2000})
    assert closed.value.reply_text == (f"PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue '{name}' "
                                       "in vhost '/': received '2000' but current is '1000'")
    conn.close()


def test_x_expires_deletes_an_unused_queue(channel) -> None:
    name = unique("expiring")
    channel.queue_declare(name, arguments={"x-expires": 500})
    time.sleep(0.3)
    channel.queue_declare(name, arguments={"x-expires": 500})      # a redeclare is a use
    time.sleep(0.3)
    channel.queue_declare(name, passive=True)                       # so is a passive one
    time.sleep(1.5)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(name, passive=True)
    assert closed.value.reply_code == 404


# --- the gateway only ---------------------------------------------------------------------------------

def test_dead_lettered_messages_survive_a_restart(gateway_launcher, tmp_path) -> None:
    data = tmp_path / "dead-letter-data"
    first = gateway_launcher.start(data_dir=data)
    conn = connect(first.amqp)
    channel = conn.channel()
    channel.exchange_declare("dlx", "fanout", durable=True)
    channel.queue_declare("dlq", durable=True)
    channel.queue_bind("dlq", "dlx")
    channel.queue_declare("jobs", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    channel.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    for i in range(3):
        channel.basic_publish("", "jobs", b"job%d" % i, persistent)
    for _ in range(3):
        method, _, _ = channel.basic_get("jobs")
        channel.basic_nack(method.delivery_tag, requeue=False)
    deadline = time.monotonic() + WAIT_S
    while channel.queue_declare("dlq", durable=True, passive=True).method.message_count < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    conn.close()
    first.stop()

    second = gateway_launcher.start(data_dir=data)
    conn = connect(second.amqp)
    channel = conn.channel()
    assert channel.queue_declare("jobs", durable=True, passive=True).method.message_count == 0
    got = [next_message(channel, "dlq") for _ in range(3)]
    assert [body for _, _, body in got] == [b"job0", b"job1", b"job2"]
    assert {properties.headers["x-death"][0]["reason"] for _, properties, _ in got} == {"rejected"}
    conn.close()


async def test_aio_pika_sees_ttl_and_dead_letters(gateway) -> None:
    import aio_pika
    host, port = gateway.amqp
    connection = await aio_pika.connect(f"amqp://guest:guest@{host}:{port}/")
    async with connection:
        channel = await connection.channel()
        dlx = await channel.declare_exchange(unique("aio-dlx"), aio_pika.ExchangeType.FANOUT)
        dlq = await channel.declare_queue(unique("aio-dlq"))
        await dlq.bind(dlx)
        work = await channel.declare_queue(unique("aio-work"), arguments={"x-dead-letter-exchange": dlx.name,
                                                                         "x-message-ttl": 60_000})
        await channel.default_exchange.publish(aio_pika.Message(b"refused"), routing_key=work.name)
        await channel.default_exchange.publish(aio_pika.Message(b"expires", expiration=0.1), routing_key=work.name)
        incoming = await work.get(timeout=5)
        await incoming.nack(requeue=False)
        got = []
        async with dlq.iterator(timeout=WAIT_S) as messages:
            async for message in messages:
                async with message.process():
                    got.append((message.body, message.headers["x-death"][0]["reason"],
                                message.headers["x-death"][0].get("original-expiration")))
                if len(got) == 2:
                    break
        assert sorted(got) == [(b"expires", "expired", "100"), (b"refused", "rejected", None)]

"""The delivery acknowledgement timeout with pika against a real `gateway serve`: a consumer that
keeps a delivery unacknowledged past the queue's x-consumer-timeout (or a basic.get past the
broker's --amqp-consumer-timeout-ms) gets its channel closed with RabbitMQ's 406 and text, and the
message goes to another consumer marked redelivered; on a key-shared queue it comes again before
the later messages of its group. The check runs about once a second, so a 1000 ms timeout is
noticed within about three."""

from __future__ import annotations

import time
import uuid

import pika
import pytest

CLOSED_WITHIN_S = 15.0
BROKER_TIMEOUT_MS = 2000


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    process = start_gateway(tmp_path_factory.mktemp("ack-timeout"),
                            "--amqp-consumer-timeout-ms", str(BROKER_TIMEOUT_MS))
    yield process
    process.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def connect(address) -> pika.BlockingConnection:
    host, port = address
    return pika.BlockingConnection(pika.ConnectionParameters(
        host, port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1))


def timed_out_text(channel: int, timeout_ms: int) -> str:
    return (f"PRECONDITION_FAILED - delivery acknowledgement on channel {channel} timed out. Timeout value used: "
            f"{timeout_ms} ms. This timeout value can be configured, see consumers doc guide to learn more")


def hold_until_closed(channel, queue: str) -> tuple[list[bytes], int, str]:
    """Consume from `queue` acknowledging nothing until the broker closes the channel: what was
    delivered, and the close's reply code and text."""
    held: list[bytes] = []
    deadline = time.monotonic() + CLOSED_WITHIN_S
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        for method, _, body in channel.consume(queue, inactivity_timeout=0.2):
            if method is not None:
                held.append(body)
            assert time.monotonic() < deadline, f"still open after {CLOSED_WITHIN_S} s holding {held}"
    return held, closed.value.reply_code, closed.value.reply_text


def publish(channel, queue: str, bodies: list[bytes], group: str | None = None) -> None:
    properties = pika.BasicProperties(headers={"x-group-id": group}) if group is not None else None
    for body in bodies:
        channel.basic_publish("", queue, body, properties)


def take(channel, queue: str, count: int) -> list[tuple[bytes, bool]]:
    """`count` deliveries (body, redelivered) to a consumer that acknowledges each."""
    got: list[tuple[bytes, bool]] = []
    for method, _, body in channel.consume(queue, inactivity_timeout=CLOSED_WITHIN_S):
        assert method is not None, f"only {got} of {count} arrived"
        got.append((body, method.redelivered))
        channel.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    channel.cancel()
    return got


def test_a_consumer_that_never_acks_loses_its_channel_and_the_message_goes_to_another(gateway) -> None:
    queue = unique("ack-timeout")
    holder, other = connect(gateway.amqp), connect(gateway.amqp)
    try:
        channel = holder.channel()
        channel.queue_declare(queue, arguments={"x-consumer-timeout": 1000})
        channel.confirm_delivery()
        publish(channel, queue, [b"slow"])
        held, code, text = hold_until_closed(channel, queue)
        assert held == [b"slow"]
        assert (code, text) == (406, timed_out_text(channel.channel_number, 1000))
        assert holder.is_open     # the channel only, as RabbitMQ
        assert take(other.channel(), queue, 1) == [(b"slow", True)]
    finally:
        holder.close()
        other.close()


def test_a_timed_out_message_comes_again_before_the_rest_of_its_group(gateway) -> None:
    queue = unique("ack-timeout-groups")
    holder, other = connect(gateway.amqp), connect(gateway.amqp)
    try:
        channel = holder.channel()
        channel.queue_declare(queue, arguments={"x-subscription-type": "key-shared", "x-consumer-timeout": 1000})
        channel.basic_qos(prefetch_count=1)
        held: list[bytes] = []
        channel.basic_consume(queue, lambda ch, method, props, body: held.append(body))
        reader = other.channel()
        read: list[tuple[bytes, bool]] = []

        def read_one(ch, method, props, body) -> None:
            read.append((body, method.redelivered))
            ch.basic_ack(method.delivery_tag)

        reader.basic_consume(queue, read_one)
        publisher = holder.channel()
        publisher.confirm_delivery()
        for group in "gh":
            publish(publisher, queue, [b"%s%d" % (group.encode(), i) for i in range(3)], group=group)
        deadline = time.monotonic() + CLOSED_WITHIN_S
        while not (channel.is_closed and len(read) == 6):
            assert time.monotonic() < deadline, (held, read, channel.is_closed)
            holder.process_data_events(time_limit=0.1)
            other.process_data_events(time_limit=0.1)
        # The holder's one message went back and the other consumer got it before the rest of its
        # group (which waited meanwhile), while the other group flowed.
        assert len(held) == 1, held
        group = held[0][:1]
        assert [entry for entry in read if entry[0][:1] == group] == \
            [(group + b"0", True), (group + b"1", False), (group + b"2", False)]
        assert sorted(body for body, _ in read) == [b"g0", b"g1", b"g2", b"h0", b"h1", b"h2"]
    finally:
        holder.close()
        other.close()


def test_a_basic_get_held_past_the_brokers_default_closes_the_channel(gateway) -> None:
    queue = unique("ack-timeout-get")
    holder, other = connect(gateway.amqp), connect(gateway.amqp)
    try:
        channel = holder.channel()
        channel.queue_declare(queue)
        channel.confirm_delivery()
        publish(channel, queue, [b"got"])
        method, _, body = channel.basic_get(queue)
        assert body == b"got" and not method.redelivered
        held, code, text = hold_until_closed(channel, queue)     # the queue has nothing more
        assert held == []
        assert (code, text) == (406, timed_out_text(channel.channel_number, BROKER_TIMEOUT_MS))
        method, _, body = other.channel().basic_get(queue, auto_ack=True)
        assert (body, method.redelivered) == (b"got", True)
    finally:
        holder.close()
        other.close()


def test_a_consumer_that_acks_in_time_keeps_its_channel(gateway) -> None:
    queue = unique("ack-in-time")
    connection = connect(gateway.amqp)
    try:
        channel = connection.channel()
        channel.queue_declare(queue, arguments={"x-consumer-timeout": 1000})
        channel.confirm_delivery()
        for round_ in range(4):             # 4 × ~0.5 s: longer than the timeout, each delivery shorter
            publish(channel, queue, [b"%d" % round_])
            method, _, body = channel.basic_get(queue)
            assert body == b"%d" % round_
            connection.sleep(0.5)               # a tick falls in some of these holds
            channel.basic_ack(method.delivery_tag)
        channel.basic_qos(prefetch_count=0)
        assert channel.is_open
    finally:
        connection.close()

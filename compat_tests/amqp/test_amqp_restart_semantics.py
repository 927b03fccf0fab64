"""pika against a real `gateway serve` process that is restarted (SIGTERM, and SIGKILL as a crash):
the transient messages of a durable queue are gone, the persistent confirmed ones are kept, and
what was delivered but not acknowledged comes back marked redelivered, as with RabbitMQ, even when
the crash comes right after the delivery. After a crash, messages waiting next in line may come
marked redelivered too (docs/AMQP.md: the delivery reservation); after a clean stop they never do.
A quorum queue's delivery counts go on across a restart."""

from __future__ import annotations

import signal
import uuid

import pika
import pytest

from compat_tests.amqp.clients import connect


def received(channel, queue: str, count: int, timeout: float = 5.0) -> list[tuple[bytes, bool]]:
    got = []
    for method, _, body in channel.consume(queue, inactivity_timeout=timeout):
        if method is None:
            break
        got.append((body, method.redelivered))
        channel.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    channel.cancel()
    return got


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_restart_keeps_persistent_drops_transient_and_marks_unacked_redelivered(gateway_launcher, stop) -> None:
    mixed, pending = f"mixed-{uuid.uuid4().hex[:6]}", f"pending-{uuid.uuid4().hex[:6]}"
    gateway = gateway_launcher.start()
    connection = connect(gateway.amqp)
    channel = connection.channel()
    channel.queue_declare(mixed, durable=True)
    channel.queue_declare(pending, durable=True)
    channel.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    for index in range(5):
        channel.basic_publish("", mixed, b"persistent-%d" % index, persistent)
        channel.basic_publish("", mixed, b"transient-%d" % index, pika.BasicProperties(delivery_mode=1))
        channel.basic_publish("", pending, b"pending-%d" % index, persistent)
    assert channel.queue_declare(mixed, passive=True).method.message_count == 10

    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=3)
    handed_out = []
    for method, _, body in consumer.consume(pending, inactivity_timeout=5):   # never acknowledged
        handed_out.append(body)
        if len(handed_out) == 3:
            break
    assert handed_out == [b"pending-0", b"pending-1", b"pending-2"]

    if stop == "SIGKILL":
        gateway.kill()
    else:
        assert gateway.stop(signal.SIGTERM) == 0
    try:
        connection.close()
    except Exception:
        pass

    restarted = gateway_launcher.start()
    connection = connect(restarted.amqp)
    try:
        channel = connection.channel()
        assert channel.queue_declare(mixed, durable=True).method.message_count == 5
        assert received(channel, mixed, 10, timeout=2) == [(b"persistent-%d" % i, False) for i in range(5)]
        again = received(channel, pending, 5)
        assert [body for body, _ in again] == [b"pending-%d" % i for i in range(5)]
        assert all(flag for _, flag in again[:3]), again
        if stop == "SIGTERM":
            assert not any(flag for _, flag in again[3:]), again
    finally:
        connection.close()


def test_a_quorum_queue_keeps_its_delivery_counts_across_a_restart(gateway_launcher) -> None:
    """A poison message rejected before and after a restart is dead-lettered once over the queue's
    x-delivery-limit: the count is not started again by the restart (RabbitMQ keeps it in its log)."""
    queue, dead = f"poison-{uuid.uuid4().hex[:6]}", f"dead-{uuid.uuid4().hex[:6]}"
    arguments = {"x-queue-type": "quorum", "x-delivery-limit": 3,
                 "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}

    def get_and_reject(channel) -> int | None:
        method, properties, body = channel.basic_get(queue)
        assert body == b"poison"
        channel.basic_reject(method.delivery_tag, requeue=True)
        return (properties.headers or {}).get("x-delivery-count")

    gateway = gateway_launcher.start()
    connection = connect(gateway.amqp)
    channel = connection.channel()
    channel.queue_declare(dead, durable=True)
    channel.queue_declare(queue, durable=True, arguments=arguments)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"poison", pika.BasicProperties(delivery_mode=2))
    assert [get_and_reject(channel) for _ in range(3)] == [None, 1, 2]
    connection.close()
    assert gateway.stop(signal.SIGTERM) == 0

    connection = connect(gateway_launcher.start().amqp)
    try:
        channel = connection.channel()
        assert get_and_reject(channel) == 3           # the fourth return: over the limit
        assert channel.queue_declare(queue, durable=True, arguments=arguments).method.message_count == 0
        method, properties, body = next(channel.consume(dead, auto_ack=True, inactivity_timeout=5))
        assert body == b"poison" and properties.headers["x-death"][0]["reason"] == "delivery_limit"
    finally:
        connection.close()


def test_a_parked_message_group_stays_parked_across_a_restart(gateway_launcher) -> None:
    """A key-shared queue's group parked by its poison message stays parked after a restart: the
    group's next message must not go out before an operator releases it, while other groups flow
    (had the park been forgotten, the group's next message, published first, would come first)."""
    queue = f"groups-{uuid.uuid4().hex[:6]}"
    arguments = {"x-subscription-type": "key-shared", "x-delivery-limit": 0}

    def publish(channel, body: bytes, group: str) -> None:
        channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2, headers={"x-group-id": group}))

    gateway = gateway_launcher.start()
    connection = connect(gateway.amqp)
    channel = connection.channel()
    channel.queue_declare(queue, durable=True, arguments=arguments)
    channel.confirm_delivery()
    publish(channel, b"poison", "order-9")
    publish(channel, b"next", "order-9")
    method, _, body = channel.basic_get(queue)
    assert body == b"poison"
    channel.basic_nack(method.delivery_tag, requeue=True)     # over the limit: dead, order-9 parks
    connection.close()
    assert gateway.stop(signal.SIGTERM) == 0

    connection = connect(gateway_launcher.start().amqp)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        publish(channel, b"other", "order-10")
        assert received(channel, queue, 1) == [(b"other", False)]
    finally:
        connection.close()

"""pika against a real `gateway serve` process: a queue declared with x-requeue-delay (ms) takes a
message nacked or rejected with requeue=true back at its tail only once the delay passed (held by
the same mechanism as delayed exchanges, so it survives a restart); without the argument a requeue
is immediate; a bad value is refused as RabbitMQ refuses bad integer arguments."""

from __future__ import annotations

import time
import uuid

import pika
import pika.exceptions
import pytest
from kafka import KafkaConsumer, TopicPartition


def params(address) -> pika.ConnectionParameters:
    host, port = address
    return pika.ConnectionParameters(host, port, credentials=pika.PlainCredentials("guest", "guest"),
                                     connection_attempts=1)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def next_delivery(channel, queue: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, properties, body = channel.basic_get(queue)
        if method is not None:
            return method, properties, body, time.monotonic()
        time.sleep(0.02)
    return None


@pytest.mark.parametrize("settle", ["nack", "reject"])
def test_a_requeued_message_comes_back_after_the_delay_behind_the_others(gateway_process, settle) -> None:
    connection = pika.BlockingConnection(params(gateway_process.amqp))
    channel = connection.channel()
    queue = unique("retry")
    channel.queue_declare(queue, durable=True, arguments={"x-requeue-delay": 1500})
    for body in (b"a", b"b"):
        channel.basic_publish("", queue, body, pika.BasicProperties(headers={"h": "v"}, message_id=body.decode()))
    method, _, body, _ = next_delivery(channel, queue)
    assert body == b"a"
    settled_at = time.monotonic()
    if settle == "nack":
        channel.basic_nack(method.delivery_tag, requeue=True)
    else:
        channel.basic_reject(method.delivery_tag, requeue=True)
    method, _, body, _ = next_delivery(channel, queue)
    assert body == b"b"                                # "a" is not back at the head
    channel.basic_ack(method.delivery_tag)
    assert channel.basic_get(queue)[0] is None         # nor anywhere yet
    method, properties, body, arrived = next_delivery(channel, queue)
    assert body == b"a" and arrived - settled_at >= 1.4
    assert properties.headers == {"h": "v"} and properties.message_id == "a"
    channel.basic_ack(method.delivery_tag)
    connection.close()


def test_a_held_requeue_survives_a_restart(gateway_launcher) -> None:
    gateway = gateway_launcher.start()
    connection = pika.BlockingConnection(params(gateway.amqp))
    channel = connection.channel()
    queue = unique("retry")
    channel.queue_declare(queue, durable=True, arguments={"x-requeue-delay": 3000})
    channel.basic_publish("", queue, b"again", pika.BasicProperties(delivery_mode=2))
    method, _, _, _ = next_delivery(channel, queue)
    channel.basic_nack(method.delivery_tag, requeue=True)
    held = TopicPartition("__delayed_messages", 0)   # durably held before the restart: stored there
    reader = KafkaConsumer(bootstrap_servers="%s:%d" % gateway.kafka)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not reader.end_offsets([held]).get(held):
        time.sleep(0.05)
    reader.close()
    connection.close()
    gateway.stop()
    gateway = gateway_launcher.start(data_dir=gateway.data_dir)
    connection = pika.BlockingConnection(params(gateway.amqp))
    channel = connection.channel()
    found = next_delivery(channel, queue, timeout=20)
    assert found is not None and found[2] == b"again"
    channel.basic_ack(found[0].delivery_tag)
    time.sleep(0.5)
    assert channel.basic_get(queue)[0] is None          # once
    connection.close()


def test_without_the_argument_a_requeue_is_immediate_and_bad_values_are_refused(gateway_process) -> None:
    connection = pika.BlockingConnection(params(gateway_process.amqp))
    channel = connection.channel()
    queue = unique("plain")
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"x")
    method, _, _, _ = next_delivery(channel, queue)
    channel.basic_nack(method.delivery_tag, requeue=True)
    again = next_delivery(channel, queue, timeout=2)
    assert again is not None and again[0].redelivered
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_declare(unique("bad"), arguments={"x-requeue-delay": -1})
    assert refused.value.reply_code == 406
    connection.close()

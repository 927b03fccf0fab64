"""An AMQP ack never deletes what Kafka may still read (docs/AMQP.md "Retention across protocols").

Real clients on both sides (kafka-python and pika) against a real `gateway serve`, restarted in
between: a queue over a Kafka topic moves only its own position, so a Kafka consumer from the
beginning and a new group (auto.offset.reset=earliest) still see every record; on a topic the
queue created (retention.consumed=true), what the queue acknowledged goes only once every
subscription, the Kafka group included, is past it.
"""

from __future__ import annotations

import time

import pika
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from compat_tests.amqp.clients import unique

TIMEOUT_S = 30.0


def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


def amqp_connection(gateway) -> pika.BlockingConnection:
    host, port = gateway.amqp
    return pika.BlockingConnection(pika.ConnectionParameters(host, port, connection_attempts=1))


def produce(gateway, topic: str, *values: bytes) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap(gateway))
    for value in values:
        producer.send(topic, value=value).get(TIMEOUT_S)
    producer.close()


def read_all(gateway, topic: str, *, group: str | None = None, count: int) -> list[bytes]:
    """What a consumer reads: without a group from the log start, with one from its committed
    offset or else the earliest; stops after `count` records or when nothing more comes."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway), group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    partition = TopicPartition(topic, 0)
    if group is None:
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
    else:
        consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(values) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values += [record.value for record in records]
    consumer.close()
    return values


def log_start(gateway, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway))
    partition = TopicPartition(topic, 0)
    try:
        return consumer.beginning_offsets([partition])[partition]
    finally:
        consumer.close()


def get_and_ack(gateway, queue: str, count: int) -> list[bytes]:
    conn = amqp_connection(gateway)
    channel = conn.channel()
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        method, _, body = channel.basic_get(queue)
        if method is None:
            conn.sleep(0.05)
            continue
        channel.basic_ack(method.delivery_tag)
        got.append(body)
    conn.close()
    return got


def test_acks_of_a_queue_over_a_kafka_topic_delete_nothing_even_across_a_restart(gateway_launcher) -> None:
    gateway = gateway_launcher.start()
    topic = unique("orders")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(gateway))
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    admin.close()
    produce(gateway, topic, b"A")
    conn = amqp_connection(gateway)
    conn.channel().queue_declare(topic, durable=True)     # starts at the topic's end: after A
    conn.close()
    produce(gateway, topic, b"B", b"C", b"D")
    assert get_and_ack(gateway, topic, 3) == [b"B", b"C", b"D"]
    assert log_start(gateway, topic) == 0
    gateway.stop()

    gateway = gateway_launcher.start()
    assert log_start(gateway, topic) == 0
    assert read_all(gateway, topic, count=4) == [b"A", b"B", b"C", b"D"]
    assert read_all(gateway, topic, group=unique("fresh"), count=4) == [b"A", b"B", b"C", b"D"]
    conn = amqp_connection(gateway)
    assert conn.channel().queue_declare(topic, passive=True).method.message_count == 0   # its acks were kept
    conn.close()


def test_a_queue_topic_drops_only_what_every_subscription_consumed(gateway_launcher) -> None:
    gateway = gateway_launcher.start()
    queue, group = unique("jobs"), unique("auditors")
    conn = amqp_connection(gateway)
    channel = conn.channel()
    channel.queue_declare(queue, durable=True)             # creates the topic: retention.consumed=true
    channel.confirm_delivery()
    for value in (b"A", b"B", b"C", b"D"):
        channel.basic_publish("", queue, value, pika.BasicProperties(delivery_mode=2))
    conn.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway), group_id=group, enable_auto_commit=False)
    partition = TopicPartition(queue, 0)
    consumer.assign([partition])
    consumer.commit({partition: OffsetAndMetadata(2, "", -1)})     # the group is past A and B only
    consumer.close()
    assert get_and_ack(gateway, queue, 4) == [b"A", b"B", b"C", b"D"]

    deadline = time.monotonic() + TIMEOUT_S      # the queue asks the core at most every 10 s
    while log_start(gateway, queue) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert log_start(gateway, queue) == 2        # A and B: consumed by both; C and D: not by the group
    gateway.stop()

    gateway = gateway_launcher.start()
    assert log_start(gateway, queue) == 2
    assert read_all(gateway, queue, group=group, count=2) == [b"C", b"D"]
    assert read_all(gateway, queue, group=unique("fresh"), count=2) == [b"C", b"D"]

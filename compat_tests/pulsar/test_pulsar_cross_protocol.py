"""One topic, Kafka and Pulsar clients on either side: a Kafka record is a Pulsar message (key ->
partition key, headers -> properties, timestamp -> publish time) and a Pulsar message a Kafka record;
each protocol's subscription keeps its own position."""

from __future__ import annotations

import pulsar
from confluent_kafka import Consumer, Producer

from compat_tests.pulsar.clients import client, receive_all, unique

TIMEOUT_S = 20.0
STAMP_MS = 1_700_000_123_456




def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


def test_a_kafka_producers_records_reach_a_pulsar_consumer(gateway):
    topic = unique("from-kafka")
    producer = Producer({"bootstrap.servers": bootstrap(gateway), "enable.idempotence": True})
    for i in range(5):
        producer.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), headers=[("h", f"x{i}".encode())],
                         timestamp=STAMP_MS + i)
    assert producer.flush(TIMEOUT_S) == 0
    pc = client(gateway)
    try:
        consumer = pc.subscribe(f"persistent://public/default/{topic}", "from-kafka",
                                initial_position=pulsar.InitialPosition.Earliest)
        got = receive_all(consumer, 5)
    finally:
        pc.close()
    assert [(m.data(), m.partition_key(), m.properties(), m.publish_timestamp()) for m in got] == [
        (f"v{i}".encode(), f"k{i}", {"h": f"x{i}"}, STAMP_MS + i) for i in range(5)]


def test_a_pulsar_producers_messages_reach_a_kafka_consumer_and_both_keep_their_positions(gateway):
    topic = unique("from-pulsar")
    pc = client(gateway)
    try:
        pulsar_consumer = pc.subscribe(topic, "mine", initial_position=pulsar.InitialPosition.Earliest)
        producer = pc.create_producer(topic, batching_enabled=True, compression_type=pulsar.CompressionType.LZ4)
        for i in range(5):
            producer.send_async(f"v{i}".encode(), None, partition_key=f"k{i}", properties={"p": str(i)})
        producer.flush()
        assert [m.data() for m in receive_all(pulsar_consumer, 5)] == [f"v{i}".encode() for i in range(5)]
    finally:
        pc.close()
    consumer = Consumer({"bootstrap.servers": bootstrap(gateway), "group.id": unique("g"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    records = []
    try:
        while len(records) < 5:
            record = consumer.poll(TIMEOUT_S)
            assert record is not None, "no record within the timeout"
            assert record.error() is None, record.error()
            records.append(record)
    finally:
        consumer.close()
    assert [(r.value(), r.key()) for r in records] == [(f"v{i}".encode(), f"k{i}".encode()) for i in range(5)]
    assert all(dict(r.headers())["p"] == str(i).encode() for i, r in enumerate(records))

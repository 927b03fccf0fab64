"""One topic, two protocols, real clients on both sides against a real `gateway serve`.

Kafka producers (kafka-python, confluent-kafka) write into the topic of an AMQP queue and pika
consumes the records as messages; pika publishes and Kafka consumers (aiokafka, confluent-kafka)
read the records, their AMQP properties checked with pamqp (an AMQP codec independent of the
gateway's). A Kafka consumer group and an AMQP queue on one topic each see every record.
"""

from __future__ import annotations

import asyncio
import struct
import time

import pamqp.commands
import pika
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafka import KafkaProducer

from compat_tests.amqp.clients import unique

TIMEOUT_S = 20.0
STAMP_MS = 1_700_000_123_456


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    process = start_gateway(tmp_path_factory.mktemp("cross-protocol"))
    yield process
    process.stop()


@pytest.fixture
def amqp(gateway):
    host, port = gateway.amqp
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port, credentials=pika.PlainCredentials(
        "guest", "guest"), connection_attempts=1))
    yield conn
    conn.close()


def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


def consume(channel, queue: str, count: int) -> list:
    """`count` deliveries of `queue` as (method, properties, body), acknowledged."""
    got = []
    for method, properties, body in channel.consume(queue, inactivity_timeout=TIMEOUT_S):
        if method is None:
            break
        channel.basic_ack(method.delivery_tag)
        got.append((method, properties, body))
        if len(got) == count:
            break
    channel.cancel()
    return got


# --- Kafka -> AMQP --------------------------------------------------------------------------------

RECORDS = [   # key, value, headers
    (b"order.created", b'{"id": 1}', [("tenant", b"acme"), ("raw", b"\xff\x00\x01")]),
    (None, b"no key", []),
    (b"order.paid", b"", [("tenant", b"acme"), ("tenant", b"globex")]),
]


def produce_kafka_python(gateway, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap(gateway), linger_ms=5)
    futures = [producer.send(topic, key=key, value=value, headers=headers, timestamp_ms=STAMP_MS + i)
               for i, (key, value, headers) in enumerate(RECORDS)]
    producer.flush(TIMEOUT_S)
    for future in futures:
        future.get(TIMEOUT_S)
    producer.close()


def produce_confluent(gateway, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap(gateway), "linger.ms": 5})
    failures = []
    for i, (key, value, headers) in enumerate(RECORDS):
        producer.produce(topic, value, key, headers=headers, timestamp=STAMP_MS + i,
                         on_delivery=lambda err, _msg: err and failures.append(err))
    assert producer.flush(TIMEOUT_S) == 0 and not failures


@pytest.mark.parametrize("produce", [produce_kafka_python, produce_confluent], ids=["kafka-python", "confluent-kafka"])
def test_kafka_records_are_delivered_by_an_amqp_queue_over_their_topic(gateway, amqp, produce) -> None:
    channel = amqp.channel()
    queue = unique("from-kafka")
    channel.queue_declare(queue, durable=True)       # a legal topic name: the queue uses that topic
    produce(gateway, queue)
    got = consume(channel, queue, len(RECORDS))
    assert [(m.exchange, m.routing_key, body) for m, _, body in got] == [
        ("", "order.created", b'{"id": 1}'), ("", "", b"no key"), ("", "order.paid", b"")]
    first, second, third = (properties for _, properties, _ in got)
    assert first.headers == {"tenant": "acme", "raw": b"\xff\x00\x01"}    # UTF-8 values as text, others as bytes
    assert second.headers is None
    assert third.headers == {"tenant": "globex"}                          # a repeated name: the last value
    assert [p.timestamp for p in (first, second, third)] == [STAMP_MS // 1000] * 3
    assert all(p.content_type is None and p.delivery_mode is None for p in (first, second, third))


def test_an_amqp_queue_delivers_committed_kafka_transactions_only(gateway, amqp) -> None:
    channel = amqp.channel()
    queue = unique("from-kafka-txn")
    channel.queue_declare(queue, durable=True)
    producer = Producer({"bootstrap.servers": bootstrap(gateway), "transactional.id": unique("txn")})
    producer.init_transactions(TIMEOUT_S)
    for value, commit in ((b"aborted-1", False), (b"committed-1", True), (b"aborted-2", False), (b"committed-2", True)):
        producer.begin_transaction()
        producer.produce(queue, value)
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(queue, b"still-open")       # never committed while the queue is read
    producer.flush(TIMEOUT_S)

    got = consume(channel, queue, 2)
    assert [body for _, _, body in got] == [b"committed-1", b"committed-2"]
    time.sleep(1)
    assert channel.basic_get(queue, auto_ack=True) == (None, None, None)   # not the open transaction's
    producer.abort_transaction(TIMEOUT_S)


# --- AMQP -> Kafka --------------------------------------------------------------------------------


def amqp_properties(raw: bytes) -> pamqp.commands.Basic.Properties:
    properties = pamqp.commands.Basic.Properties()
    properties.unmarshal(struct.unpack(">H", raw[:2])[0], raw[2:])
    return properties


def read_aiokafka(gateway, topic: str, count: int) -> list[tuple[bytes, bytes, dict[str, bytes]]]:
    async def read():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap(gateway), group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await consumer.start()
        got = []
        try:
            consumer.assign([AioPartition(topic, 0)])
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < count and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got += [(r.key, r.value, dict(r.headers)) for r in records]
        finally:
            await consumer.stop()
        return got
    return asyncio.run(read())


def read_confluent(gateway, topic: str, count: int) -> list[tuple[bytes, bytes, dict[str, bytes]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap(gateway), "group.id": unique("reader"),
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        for message in consumer.consume(count - len(got), timeout=0.2):
            assert message.error() is None, message.error()
            got.append((message.key(), message.value(), dict(message.headers() or [])))
    consumer.close()
    return got


@pytest.mark.parametrize("read", [read_aiokafka, read_confluent], ids=["aiokafka", "confluent-kafka"])
def test_amqp_publishes_are_read_by_kafka_consumers(gateway, amqp, read) -> None:
    channel = amqp.channel()
    queue = unique("to-kafka")
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, "amq.direct", routing_key="invoice.sent")
    channel.confirm_delivery()
    sent = pika.BasicProperties(content_type="application/json", delivery_mode=2, correlation_id="c-7",
                                timestamp=1_700_000_000, headers={"tenant": "acme", "attempt": 2})
    channel.basic_publish("", queue, b'{"id": 7}', sent)
    channel.basic_publish("amq.direct", "invoice.sent", b"second")
    (key1, value1, headers1), (key2, value2, headers2) = read(gateway, queue, 2)
    assert (key1, value1, headers1["amqp.exchange"]) == (queue.encode(), b'{"id": 7}', b"")
    assert (key2, value2, headers2["amqp.exchange"]) == (b"invoice.sent", b"second", b"amq.direct")
    properties = amqp_properties(headers1["amqp.properties"])
    assert (properties.content_type, properties.delivery_mode, properties.correlation_id) == (
        "application/json", 2, "c-7")
    assert properties.headers == {"tenant": "acme", "attempt": 2}
    assert int(properties.timestamp.timestamp()) == 1_700_000_000
    assert headers2["amqp.properties"] == b"\0\0"     # no properties sent, none stored


# --- both at once ---------------------------------------------------------------------------------


def test_a_kafka_consumer_group_and_an_amqp_queue_each_see_every_record(gateway, amqp) -> None:
    channel = amqp.channel()
    topic = unique("shared")
    channel.queue_declare(topic, durable=True)
    producer = Producer({"bootstrap.servers": bootstrap(gateway), "linger.ms": 5})
    group = Consumer({"bootstrap.servers": bootstrap(gateway), "group.id": unique("group"),
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    group.subscribe([topic])

    def produce(first: int, count: int) -> None:
        for i in range(first, first + count):
            producer.produce(topic, b"record-%d" % i, b"k%d" % i)
        assert producer.flush(TIMEOUT_S) == 0

    def group_reads(count: int) -> list[bytes]:
        got = []
        deadline = time.monotonic() + TIMEOUT_S + 10    # the first poll also joins the group
        while len(got) < count and time.monotonic() < deadline:
            for message in group.consume(count - len(got), timeout=0.2):
                assert message.error() is None, message.error()
                got.append(message.value())
        group.commit(asynchronous=False)
        return got

    produce(0, 20)
    assert group_reads(20) == [b"record-%d" % i for i in range(20)]
    assert [body for _, _, body in consume(channel, topic, 20)] == [b"record-%d" % i for i in range(20)]
    produce(20, 5)      # each cursor moves on from where it is, untouched by the other
    assert [body for _, _, body in consume(channel, topic, 5)] == [b"record-%d" % i for i in range(20, 25)]
    assert group_reads(5) == [b"record-%d" % i for i in range(20, 25)]
    assert channel.queue_declare(topic, passive=True).method.message_count == 0
    group.close()

"""Kafka transactions (exactly-once) through a real `gateway serve` with unmodified clients.

Transactional producers of confluent-kafka (librdkafka), kafka-python and aiokafka write to several topics
and partitions, commit and abort; read_committed consumers of confluent-kafka, kafka-python and
aiokafka see exactly the committed records, read_uncommitted ones every data record and never a
control record. Also: a zombie producer of the same transactional.id is fenced; the
consume-transform-produce loop commits the group's offsets with the transaction (and an abort leaves
them unchanged); a transaction left open by a SIGKILL is aborted by timeout after the restart, so
read_committed consumers get past it, and committed data survives.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

TIMEOUT_S = 30.0
TopicPartitionKey = tuple[str, int]


def _bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


def _unique(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:8]}"


def create_topics(gateway, topics: dict[str, int]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=_bootstrap(gateway))
    try:
        admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in topics.items()])
    finally:
        admin.close()


def confluent_producer(gateway, transactional_id: str, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": _bootstrap(gateway), "transactional.id": transactional_id,
                         "transaction.timeout.ms": 20000, "linger.ms": 5, **extra})
    producer.init_transactions(TIMEOUT_S)
    return producer


def confluent_send(producer: Producer, records: Iterable[tuple[str, int, bytes]]) -> None:
    for topic, partition, value in records:
        producer.produce(topic, value=value, key=value, partition=partition)
    producer.flush(TIMEOUT_S)


def read_confluent(gateway, partitions: Iterable[TopicPartitionKey], isolation: str, expected: int, *,
                   timeout_s: float = TIMEOUT_S) -> dict:
    consumer = Consumer({"bootstrap.servers": _bootstrap(gateway), "group.id": _unique("reader"),
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([ConfluentPartition(t, p, OFFSET_BEGINNING) for t, p in partitions])
    found: dict[TopicPartitionKey, list[bytes]] = {}
    try:
        _poll_until(lambda: _confluent_poll(consumer, found), found, expected, timeout_s)
    finally:
        consumer.close()
    return found


def _confluent_poll(consumer: Consumer, found: dict) -> None:
    message = consumer.poll(0.2)
    if message is not None and message.error() is None:
        found.setdefault((message.topic(), message.partition()), []).append(message.value())


def read_kafka_python(gateway, partitions: Iterable[TopicPartitionKey], isolation: str, expected: int) -> dict:
    consumer = KafkaConsumer(bootstrap_servers=_bootstrap(gateway), isolation_level=isolation,
                             enable_auto_commit=False, group_id=None)
    consumer.assign([TopicPartition(t, p) for t, p in partitions])
    consumer.seek_to_beginning()
    found: dict[TopicPartitionKey, list[bytes]] = {}

    def poll() -> None:
        for tp, records in consumer.poll(timeout_ms=200).items():
            found.setdefault((tp.topic, tp.partition), []).extend(r.value for r in records)
    try:
        _poll_until(poll, found, expected)
    finally:
        consumer.close()
    return found


def read_aiokafka(gateway, partitions: Iterable[TopicPartitionKey], isolation: str, expected: int) -> dict:
    async def read() -> dict:
        consumer = AIOKafkaConsumer(bootstrap_servers=_bootstrap(gateway), isolation_level=isolation,
                                    enable_auto_commit=False)
        await consumer.start()
        found: dict[TopicPartitionKey, list[bytes]] = {}
        try:
            consumer.assign([AioPartition(t, p) for t, p in partitions])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + TIMEOUT_S
            settle = None
            while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
                for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                    found.setdefault((tp.topic, tp.partition), []).extend(r.value for r in records)
                if settle is None and sum(map(len, found.values())) >= expected:
                    settle = time.monotonic() + 1.0
        finally:
            await consumer.stop()
        return found
    return asyncio.run(read())


READERS = {"confluent-kafka": read_confluent, "kafka-python": read_kafka_python, "aiokafka": read_aiokafka}


def _poll_until(poll, found: dict, expected: int, timeout_s: float = TIMEOUT_S) -> None:
    """Poll until `expected` records arrived, then a second more (anything extra would show)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and sum(map(len, found.values())) < expected:
        poll()
    settle = time.monotonic() + 1.0
    while time.monotonic() < settle:
        poll()


def _by_partition(records: Iterable[tuple[str, int, bytes]]) -> dict:
    out: dict[TopicPartitionKey, list[bytes]] = {}
    for topic, partition, value in records:
        out.setdefault((topic, partition), []).append(value)
    return out


def _batch(tag: str, targets: list[TopicPartitionKey], per_partition: int = 3) -> list[tuple[str, int, bytes]]:
    return [(t, p, f"{tag}-{t}-{p}-{i}".encode()) for t, p in targets for i in range(per_partition)]


@pytest.fixture
def topics(gateway_process):
    orders, audit = _unique("orders"), _unique("audit")
    create_topics(gateway_process, {orders: 3, audit: 1})
    return [(orders, 0), (orders, 1), (orders, 2), (audit, 0)]


def test_confluent_transactions_commit_and_abort(gateway_process, topics) -> None:
    producer = confluent_producer(gateway_process, _unique("tx"))
    first, aborted, last = _batch("first", topics), _batch("aborted", topics), _batch("last", topics)
    for records, commit in ((first, True), (aborted, False), (last, True)):
        producer.begin_transaction()
        confluent_send(producer, records)
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
    committed = _by_partition(first + last)
    everything = _by_partition(first + aborted + last)
    for name, read in READERS.items():
        assert read(gateway_process, topics, "read_committed", len(first + last)) == committed, name
        assert read(gateway_process, topics, "read_uncommitted", len(everything)) == everything, name


def test_kafka_python_transactions_commit_and_abort(gateway_process, topics) -> None:
    producer = KafkaProducer(bootstrap_servers=_bootstrap(gateway_process), transactional_id=_unique("kp-tx"),
                             transaction_timeout_ms=20000)
    try:
        producer.init_transactions()
        first, aborted, last = _batch("first", topics), _batch("aborted", topics), _batch("last", topics)
        for records, commit in ((first, True), (aborted, False), (last, True)):
            producer.begin_transaction()
            for topic, partition, value in records:
                producer.send(topic, value=value, key=value, partition=partition)
            producer.flush()
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()
    committed = _by_partition(first + last)
    for name, read in READERS.items():
        assert read(gateway_process, topics, "read_committed", len(first + last)) == committed, name


def test_aiokafka_transactions_commit_and_abort(gateway_process, topics) -> None:
    first, aborted, last = _batch("first", topics), _batch("aborted", topics), _batch("last", topics)

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=_bootstrap(gateway_process), transactional_id=_unique("aio-tx"),
                                    transaction_timeout_ms=20000)
        await producer.start()
        try:
            for records, commit in ((first, True), (aborted, False), (last, True)):
                await producer.begin_transaction()
                for topic, partition, value in records:
                    await producer.send(topic, value=value, key=value, partition=partition)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()
    asyncio.run(produce())
    assert read_confluent(gateway_process, topics, "read_committed", len(first + last)) == _by_partition(first + last)
    assert read_aiokafka(gateway_process, topics, "read_uncommitted", len(first + aborted + last)) == \
        _by_partition(first + aborted + last)


def test_open_transaction_holds_back_read_committed_only(gateway_process, topics) -> None:
    producer = confluent_producer(gateway_process, _unique("tx"))
    producer.begin_transaction()
    pending = _batch("pending", topics[:1])
    confluent_send(producer, pending)
    tp = TopicPartition(*topics[0])
    for isolation, end in (("read_committed", 0), ("read_uncommitted", 3)):
        consumer = KafkaConsumer(bootstrap_servers=_bootstrap(gateway_process), isolation_level=isolation)
        try:   # ListOffsets latest: the last stable offset for read_committed, else the high watermark
            assert consumer.end_offsets([tp])[tp] == end
        finally:
            consumer.close()
    assert read_confluent(gateway_process, topics[:1], "read_committed", 1, timeout_s=3.0) == {}
    assert read_confluent(gateway_process, topics[:1], "read_uncommitted", 3) == _by_partition(pending)
    producer.commit_transaction(TIMEOUT_S)
    assert read_confluent(gateway_process, topics[:1], "read_committed", 3) == _by_partition(pending)


def test_zombie_producer_is_fenced(gateway_process, topics) -> None:
    transactional_id = _unique("tx")
    zombie = confluent_producer(gateway_process, transactional_id)
    zombie.begin_transaction()
    confluent_send(zombie, _batch("zombie", topics[:2]))
    successor = confluent_producer(gateway_process, transactional_id)   # aborts the zombie's transaction
    successor.begin_transaction()
    fresh = _batch("fresh", topics[:2])
    confluent_send(successor, fresh)
    successor.commit_transaction(TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(TIMEOUT_S)
    assert raised.value.args[0].fatal() or "fenced" in str(raised.value).lower()
    assert read_confluent(gateway_process, topics[:2], "read_committed", len(fresh)) == _by_partition(fresh)


def test_consume_transform_produce_commits_offsets_atomically(gateway_process, topics) -> None:
    source, sink = topics[3], topics[0]
    seed = Producer({"bootstrap.servers": _bootstrap(gateway_process)})
    for i in range(10):
        seed.produce(source[0], value=f"in-{i}".encode(), partition=source[1])
    seed.flush(TIMEOUT_S)
    group = _unique("etl")
    consumer = Consumer({"bootstrap.servers": _bootstrap(gateway_process), "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([source[0]])   # a group member: TxnOffsetCommit carries its member id and generation
    producer = confluent_producer(gateway_process, _unique("etl-tx"))

    def transform(count: int, commit: bool) -> list[bytes]:
        taken: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(taken) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                taken.append(message.value())
        producer.begin_transaction()
        confluent_send(producer, [(sink[0], sink[1], b"out-" + value) for value in taken])
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), TIMEOUT_S)
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
        return taken

    def committed_offset() -> int:
        return consumer.committed([ConfluentPartition(*source)], TIMEOUT_S)[0].offset

    try:
        kept = transform(4, commit=True)
        assert committed_offset() == 4
        transform(3, commit=False)
        assert committed_offset() == 4          # the abort left the group's offset where it was
    finally:
        consumer.close()
    assert read_confluent(gateway_process, [sink], "read_committed", 4) == {sink: [b"out-" + v for v in kept]}


def test_open_transaction_is_aborted_after_a_crash(gateway_launcher, tmp_path) -> None:
    env = {"GATEWAY_KAFKA_TRANSACTION_CLEANUP_INTERVAL_MS": "300"}
    data_dir = tmp_path / "crash-data"
    gateway = gateway_launcher.start(data_dir=data_dir, env=env)
    topic = _unique("ledger")
    create_topics(gateway, {topic: 2})
    targets = [(topic, 0), (topic, 1)]
    producer = confluent_producer(gateway, _unique("tx"), **{"transaction.timeout.ms": 3000})
    producer.begin_transaction()
    committed = _batch("committed", targets)
    confluent_send(producer, committed)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    confluent_send(producer, _batch("open", targets))   # stored, never ended
    gateway.kill()

    gateway = gateway_launcher.start(data_dir=data_dir, env=env)
    later = confluent_producer(gateway, _unique("tx"))
    later.begin_transaction()
    after = _batch("after", targets)
    confluent_send(later, after)
    later.commit_transaction(TIMEOUT_S)
    expected = _by_partition(committed + after)
    for name, read in READERS.items():
        assert read(gateway, targets, "read_committed", len(committed + after)) == expected, name

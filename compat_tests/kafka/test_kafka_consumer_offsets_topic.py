"""`__consumer_offsets` against a real `gateway serve`: lag monitors read commits and group
generations from it in Kafka's own key/value formats (decoded here by hand, independently of the
gateway); clients see it as an internal topic, regex subscriptions leave it out, and producing to
it is refused, as with Kafka."""

from __future__ import annotations

import re
import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

TIMEOUT_S = 30.0
OFFSETS_TOPIC = "__consumer_offsets"


def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str):
        value = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value[0] if len(value) == 1 else value

    def string(self) -> str | None:
        size = self.take(">h")
        if size < 0:
            return None
        self.at += size
        return self.data[self.at - size:self.at].decode()

    def blob(self) -> bytes:
        size = self.take(">i")
        self.at += size
        return self.data[self.at - size:self.at]


def decode(key: bytes, value: bytes | None):
    """Kafka's formats: offset commit key v0/1 and value v3; group metadata key v2 and value v3."""
    k = Reader(key)
    version = k.take(">h")
    if version in (0, 1):
        ident = ("offset", k.string(), k.string(), k.take(">i"))
        if value is None:
            return ident, None
        v = Reader(value)
        assert v.take(">h") == 3
        offset, epoch = v.take(">qi")
        return ident, (offset, epoch, v.string(), v.take(">q"))
    assert version == 2
    ident = ("group", k.string())
    if value is None:
        return ident, None
    v = Reader(value)
    assert v.take(">h") == 3
    protocol_type, generation, protocol, leader = v.string(), v.take(">i"), v.string(), v.string()
    v.take(">q")
    members = []
    for _ in range(v.take(">i")):
        member_id, instance_id, client_id, client_host = v.string(), v.string(), v.string(), v.string()
        rebalance_ms, session_ms = v.take(">ii")
        members.append((member_id, instance_id, client_id, session_ms, v.blob(), v.blob()))
    assert v.at == len(value)
    return ident, (protocol_type, generation, protocol, leader, members)


def java_partition(group_id: str) -> int:
    h = 0
    for char in group_id:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % 50


def read_offsets_topic(gateway, partition: int, until, timeout_s: float = TIMEOUT_S) -> list:
    """Decoded records of one partition of __consumer_offsets until `until(records)` holds."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway), enable_auto_commit=False)
    consumer.assign([TopicPartition(OFFSETS_TOPIC, partition)])
    consumer.seek_to_beginning()
    records = []
    deadline = time.monotonic() + timeout_s
    try:
        while not until(records):
            assert time.monotonic() < deadline, f"not found in {OFFSETS_TOPIC}: {records}"
            for batch in consumer.poll(timeout_ms=200).values():
                records += [decode(r.key, r.value) for r in batch]
    finally:
        consumer.close()
    return records


@pytest.fixture
def topic(gateway_process) -> str:
    name = f"watched-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(gateway_process))
    admin.create_topics([NewTopic(name, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap(gateway_process))
    for i in range(5):
        producer.send(name, f"v{i}".encode())
    producer.flush()
    producer.close()
    return name


def test_commits_and_generations_appear_in_kafkas_formats(gateway_process, topic):
    group = f"lagging-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": bootstrap(gateway_process), "group.id": group,
                         "client.id": "watched-client", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 10_000})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + TIMEOUT_S
    while seen < 3:
        assert time.monotonic() < deadline, "the consumer got no records"
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen += 1
    consumer.commit(offsets=[ConfluentPartition(topic, 0, 3, leader_epoch=2)], asynchronous=False)
    consumer.close()   # leaves the group: an Empty generation is recorded

    def complete(records) -> bool:
        groups = [value for ident, value in records if ident == ("group", group)]
        return any(value is not None and value[4] == [] for value in groups)
    records = read_offsets_topic(gateway_process, java_partition(group), complete)
    commits = [value for ident, value in records if ident == ("offset", group, topic, 0)]
    assert commits and commits[-1][:3] == (3, 2, "")
    generations = [value for ident, value in records if ident == ("group", group)]
    stable = next(value for value in generations if value[4])
    protocol_type, generation, protocol, leader, members = stable
    assert (protocol_type, generation >= 1, protocol in ("range", "roundrobin", "cooperative-sticky")) == \
        ("consumer", True, True)
    assert [(m[0] == leader, m[2], m[3]) for m in members] == [(True, "watched-client", 10_000)]
    assert topic.encode() in members[0][4] and topic.encode() in members[0][5]   # subscription, assignment


def test_deleting_a_group_writes_tombstones(gateway_process, topic):
    group = f"doomed-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway_process), group_id=group, enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(4, "m", -1)})
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap(gateway_process)})
    for future in admin.delete_consumer_groups([group]).values():
        future.result(TIMEOUT_S)
    records = read_offsets_topic(gateway_process, java_partition(group),
                                 lambda rs: (("offset", group, topic, 0), None) in rs and (("group", group), None) in rs)
    first = records.index(next(r for r in records if r[0] == ("offset", group, topic, 0)))
    assert records[first][1][:3] == (4, -1, "m")


def test_clients_see_an_internal_topic_that_regex_subscriptions_leave_out(gateway_process, topic):
    group = f"regex-{uuid.uuid4().hex[:6]}"
    committer = KafkaConsumer(bootstrap_servers=bootstrap(gateway_process), group_id=group)
    assert committer.committed(TopicPartition(topic, 0)) is None   # FindCoordinator created the offsets topic
    committer.close()
    metadata = AdminClient({"bootstrap.servers": bootstrap(gateway_process)}).list_topics(timeout=TIMEOUT_S)
    assert len(metadata.topics[OFFSETS_TOPIC].partitions) == 50
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(gateway_process))
    try:
        described = admin.describe_topics([OFFSETS_TOPIC])
    finally:
        admin.close()
    assert described[0]["is_internal"] is True
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway_process), group_id=group + "-all")
    consumer.subscribe(pattern=".*")
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the pattern subscription got no assignment"
            consumer.poll(timeout_ms=200)
        assert {tp.topic for tp in consumer.assignment()} == {topic}
    finally:
        consumer.close()


def test_producing_to_the_internal_topic_is_refused(gateway_process, topic):
    creator = KafkaConsumer(bootstrap_servers=bootstrap(gateway_process), group_id="creates-it")
    creator.committed(TopicPartition(topic, 0))
    creator.close()
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap(gateway_process), "message.send.max.retries": 0})
    producer.produce(OFFSETS_TOPIC, b"forged", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert [error.code() for error in errors] == [KafkaError.TOPIC_EXCEPTION]
    assert re.match(r"^\w", str(errors[0]))

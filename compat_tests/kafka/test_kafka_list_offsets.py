"""ListOffsets MAX_TIMESTAMP (-3, KIP-734) against a real `gateway serve`, as a Kafka 3.x broker
answers it: through confluent-kafka's and kafka-python's admin clients (v7), and at the older
versions over a raw socket (v1-6 answer it alike; v0 lists no offsets)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.admin import OffsetSpec as KafkaPythonSpec

from compat_tests.kafka.wire_call import raw_request
from protocols.kafka.schema.list_offsets import LIST_OFFSETS

TIMEOUT_S = 20.0
T0 = 1_700_000_000_000
# Out of order on purpose: the highest timestamp is the third record's, and the last one repeats it.
TIMESTAMPS = (T0 + 10, T0 + 30, T0 + 90, T0 + 20, T0 + 90)
MAX_AT = 2


def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


@pytest.fixture
def topic(gateway_process) -> str:
    name = f"maxts-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(gateway_process))
    admin.create_topics([NewTopic(name, 2, 1)])   # partition 1 stays empty
    admin.close()
    producer = Producer({"bootstrap.servers": bootstrap(gateway_process), "linger.ms": 0})
    for timestamp in TIMESTAMPS:
        producer.produce(name, b"v", partition=0, timestamp=timestamp)
        producer.flush(TIMEOUT_S)   # one batch each, so the highest one is inside the log, not at its end
    return name


def raw_max_timestamp(gateway, topic: str, version: int) -> list:
    response = raw_request(gateway.kafka, LIST_OFFSETS, version, {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "current_leader_epoch": -1, "timestamp": -3, "max_num_offsets": 1}
            for p in (0, 1)]}]})
    return list(response.topics[0].partitions)


def test_confluent_max_timestamp_spec_finds_the_first_record_with_the_highest_timestamp(gateway_process, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap(gateway_process)})
    asked = {ConfluentPartition(topic, 0): OffsetSpec.max_timestamp(),
             ConfluentPartition(topic, 1): OffsetSpec.max_timestamp()}
    found = {tp.partition: future.result(TIMEOUT_S) for tp, future in admin.list_offsets(asked).items()}
    assert (found[0].offset, found[0].timestamp) == (MAX_AT, max(TIMESTAMPS))
    assert (found[1].offset, found[1].timestamp) == (-1, -1)   # an empty partition


def test_kafka_python_max_timestamp_spec(gateway_process, topic):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(gateway_process))
    try:
        found = admin.list_partition_offsets({TopicPartition(topic, 0): KafkaPythonSpec.MAX_TIMESTAMP})
    finally:
        admin.close()
    answer = found[TopicPartition(topic, 0)]
    assert (answer.offset, answer.timestamp) == (MAX_AT, max(TIMESTAMPS))


@pytest.mark.parametrize("version", [1, 4, 6, 7])
def test_older_versions_answer_max_timestamp_as_kafka_3_does(gateway_process, topic, version):
    full, empty = raw_max_timestamp(gateway_process, topic, version)
    assert (full.error_code, full.offset, full.timestamp) == (0, MAX_AT, max(TIMESTAMPS))
    assert (empty.error_code, empty.offset, empty.timestamp) == (0, -1, -1)


def test_v0_lists_no_offsets_before_time_minus_three(gateway_process, topic):
    full, empty = raw_max_timestamp(gateway_process, topic, 0)
    assert (full.error_code, list(full.old_style_offsets)) == (0, [])
    assert (empty.error_code, list(empty.old_style_offsets)) == (0, [])


def test_the_highest_timestamp_follows_new_records_and_deleted_ones(gateway_process, topic):
    producer = Producer({"bootstrap.servers": bootstrap(gateway_process)})
    assert raw_max_timestamp(gateway_process, topic, 7)[0].offset == MAX_AT
    producer.produce(topic, b"later", partition=0, timestamp=T0 + 500)
    producer.flush(TIMEOUT_S)
    full, _ = raw_max_timestamp(gateway_process, topic, 7)
    assert (full.offset, full.timestamp) == (len(TIMESTAMPS), T0 + 500)
    admin = AdminClient({"bootstrap.servers": bootstrap(gateway_process)})
    deleted = admin.delete_records([ConfluentPartition(topic, 0, len(TIMESTAMPS))])
    for future in deleted.values():
        future.result(TIMEOUT_S)
    full, _ = raw_max_timestamp(gateway_process, topic, 7)
    assert (full.offset, full.timestamp) == (len(TIMESTAMPS), T0 + 500)
    admin.delete_records([ConfluentPartition(topic, 0, len(TIMESTAMPS) + 1)])[ConfluentPartition(
        topic, 0, len(TIMESTAMPS) + 1)].result(TIMEOUT_S)
    full, _ = raw_max_timestamp(gateway_process, topic, 7)
    assert (full.offset, full.timestamp) == (-1, -1)   # nothing left

"""Leader epochs (KIP-320) against a real `gateway serve` that restarts: each start that opens a
partition begins a new epoch where the log ends, records carry their epoch, and OffsetForLeaderEpoch
names where each epoch ended. A consumer of each client library (confluent-kafka/librdkafka,
kafka-python, aiokafka), assigned the partition and running across the restart, goes on from its
position: no offset reset, no record twice, none missed, although librdkafka and kafka-python validate their position
with OffsetForLeaderEpoch once they see the new epoch."""

from __future__ import annotations

import uuid

import pytest

from compat_tests.kafka.epoch_readers import READER_IDS, READERS, AiokafkaReader, produce
from gateway.cluster.ports import free_port
from protocols.kafka.schema.fetch import FETCH
from protocols.kafka.schema.list_offsets import LIST_OFFSETS
from protocols.kafka.schema.metadata import METADATA
from protocols.kafka.schema.offset_for_leader_epoch import OFFSET_FOR_LEADER_EPOCH
from wire_call import raw_request

BATCH = 10


def metadata_epoch(address: tuple[str, int], topic: str) -> int:
    answer = raw_request(address, METADATA, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                               "include_cluster_authorized_operations": False,
                                               "include_topic_authorized_operations": False})
    return answer.topics[0].partitions[0].leader_epoch


def epoch_end(address: tuple[str, int], topic: str, epoch: int, current: int = -1):
    answer = raw_request(address, OFFSET_FOR_LEADER_EPOCH, 3, {"replica_id": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]})
    part = answer.topics[0].partitions[0]
    return part.error_code, part.leader_epoch, part.end_offset


def fetch_error(address: tuple[str, int], topic: str, current: int, offset: int = 0, last_fetched: int = -1):
    answer = raw_request(address, FETCH, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                             "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                                             "topics": [{"topic": topic, "partitions": [
                                                 {"partition": 0, "current_leader_epoch": current,
                                                  "fetch_offset": offset, "last_fetched_epoch": last_fetched,
                                                  "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                                             "forgotten_topics_data": [], "rack_id": ""})
    part = answer.responses[0].partitions[0]
    return part.error_code, part.diverging_epoch


def latest_epoch(address: tuple[str, int], topic: str) -> tuple[int, int]:
    answer = raw_request(address, LIST_OFFSETS, 4, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    part = answer.topics[0].partitions[0]
    return part.offset, part.leader_epoch


@pytest.mark.parametrize("reader", READERS, ids=READER_IDS)
def test_a_consumer_reads_on_across_a_restart_that_begins_a_new_epoch(gateway_launcher, tmp_path, reader):
    data_dir, port = tmp_path / "data", free_port()
    gateway = gateway_launcher.start("--kafka-port", str(port), data_dir=data_dir)
    address = f"127.0.0.1:{port}"
    topic = f"epochs-{uuid.uuid4().hex[:8]}"
    produce(address, topic, range(BATCH))
    first_epoch = metadata_epoch(gateway.kafka, topic)
    assert first_epoch >= 0
    consumer = reader(address, topic)
    try:
        before = consumer.read(BATCH)
        assert [(offset, value) for offset, value, _ in before] == [(i, b"%d" % i) for i in range(BATCH)]
        if reader is not AiokafkaReader:
            assert {epoch for _, _, epoch in before} == {first_epoch}

        gateway.stop()
        gateway = gateway_launcher.start("--kafka-port", str(port), data_dir=data_dir)
        produce(address, topic, range(BATCH, 2 * BATCH))
        second_epoch = metadata_epoch(gateway.kafka, topic)
        assert second_epoch > first_epoch
        after = consumer.read(BATCH)
        extra = consumer.read(1, timeout_s=2.0)   # nothing more: no record twice
        assert [(offset, value) for offset, value, _ in after + extra] == [(i, b"%d" % i)
                                                                           for i in range(BATCH, 2 * BATCH)]
        if reader is not AiokafkaReader:
            assert {epoch for _, _, epoch in after} == {second_epoch}
    finally:
        consumer.close()

    assert epoch_end(gateway.kafka, topic, first_epoch) == (0, first_epoch, BATCH)
    assert epoch_end(gateway.kafka, topic, second_epoch, second_epoch) == (0, second_epoch, 2 * BATCH)
    assert latest_epoch(gateway.kafka, topic) == (2 * BATCH, second_epoch)


def test_stale_and_future_epochs_are_refused_and_a_diverged_follower_is_told_where(gateway_launcher, tmp_path):
    data_dir, port = tmp_path / "data", free_port()
    gateway = gateway_launcher.start("--kafka-port", str(port), data_dir=data_dir)
    topic = f"epochs-{uuid.uuid4().hex[:8]}"
    produce(f"127.0.0.1:{port}", topic, range(3))
    gateway.stop()
    gateway = gateway_launcher.start("--kafka-port", str(port), data_dir=data_dir)
    produce(f"127.0.0.1:{port}", topic, range(3, 5))
    epoch = metadata_epoch(gateway.kafka, topic)
    assert fetch_error(gateway.kafka, topic, epoch) == (0, None)
    assert fetch_error(gateway.kafka, topic, epoch - 1)[0] == 74          # FENCED_LEADER_EPOCH
    assert fetch_error(gateway.kafka, topic, epoch + 1)[0] == 75          # UNKNOWN_LEADER_EPOCH
    assert epoch_end(gateway.kafka, topic, epoch - 1, epoch - 1)[0] == 74
    # a follower that fetched epoch-1 records up to offset 4 diverged at 3, where this epoch began
    error, diverging = fetch_error(gateway.kafka, topic, epoch, offset=4, last_fetched=epoch - 1)
    assert error == 0 and (diverging.epoch, diverging.end_offset) == (epoch - 1, 3)

"""DescribeProducers through the wire format both ways, on partitions written by idempotent and
transactional producers."""

from __future__ import annotations

from core.names import TopicName
from core.records.builder import Record, build_batch
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.handlers import describe_producers
from test_admin_handlers import broker, call, create  # noqa: F401 (fixture)


async def test_producers_are_described_with_sequence_timestamp_and_open_transaction(broker) -> None:
    await create(broker, "paid", 2)
    partition = await broker.core.partition(TopicName.of("paid"), 0)
    await partition.append(build_batch([Record(1000, value=b"a"), Record(1005, value=b"b")],
                                       producer_id=7, producer_epoch=2, base_sequence=0))
    await partition.append(build_batch([Record(2000, value=b"t")], producer_id=9, producer_epoch=0,
                                       base_sequence=0, is_transactional=True))
    response = await call(broker, describe_producers, 0, {"topics": [
        {"name": "paid", "partition_indexes": [0, 1, 5]}, {"name": "missing", "partition_indexes": [0]}]})
    paid, missing = response.topics
    first, second, absent = paid.partitions
    assert [(p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.current_txn_start_offset)
            for p in first.active_producers] == [(7, 2, 1, 1005, -1), (9, 0, 0, 2000, 2)]
    assert (second.error_code, second.active_producers) == (ErrorCode.NONE, [])
    assert absent.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert missing.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


"""Retention across protocols (core/retention.py): acks move cursors only; with the topic setting
retention.consumed, what every cursor of the partition (Kafka group or AMQP queue) consumed goes."""

from __future__ import annotations

from core.names import TopicName
from core.records.builder import Record, build_batch

TOPIC = TopicName("public", "default", "orders")
SMALL_LEDGERS = {"segment.bytes": str(1 << 20)}


async def filled(core, configs: dict[str, str], batches: int = 4):
    await core.create_topic(TOPIC, 1, {**SMALL_LEDGERS, **configs})
    partition = await core.partition(TOPIC, 0)
    for i in range(batches):
        await partition.append(build_batch([Record(1_000 + i, value=b"v%d" % i)]))
    return partition


async def commit(core, name: str, offset: int) -> None:
    cursor = await core.cursor(TOPIC, 0, name)
    cursor.commit(offset)
    await cursor.flush()


async def test_without_the_setting_nothing_goes_whatever_the_cursors_say(core) -> None:
    partition = await filled(core, {})
    await commit(core, "queue", 4)
    await core.delete_consumed(TOPIC, 0)
    await core.enforce_retention()
    assert partition.log_start_offset == 0


async def test_with_the_setting_the_lowest_cursor_bounds_what_goes(core) -> None:
    partition = await filled(core, {"retention.consumed": "true"})
    await commit(core, "queue", 4)
    await commit(core, "kafka-group", 1)
    await core.delete_consumed(TOPIC, 0)
    assert partition.log_start_offset == 1
    await commit(core, "kafka-group", 3)
    await core.enforce_retention()             # the sweep does it too
    assert partition.log_start_offset == 3
    assert (await partition.read(3, 1 << 20)).records


async def test_with_the_setting_and_no_cursor_nothing_goes(core) -> None:
    partition = await filled(core, {"retention.consumed": "true"})
    await core.delete_consumed(TOPIC, 0)
    assert partition.log_start_offset == 0

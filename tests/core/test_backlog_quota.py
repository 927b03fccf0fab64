"""Backlog quotas (core/backlog_quota.py): the slowest subscription of a partition decides; producers
are refused until it catches up, or the oldest records go, by the namespace's policy."""

from __future__ import annotations

import pytest

from core.errors import BacklogQuotaExceeded
from core.names import TopicName
from core.policies import NamespacePolicies
from core.records.builder import Record, build_batch
from tests.polling import eventually

TOPIC = TopicName("acme", "quota", "orders")
VALUE = b"v" * 150_000


async def filled(core, action: str, batches: int = 10):
    await core.tenancy.create_tenant("acme")
    await core.tenancy.create_namespace("acme", "quota", NamespacePolicies(
        backlog_quota_bytes=500_000, backlog_quota_action=action))
    await core.create_topic(TOPIC, 1, {"segment.bytes": str(1 << 20)})
    partition = await core.partition(TOPIC, 0)
    for i in range(batches):
        await partition.append(build_batch([Record(core.clock.now_ms(), value=VALUE)]))
    return partition


async def commit(core, name: str, offset: int) -> None:
    cursor = await core.cursor(TOPIC, 0, name)
    cursor.commit(offset)
    await cursor.flush()


async def test_the_backlog_estimate_covers_the_whole_log_from_its_start_and_nothing_from_its_end(core):
    partition = await filled(core, "refuse_producers")
    whole = partition.log.bytes_from(0)
    assert whole == partition.log.size_bytes
    assert partition.log.bytes_from(partition.high_watermark) == 0
    assert [partition.log.bytes_from(o) >= partition.log.bytes_from(o + 1) for o in range(10)] == [True] * 10
    assert partition.log.bytes_from(5) == pytest.approx(whole / 2, rel=0.25)


async def test_without_subscriptions_there_is_no_backlog(core):
    partition = await filled(core, "refuse_producers")
    await core.enforce_retention()
    assert partition.refusal is None
    await partition.append(build_batch([Record(core.clock.now_ms(), value=VALUE)]))


async def test_a_slow_subscription_refuses_producers_until_it_catches_up(core):
    partition = await filled(core, "refuse_producers")
    await commit(core, "fast", 10)
    await commit(core, "slow", 1)
    await core.enforce_retention()
    with pytest.raises(BacklogQuotaExceeded, match="backlog quota of 500000 bytes"):
        await partition.append(build_batch([Record(core.clock.now_ms(), value=VALUE)]))
    assert partition.high_watermark == 10 and partition.log_start_offset == 0   # nothing dropped
    await commit(core, "slow", 8)
    await core.enforce_retention()
    assert await partition.append(build_batch([Record(core.clock.now_ms(), value=VALUE)])) == 10


async def test_drop_oldest_moves_the_log_start_until_the_slowest_backlog_fits(core):
    partition = await filled(core, "drop_oldest")
    await commit(core, "slow", 0)
    await core.enforce_retention()
    assert partition.refusal is None
    assert partition.log.bytes_from(partition.log_start_offset) <= 500_000
    assert 3 <= partition.log_start_offset < 10
    await partition.append(build_batch([Record(core.clock.now_ms(), value=VALUE)]))   # producers go on
    read = await partition.read(partition.log_start_offset, 1 << 20)
    assert read.records


async def test_lifting_the_policy_lets_producers_in_at_the_next_check(core):
    partition = await filled(core, "refuse_producers")
    await commit(core, "slow", 0)
    await core.enforce_retention()
    assert partition.refusal is not None
    await core.tenancy.policies.put("acme", "quota", NamespacePolicies())
    await eventually(lambda: partition.meter.policies.backlog_quota_bytes is None)
    await core.enforce_retention()
    assert partition.refusal is None

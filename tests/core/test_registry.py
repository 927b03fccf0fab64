"""The registry of tenants, namespaces and topics."""

import pytest

from core.errors import InvalidConfig, InvalidName, InvalidPartitions, TopicExists, UnknownTenant, UnknownTopic
from core.names import TopicName
from core.partition import retention_policy
from core.topic_config import EffectiveConfig, validate


async def test_default_tenant_and_namespace_exist(core) -> None:
    assert "public" in await core.registry.tenants()
    assert await core.registry.namespaces("public") == ["default"]


async def test_create_get_list_delete_topic(core) -> None:
    name = TopicName.of("trade-flow")
    info = await core.create_topic(name, 3, {"retention.ms": "1000"})
    assert (info.partitions, info.configs) == (3, {"retention.ms": "1000"})
    assert info.effective.retention_ms == 1000 and info.effective.max_message_bytes == 1048588
    assert (await core.registry.get_topic(name)).topic_id == info.topic_id
    assert await core.registry.list_topics("public", "default") == ["trade-flow"]
    with pytest.raises(TopicExists):
        await core.create_topic(name, 1)
    await core.delete_topic(name)
    with pytest.raises(UnknownTopic):
        await core.registry.get_topic(name)
    assert await core.registry.list_topics("public", "default") == []


async def test_delete_topic_removes_its_data(core) -> None:
    from core.records.builder import Record, build_batch
    name = TopicName.of("gone")
    await core.create_topic(name, 1)
    partition = await core.partition(name, 0)
    await partition.append(build_batch([Record(1, value=b"v")]))
    await core.delete_topic(name)
    await core.create_topic(name, 1)
    assert (await core.partition(name, 0)).high_watermark == 0


async def test_validate_only_creates_nothing(core) -> None:
    name = TopicName.of("dry-run")
    await core.create_topic(name, 2, validate_only=True)
    with pytest.raises(UnknownTopic):
        await core.registry.get_topic(name)


@pytest.mark.parametrize("partitions", [0, -1, 10_001])
async def test_bad_partition_counts_are_refused(core, partitions: int) -> None:
    with pytest.raises(InvalidPartitions):
        await core.create_topic(TopicName.of("p"), partitions)


@pytest.mark.parametrize("configs, message", [({"retention.ms": "soon"}, "not an integer"),
                                              ({"no.such.key": "1"}, "unknown topic config"),
                                              ({"cleanup.policy": "shred"}, "not one of"),
                                              ({"flush.messages": "10"}, "cannot be changed")])
async def test_bad_configs_are_refused(core, configs, message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        await core.create_topic(TopicName.of("c"), 1, configs)


async def test_alter_and_reset_configs(core) -> None:
    name = TopicName.of("cfg")
    await core.create_topic(name, 1, {"retention.ms": "5000", "retention.bytes": "100"})
    info = await core.alter_topic_configs(name, {"retention.ms": None, "max.message.bytes": "2048"})
    assert info.configs == {"retention.bytes": "100", "max.message.bytes": "2048"}
    info = await core.alter_topic_configs(name, {"segment.ms": "60000"}, replace_all=True)
    assert info.configs == {"segment.ms": "60000"}
    partition = await core.partition(name, 0)
    await core.alter_topic_configs(name, {"max.message.bytes": "100"})
    assert partition.config.max_message_bytes == 100


async def test_add_partitions_only_grows(core) -> None:
    name = TopicName.of("grow")
    await core.create_topic(name, 2)
    assert (await core.registry.add_partitions(name, 5)).partitions == 5
    await core.partition(name, 4)
    with pytest.raises(InvalidPartitions):
        await core.registry.add_partitions(name, 3)


async def test_unknown_namespace_and_bad_names(core) -> None:
    with pytest.raises(UnknownTenant):
        await core.create_topic(TopicName.of("t", tenant="acme"), 1)
    await core.registry.ensure_namespace("acme", "billing")
    await core.create_topic(TopicName.of("t", tenant="acme", namespace="billing"), 1)
    with pytest.raises(InvalidName):
        TopicName.of("a/b")
    with pytest.raises(InvalidName):
        TopicName.of("..")


@pytest.mark.parametrize("policy, deletes", [("delete", True), ("compact,delete", True), ("compact", False), ("", False)])
def test_only_a_cleanup_policy_with_delete_removes_records(policy: str, deletes: bool) -> None:
    """As in Kafka: compaction (not performed here) or no cleanup at all keeps every record."""
    config = EffectiveConfig.of(validate({"cleanup.policy": policy, "retention.ms": "1000"}))
    assert config.deletes is deletes
    assert retention_policy(config).retention_ms == (1000 if deletes else -1)

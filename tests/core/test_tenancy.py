"""Tenants and namespaces at runtime, namespace policies and what they change in the core."""


import pytest

from core.auth import Permission, UserStore
from core.errors import InvalidConfig, InvalidName, PolicyViolation, UnknownTenant
from core.names import TopicName
from core.policies import NamespacePolicies
from core.tenancy import NotEmpty, Reserved
from tests.core.test_partition import batch_of
from tests.polling import eventually


async def test_tenants_and_namespaces_are_created_once_and_listed(core):
    assert await core.tenancy.create_tenant("acme") is True
    assert await core.tenancy.create_tenant("acme") is False
    assert await core.tenancy.create_namespace("acme", "orders") is True
    assert await core.tenancy.create_namespace("acme", "orders") is False
    assert "acme" in await core.tenancy.tenants()
    assert await core.tenancy.namespaces("acme") == ["orders"]
    with pytest.raises(UnknownTenant):
        await core.tenancy.create_namespace("nosuch", "x")
    with pytest.raises(InvalidName):
        await core.tenancy.create_tenant("no good")


async def test_a_namespace_with_topics_is_deleted_only_when_forced(core):
    await core.tenancy.create_tenant("acme")
    await core.tenancy.create_namespace("acme", "orders")
    name = TopicName("acme", "orders", "t")
    await core.create_topic(name, 2)
    await (await core.partition(name, 0)).append(batch_of([b"a", b"b"]))
    cursor = await core.cursor(name, 0, "reader")
    cursor.commit(1)
    await cursor.flush()
    users = UserStore(core.metadata)
    await users.put_user("u", "p", permissions=[Permission("public", "default"), Permission("acme", "orders")])

    with pytest.raises(NotEmpty):
        await core.tenancy.delete_namespace("acme", "orders")
    with pytest.raises(NotEmpty):
        await core.tenancy.delete_tenant("acme")
    done = []
    await core.tenancy.delete_namespace("acme", "orders", force=True, progress=lambda *step: done.append(step))
    assert done == [(1, 1)]
    assert await core.tenancy.namespaces("acme") == []
    assert await core.metadata.children("/cursors/acme/orders/t/0") == []
    assert (await users.get("u")).permissions == (Permission("public", "default"),)
    # Re-created, it starts empty.
    await core.tenancy.create_namespace("acme", "orders")
    assert await core.registry.list_topics("acme", "orders") == []


async def test_the_default_tenant_and_namespace_stay(core):
    with pytest.raises(Reserved):
        await core.tenancy.delete_namespace("public", "default")
    with pytest.raises(Reserved):
        await core.tenancy.delete_tenant("public")


@pytest.mark.parametrize("doc, reason", [
    ({"max_topics": -1}, "max_topics"), ({"retention_ms": "1h"}, "retention_ms"), ({"colour": 1}, "unknown"),
    ({"backlog_quota_action": "explode"}, "backlog_quota_action"), ({"default_partitions": 0}, "default_partitions"),
    ({"max_topics": True}, "max_topics"),
])
def test_bad_policies_are_refused_with_the_reason(doc, reason):
    with pytest.raises(InvalidConfig, match=reason):
        NamespacePolicies.from_doc(doc)


async def test_max_topics_refuses_one_more(core):
    await core.tenancy.create_tenant("acme")
    await core.tenancy.create_namespace("acme", "small", NamespacePolicies(max_topics=2))
    for topic in ("a", "b"):
        await core.create_topic(TopicName("acme", "small", topic), 1)
    with pytest.raises(PolicyViolation, match="maximum of 2"):
        await core.create_topic(TopicName("acme", "small", "c"), 1)


async def test_namespace_retention_applies_to_topics_without_their_own_and_follows_changes(core):
    await core.tenancy.create_tenant("acme")
    await core.tenancy.create_namespace("acme", "kept", NamespacePolicies(retention_ms=60_000))
    plain, own = TopicName("acme", "kept", "plain"), TopicName("acme", "kept", "own")
    await core.create_topic(plain, 1)
    await core.create_topic(own, 1, {"retention.ms": "5000"})
    assert (await core.partition(plain, 0)).config.retention_ms == 60_000
    assert (await core.partition(own, 0)).config.retention_ms == 5000
    await core.tenancy.policies.put("acme", "kept", NamespacePolicies(retention_ms=120_000))
    partition = await core.partition(plain, 0)
    await eventually(lambda: partition.config.retention_ms == 120_000)
    assert (await core.partition(own, 0)).config.retention_ms == 5000


async def test_one_meter_per_namespace_counts_what_is_stored_and_read(core):
    await core.tenancy.create_tenant("acme")
    await core.tenancy.create_namespace("acme", "m")
    name = TopicName("acme", "m", "t")
    await core.create_topic(name, 2)
    first, second = await core.partition(name, 0), await core.partition(name, 1)
    assert first.meter is second.meter is core.meters.of("acme", "m")
    stored = batch_of([b"x", b"y", b"z"])
    await first.append(stored)
    await second.append(batch_of([b"w"]))
    assert (first.meter.published_messages, first.meter.published_bytes) == (4, len(stored) + len(batch_of([b"w"])))
    read = await first.read(0, 1 << 20)
    assert first.meter.dispatched_bytes == len(read.records)


async def test_a_publish_rate_limit_is_shared_and_follows_the_policy(core):
    await core.tenancy.create_tenant("acme")
    await core.tenancy.create_namespace("acme", "r", NamespacePolicies(publish_rate_messages=100))
    name = TopicName("acme", "r", "t")
    await core.create_topic(name, 1)
    partition = await core.partition(name, 0)
    meter = partition.meter
    assert meter.publish_delay_s() == 0
    await partition.append(batch_of([b"m"] * 60))
    assert meter.publish_delay_s() == pytest.approx(0.5, abs=0.1)   # 60 taken, 10 in the bucket: 50 owed
    await core.tenancy.policies.put("acme", "r", NamespacePolicies())
    await eventually(lambda: meter.publish_limit is None)
    assert meter.publish_delay_s() == 0


async def test_deleting_a_tenant_removes_the_grants_on_every_namespace_of_it(core) -> None:
    from core.auth import Permission, UserStore
    users = UserStore(core.metadata)
    await core.tenancy.create_tenant("gone")
    await users.put_user("u", "p", iterations=1, permissions=[Permission("gone", "*"), Permission("public", "default")])
    await core.tenancy.delete_tenant("gone")
    assert (await users.get("u")).permissions == (Permission("public", "default"),)

"""Grants (core/access.py) in the Kafka handlers: a user's configure / write / read patterns on its
namespace allow the Kafka operations GRANTED_BY maps to them, ACL bindings keep precedence, and a
change applies to the next request."""

from __future__ import annotations

import asyncio

from core.access import Action
from core.acl import Operation, PatternType, ResourceType
from core.auth import Permission, UserStore
from protocols.kafka.authorization import GRANTED_BY, SUPPORTED_OPERATIONS
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.handlers import find_coordinator, init_producer_id, join_group, metadata, produce

from test_authorization_enforcement import broker, call, create_topic, deny, partition_codes, produce_request

__all__ = ["broker", "core"]   # the fixtures: a core on temporary storage, a broker with SASL on


def test_the_table_covers_every_operation_kafka_can_ask_about() -> None:
    asked = {(resource_type, operation) for resource_type, operations in SUPPORTED_OPERATIONS.items()
             for operation in operations}
    assert asked == set(GRANTED_BY)
    # a grant never opens the cluster
    assert not any(GRANTED_BY[key] for key in asked if key[0] is ResourceType.CLUSTER)


async def grant(on_core, **patterns: str) -> None:
    users = UserStore(on_core.metadata)
    await users.put_user("alice", "secret", iterations=1, permissions=[Permission("public", "default", **patterns)])
    await on_core.access.refresh("alice")


async def produce_codes(broker, *topics: str) -> dict:
    response = await call(broker, produce, 8, produce_request(*((topic, 1) for topic in topics)))
    return partition_codes(response, "responses", "partition_responses")


async def test_a_write_pattern_allows_produce_to_the_topics_it_matches(broker) -> None:
    await create_topic(broker, "orders")
    await create_topic(broker, "audit")
    await grant(broker.core, configure="^$", write="^ord", read="^$")
    assert await produce_codes(broker, "orders", "audit") == {
        ("orders", 0): ErrorCode.NONE, ("audit", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    # WRITE on some topic lets an idempotent producer start (as Kafka 2.8's WRITE ACL does)
    response = await call(broker, init_producer_id, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                        "producer_id": -1, "producer_epoch": -1})
    assert response.error_code == ErrorCode.NONE


async def test_a_deny_binding_beats_a_grant(broker) -> None:
    await create_topic(broker, "orders")
    await grant(broker.core)
    await deny(broker, ResourceType.TOPIC, "orders", Operation.WRITE)
    assert await produce_codes(broker, "orders") == {("orders", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}


async def test_the_default_grant_of_a_user_stored_without_grants_does_not_count_for_kafka(broker) -> None:
    await create_topic(broker, "orders")
    await UserStore(broker.core.metadata).put_user("alice", "secret", iterations=1)
    assert await produce_codes(broker, "orders") == {("orders", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}


async def test_configure_creates_topics_and_read_opens_the_group(broker) -> None:
    await grant(broker.core, configure=".*", write="^$", read="^billing-")
    response = await call(broker, metadata, 9, {"topics": [{"name": "fresh"}], "allow_auto_topic_creation": True,
                                                "include_cluster_authorized_operations": False,
                                                "include_topic_authorized_operations": False})
    assert [t.error_code for t in response.topics] == [ErrorCode.NONE]
    found = await call(broker, find_coordinator, 3, {"key": "billing-app", "key_type": 0})
    assert found.error_code == ErrorCode.NONE
    refused = await call(broker, join_group, 5, {"group_id": "other", "session_timeout_ms": 10000,
                                                 "rebalance_timeout_ms": 10000, "member_id": "",
                                                 "group_instance_id": None, "protocol_type": "consumer",
                                                 "protocols": [{"name": "range", "metadata": b""}]})
    assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


async def test_a_change_made_by_another_process_applies_through_the_watch(broker) -> None:
    await create_topic(broker, "orders")
    await grant(broker.core)
    assert await produce_codes(broker, "orders") == {("orders", 0): ErrorCode.NONE}
    # written to the store directly, as another gateway process would: no refresh here
    await UserStore(broker.core.metadata).update(
        "alice", lambda doc: doc.update(permissions=[Permission("public", "default", write="^$").to_doc()]))
    for _ in range(100):
        if await produce_codes(broker, "orders") != {("orders", 0): ErrorCode.NONE}:
            break
        await asyncio.sleep(0.02)
    assert await produce_codes(broker, "orders") == {("orders", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_grant_patterns_have_a_kafka_form_only_where_kafka_can_say_them() -> None:
    from core.acl import PatternType
    from protocols.kafka.grant_acls import kafka_pattern
    assert kafka_pattern(".*") == (PatternType.LITERAL, "*")
    assert kafka_pattern("^orders$") == (PatternType.LITERAL, "orders")
    assert kafka_pattern("^pay") == (PatternType.PREFIXED, "pay")
    assert [kafka_pattern(p) for p in ("", "^$", "orders", "^a.b", "^(a|b)$")] == [None] * 5


async def test_describe_acls_shows_what_the_namespace_grants_amount_to(broker) -> None:
    from core.acl import AclBindingFilter
    from protocols.kafka.grant_acls import grant_bindings
    await grant(broker.core, configure="^$", write="^orders$", read="(unsayable|regex)")
    bindings = {(b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type, b.entry.principal,
                 b.entry.operation) for b in await grant_bindings(broker.core, "public", "default")}
    assert bindings == {(resource_type, "orders", PatternType.LITERAL, "User:alice", operation)
                        for resource_type, operation in ((ResourceType.TOPIC, Operation.WRITE),
                                                         (ResourceType.TRANSACTIONAL_ID, Operation.WRITE),
                                                         (ResourceType.TRANSACTIONAL_ID, Operation.DESCRIBE))}
    assert AclBindingFilter().matches(next(iter(await grant_bindings(broker.core, "public", "default"))))
    assert await grant_bindings(broker.core, "public", "elsewhere") == []


async def test_describe_acls_answers_the_grants_after_the_stored_bindings(broker) -> None:
    from protocols.kafka.handlers import describe_acls
    from test_authorization_enforcement import ADMIN
    await grant(broker.core, configure="^$", write="^orders$", read="^$")
    await deny(broker, ResourceType.TOPIC, "orders", Operation.WRITE)
    response = await call(broker, describe_acls, 2, {
        "resource_type_filter": 2, "resource_name_filter": "orders", "pattern_type_filter": 3,
        "principal_filter": None, "host_filter": None, "operation": 4, "permission_type": 1}, session=ADMIN)
    assert response.error_code == ErrorCode.NONE
    [resource] = response.resources
    assert [(a.principal, a.permission_type) for a in resource.acls] == [("User:alice", 2), ("User:alice", 3)]


async def test_a_tenant_wide_grant_covers_every_namespace_unless_one_has_its_own(broker) -> None:
    await create_topic(broker, "orders")
    users = UserStore(broker.core.metadata)
    await users.put_user("alice", "secret", iterations=1, permissions=[Permission("public", "*", write="^ord")])
    await broker.core.access.refresh("alice")
    assert await produce_codes(broker, "orders") == {("orders", 0): ErrorCode.NONE}
    await users.put_user("alice", "secret", iterations=1, permissions=[
        Permission("public", "*"), Permission("public", "default", write="^$")])
    await broker.core.access.refresh("alice")
    assert await produce_codes(broker, "orders") == {("orders", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}


async def test_a_role_adds_its_grants_to_the_users_own_and_a_change_of_it_applies(broker) -> None:
    from core.roles import RoleStore
    await create_topic(broker, "orders")
    await create_topic(broker, "audit")
    roles = RoleStore(broker.core.metadata)
    await roles.put("auditors", [Permission("public", "default", configure="^$", write="^audit$", read="^$")])
    await UserStore(broker.core.metadata).put_user(
        "alice", "secret", iterations=1, roles=["auditors"],
        permissions=[Permission("public", "default", configure="^$", write="^orders$", read="^$")])
    assert await produce_codes(broker, "orders", "audit") == {("orders", 0): ErrorCode.NONE,
                                                              ("audit", 0): ErrorCode.NONE}
    await roles.put("auditors", [Permission("public", "default", configure="^$", write="^$", read="^$")])
    for _ in range(100):   # through the watch on the role, as when another process changed it
        if (await produce_codes(broker, "audit"))[("audit", 0)] != ErrorCode.NONE:
            break
        await asyncio.sleep(0.02)
    assert await produce_codes(broker, "orders", "audit") == {
        ("orders", 0): ErrorCode.NONE, ("audit", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_joined_patterns_allow_what_any_of_them_allows() -> None:
    from core.access import NamespaceGrant, _joined
    joined = _joined([Permission("t", "n", configure="", write="^a", read="^$"),
                      Permission("t", "n", configure="^$", write="^b", read="")])
    assert (joined.configure, joined.read) == ("", "")
    grant = NamespaceGrant(joined)
    assert [grant.allows(Action.WRITE, name) for name in ("ax", "bx", "cx")] == [True, True, False]
    assert _joined([Permission("t", "n", write="^a"), Permission("t", "n")]).write == ".*"

"""ACLs through confluent-kafka's (librdkafka's) and kafka-python's admin clients against a real
`gateway serve`.

SASL is off here, so the ACL APIs are allowed to everyone and ACLs are stored, not enforced.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
from kafka import admin as kp

TIMEOUT_S = 15


@pytest.fixture
def admin(gateway_process) -> AdminClient:
    host, port = gateway_process.kafka
    return AdminClient({"bootstrap.servers": f"{host}:{port}", "socket.timeout.ms": 10000})


def binding(name: str, operation: AclOperation, *, pattern=ResourcePatternType.LITERAL,
            permission=AclPermissionType.ALLOW, principal="User:alice", resource=ResourceType.TOPIC) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", operation, permission)


def everything(resource=ResourceType.ANY, name=None, pattern=ResourcePatternType.ANY) -> AclBindingFilter:
    return AclBindingFilter(resource, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)


def key(b: AclBinding) -> tuple:
    return (b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)


def test_confluent_admin_creates_describes_and_deletes_acls(admin: AdminClient) -> None:
    wanted = [binding("orders", AclOperation.READ), binding("ord", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
              binding("*", AclOperation.DESCRIBE, permission=AclPermissionType.DENY, principal="User:*"),
              binding("billing", AclOperation.READ, resource=ResourceType.GROUP)]
    for future in admin.create_acls(wanted, request_timeout=TIMEOUT_S).values():
        assert future.result(TIMEOUT_S) is None

    described = admin.describe_acls(everything(), request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert sorted(map(key, described)) == sorted(map(key, wanted))

    match = everything(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH)
    matched = admin.describe_acls(match, request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert sorted(b.name for b in matched) == ["*", "ord", "orders"]

    topic_filter = everything(ResourceType.TOPIC)
    deleted = admin.delete_acls([topic_filter], request_timeout=TIMEOUT_S)[topic_filter].result(TIMEOUT_S)
    assert sorted(map(key, deleted)) == sorted(map(key, wanted[:3]))
    remaining = admin.describe_acls(everything(), request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert list(map(key, remaining)) == [key(wanted[3])]


def test_confluent_admin_sees_kafkas_error_for_a_misnamed_cluster_resource(admin: AdminClient) -> None:
    bad = binding("my-cluster", AclOperation.ALTER, resource=ResourceType.BROKER)
    future = admin.create_acls([bad], request_timeout=TIMEOUT_S)[bad]
    with pytest.raises(KafkaException, match="The only valid name for the CLUSTER resource is kafka-cluster"):
        future.result(TIMEOUT_S)


def test_kafka_python_admin_creates_describes_and_deletes_acls(gateway_process) -> None:
    host, port = gateway_process.kafka
    client = kp.KafkaAdminClient(bootstrap_servers=f"{host}:{port}", request_timeout_ms=10000)
    try:
        acl = kp.ACL("User:bob", "*", kp.ACLOperation.WRITE, kp.ACLPermissionType.ALLOW,
                     kp.ResourcePattern(kp.ResourceType.TOPIC, "pay", kp.ACLResourcePatternType.PREFIXED))
        created = client.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1

        any_filter = kp.ACLFilter(None, None, kp.ACLOperation.ANY, kp.ACLPermissionType.ANY,
                                  kp.ResourcePatternFilter(kp.ResourceType.ANY, None, kp.ACLResourcePatternType.ANY))
        acls, error = client.describe_acls(any_filter)
        assert error.errno == 0
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in acls] == [
            ("User:bob", kp.ACLOperation.WRITE, "pay")]

        [(_, deleted, delete_error)] = client.delete_acls([any_filter])
        assert delete_error.errno == 0       # kafka-python's NoError
        assert [d.principal for d in deleted] == ["User:bob"]
        assert client.describe_acls(any_filter)[0] == []
    finally:
        client.close()

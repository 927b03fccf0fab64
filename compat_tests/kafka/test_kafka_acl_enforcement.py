"""ACLs enforced against real clients: a gateway with SASL PLAIN on, users admin (a super user),
alice, bob and carol in one tenant. The admin creates ACLs with confluent-kafka's AdminClient; the
others then produce, consume, join groups, read metadata and create topics with kafka-python and
confluent-kafka, and are allowed or refused as a Kafka 2.8 broker would allow or refuse them.

ACLs accumulate in the tenant for the whole module, so every test uses names of its own.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import TopicAuthorizationFailedError

TIMEOUT_S = 10
USERS = ("admin", "alice", "bob", "carol")
CONFIG = '[kafka]\nsasl_mechanisms = "PLAIN"\nsuper_users = "User:admin"\n' + "".join(
    f'\n[[users]]\nname = "{user}"\npassword = "{user}-secret"\ntenant = "acme"\nnamespace = "shop"\n'
    for user in USERS)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    tmp = tmp_path_factory.mktemp("acl-enforcement")
    config = tmp / "gateway.toml"
    config.write_text(CONFIG)
    process = start_gateway(tmp, "--config", str(config))
    yield process
    process.stop()


def confluent(gateway, user: str, **extra) -> dict:
    host, port = gateway.kafka
    return {"bootstrap.servers": f"{host}:{port}", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-secret", **extra}


def kafka_python(gateway, user: str) -> dict:
    host, port = gateway.kafka
    return dict(bootstrap_servers=f"{host}:{port}", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                sasl_plain_username=user, sasl_plain_password=f"{user}-secret", request_timeout_ms=TIMEOUT_S * 1000)


@pytest.fixture(scope="module")
def admin(gateway) -> AdminClient:
    return AdminClient(confluent(gateway, "admin"))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def grant(admin: AdminClient, user: str, resource: ResourceType, name: str, operation: AclOperation, *,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL,
          permission: AclPermissionType = AclPermissionType.ALLOW) -> None:
    binding = AclBinding(resource, name, pattern, f"User:{user}", "*", operation, permission)
    for future in admin.create_acls([binding], request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)


def create_topics(admin: AdminClient, *names: str) -> None:
    for future in admin.create_topics([NewTopic(name, 1, 1) for name in names],
                                      request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)


def produce_as_admin(gateway, topic: str, value: bytes) -> None:
    producer = Producer(confluent(gateway, "admin"))
    producer.produce(topic, value)
    assert producer.flush(TIMEOUT_S) == 0


def delivery_errors(gateway, user: str, topic: str, **extra) -> list:
    """Produce one message as `user` with confluent-kafka: its delivery error, or None."""
    delivered: list = []
    producer = Producer(confluent(gateway, user, **{"message.timeout.ms": 5000}, **extra))
    producer.produce(topic, b"v", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(TIMEOUT_S)
    return delivered


def fatal_error(gateway, user: str, topic: str, **extra) -> KafkaError:
    """Produce one message as `user` with confluent-kafka, expecting the producer as a whole to
    fail: the fatal error its poll raises."""
    producer = Producer(confluent(gateway, user, **{"message.timeout.ms": 5000}, **extra))
    producer.produce(topic, b"v")
    deadline = time.monotonic() + TIMEOUT_S
    with pytest.raises(KafkaException) as caught:
        while time.monotonic() < deadline:
            producer.poll(0.2)
    return caught.value.args[0]


def test_produce_needs_write_on_the_topic(gateway, admin) -> None:
    writable, readonly = unique("w"), unique("r")
    create_topics(admin, writable, readonly)
    grant(admin, "alice", ResourceType.TOPIC, writable, AclOperation.WRITE)
    grant(admin, "alice", ResourceType.TOPIC, readonly, AclOperation.DESCRIBE)
    producer = KafkaProducer(enable_idempotence=False, max_block_ms=TIMEOUT_S * 1000, retries=0,
                             **kafka_python(gateway, "alice"))
    try:
        assert producer.send(writable, b"ok").get(timeout=TIMEOUT_S).offset == 0
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(readonly, b"no").get(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=5)
    delivered = delivery_errors(gateway, "alice", readonly)
    assert [err.code() for err in delivered] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # Kafka 2.8 (KIP-679): WRITE on some topic is enough for an idempotent producer to start.
    assert delivery_errors(gateway, "alice", writable, **{"enable.idempotence": True}) == [None]


def test_consume_needs_read_on_the_topic(gateway, admin) -> None:
    topic = unique("c")
    create_topics(admin, topic)
    produce_as_admin(gateway, topic, b"payload")
    grant(admin, "alice", ResourceType.TOPIC, topic, AclOperation.READ)
    grant(admin, "bob", ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    partition = TopicPartition(topic, 0)

    alice = KafkaConsumer(**kafka_python(gateway, "alice"))
    alice.assign([partition])
    alice.seek_to_beginning(partition)
    received: list = []
    deadline = time.monotonic() + TIMEOUT_S
    while not received and time.monotonic() < deadline:
        received = [m.value for batch in alice.poll(timeout_ms=500).values() for m in batch]
    alice.close()
    assert received == [b"payload"]

    bob = KafkaConsumer(**kafka_python(gateway, "bob"))
    bob.assign([partition])
    bob.seek(partition, 0)
    deadline = time.monotonic() + TIMEOUT_S
    with pytest.raises(TopicAuthorizationFailedError):
        while time.monotonic() < deadline:
            assert bob.poll(timeout_ms=500) == {}
    bob.close()


def poll_until(consumer: Consumer, accept) -> object:
    deadline = time.monotonic() + 2 * TIMEOUT_S
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and accept(message):
            return message
    return None


def test_consumer_group_is_refused_by_a_group_acl(gateway, admin) -> None:
    topic, team = unique("g"), unique("team")
    create_topics(admin, topic)
    produce_as_admin(gateway, topic, b"in-group")
    grant(admin, "alice", ResourceType.TOPIC, topic, AclOperation.READ)
    grant(admin, "alice", ResourceType.GROUP, team, AclOperation.READ, pattern=ResourcePatternType.PREFIXED)
    grant(admin, "alice", ResourceType.GROUP, f"{team}-blocked", AclOperation.READ,
          permission=AclPermissionType.DENY)

    def consumer(group: str) -> Consumer:
        c = Consumer(confluent(gateway, "alice", **{"group.id": group, "auto.offset.reset": "earliest",
                                                    "session.timeout.ms": 6000}))
        c.subscribe([topic])
        return c

    allowed = consumer(f"{team}-ok")
    message = poll_until(allowed, lambda m: m.error() is None)
    allowed.close()
    assert message is not None and message.value() == b"in-group"

    blocked = consumer(f"{team}-blocked")
    error = poll_until(blocked, lambda m: m.error() is not None)
    blocked.close()
    assert error is not None and error.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_metadata_hides_topics_and_refuses_named_ones_whether_or_not_they_exist(gateway, admin) -> None:
    visible, hidden, missing = unique("v"), unique("h"), unique("m")
    create_topics(admin, visible, hidden)
    grant(admin, "bob", ResourceType.TOPIC, visible, AclOperation.DESCRIBE)
    bob = AdminClient(confluent(gateway, "bob"))
    listed = bob.list_topics(timeout=TIMEOUT_S).topics
    assert visible in listed and hidden not in listed
    for name in (hidden, missing):
        named = bob.list_topics(topic=name, timeout=TIMEOUT_S).topics[name]
        assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert named.partitions == {}
    assert missing not in admin.list_topics(timeout=TIMEOUT_S).topics   # not auto-created either


def test_create_topics_needs_create(gateway, admin) -> None:
    prefix = unique("bob")
    bob = AdminClient(confluent(gateway, "bob"))
    refused = bob.create_topics([NewTopic(f"{prefix}-a", 1, 1)], request_timeout=TIMEOUT_S)[f"{prefix}-a"]
    with pytest.raises(KafkaException) as caught:
        refused.result(TIMEOUT_S)
    assert caught.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(admin, "bob", ResourceType.TOPIC, prefix, AclOperation.CREATE, pattern=ResourcePatternType.PREFIXED)
    bob.create_topics([NewTopic(f"{prefix}-a", 1, 1)], request_timeout=TIMEOUT_S)[f"{prefix}-a"].result(TIMEOUT_S)
    assert f"{prefix}-a" in admin.list_topics(timeout=TIMEOUT_S).topics


def test_deny_beats_a_prefixed_allow(gateway, admin) -> None:
    prefix = unique("shared")
    open_topic, locked = f"{prefix}-open", f"{prefix}-locked"
    create_topics(admin, open_topic, locked)
    grant(admin, "bob", ResourceType.TOPIC, prefix, AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED)
    grant(admin, "bob", ResourceType.TOPIC, locked, AclOperation.WRITE, permission=AclPermissionType.DENY)
    producer = KafkaProducer(enable_idempotence=False, max_block_ms=TIMEOUT_S * 1000, retries=0,
                             **kafka_python(gateway, "bob"))
    try:
        assert producer.send(open_topic, b"ok").get(timeout=TIMEOUT_S).offset == 0
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(locked, b"no").get(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=5)


def test_idempotent_producer_needs_idempotent_write_when_it_may_write_no_topic(gateway, admin) -> None:
    topic = unique("i")
    create_topics(admin, topic)
    grant(admin, "carol", ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    error = fatal_error(gateway, "carol", topic, **{"enable.idempotence": True})
    assert error.fatal() and error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    grant(admin, "carol", ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)   # the cluster
    delivered = delivery_errors(gateway, "carol", topic, **{"enable.idempotence": True})
    assert [err.code() for err in delivered] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]   # past InitProducerId

    grant(admin, "carol", ResourceType.TOPIC, topic, AclOperation.WRITE)
    delivered = delivery_errors(gateway, "carol", topic, **{"enable.idempotence": True})
    assert delivered == [None]

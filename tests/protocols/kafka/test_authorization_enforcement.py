"""ACL enforcement in the Kafka handlers, called directly with an authenticated session on a broker
whose listener has SASL on (so ACLs are enforced), against a real core on temporary storage.

Requests and responses go through the API's compiled codecs at the version under test, so what is
checked is what a client would read.
"""

from __future__ import annotations

import uuid
from types import ModuleType

import pytest

from core.acl import CLUSTER_NAME, AclBinding, Operation, PatternType, Permission, ResourceType
from core.auth import Principal
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, TopicName
from core.records.builder import Record, build_batch
from protocols.kafka.broker import ConnectionSession, KafkaBroker, KafkaSettings
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.handlers import (alter_configs, alter_partition_reassignments, create_partitions, create_topics,
                                      delete_groups, delete_records, delete_topics, describe_cluster,
                                      describe_configs, describe_groups, describe_log_dirs, elect_leaders, fetch,
                                      find_coordinator, heartbeat, incremental_alter_configs, init_producer_id,
                                      join_group, leave_group, list_groups, list_offsets,
                                      list_partition_reassignments, metadata, offset_commit, offset_delete,
                                      offset_fetch, offset_for_leader_epoch, produce, sync_group)
from protocols.kafka.handlers import (alter_replica_log_dirs, alter_user_scram_credentials, describe_producers,
                                      describe_user_scram_credentials)
from protocols.kafka.server import make_broker
from test_admin_handlers import call as wire_call

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
NOT_PROVIDED = -2147483648
ALICE = ConnectionSession(principal=Principal("alice"), client_host="127.0.0.1")
ADMIN = ConnectionSession(principal=Principal("admin"), client_host="127.0.0.1")
# Kafka's AclOperation codes as bits.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 1 << 3, 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 1 << 9, 1 << 10, 1 << 11, 1 << 12
ALL_CLUSTER_OPERATIONS = CREATE | CLUSTER_ACTION | DESCRIBE_CONFIGS | ALTER_CONFIGS | IDEMPOTENT_WRITE | ALTER | DESCRIBE


@pytest.fixture
def broker(core) -> KafkaBroker:
    return make_broker(core, KafkaSettings("127.0.0.1", 9092, sasl_mechanisms=("PLAIN",), super_users=("User:admin",)))


@pytest.fixture
def open_broker(core) -> KafkaBroker:
    """SASL off: ACLs are not enforced."""
    return make_broker(core, KafkaSettings("127.0.0.1", 9092))


async def call(broker: KafkaBroker, module: ModuleType, version: int, body: dict,
               session: ConnectionSession = ALICE) -> Msg:
    return await wire_call(broker, module, version, body, session)


async def allow(broker: KafkaBroker, resource_type: ResourceType, name: str, operation: Operation, *,
                pattern: PatternType = PatternType.LITERAL, permission: Permission = Permission.ALLOW,
                principal: str = "User:alice") -> None:
    binding = AclBinding.of(resource_type, name, pattern, principal, "*", operation, permission)
    assert await broker.authorizer.create_acls(ALICE.principal.tenant, [binding]) == [None]


async def deny(broker: KafkaBroker, resource_type: ResourceType, name: str, operation: Operation, **kwargs) -> None:
    await allow(broker, resource_type, name, operation, permission=Permission.DENY, **kwargs)


async def create_topic(broker: KafkaBroker, name: str, partitions: int = 1) -> None:
    await broker.core.create_topic(TopicName.of(name), partitions)


def count_decisions(broker: KafkaBroker, monkeypatch) -> list:
    decisions = []
    real = broker.authorizer.decide

    async def counting(principal, host, operation, resource_type, name):
        decisions.append((operation, resource_type, name))
        return await real(principal, host, operation, resource_type, name)
    monkeypatch.setattr(broker.authorizer, "decide", counting)
    return decisions


def batch(producer_id: int = -1) -> bytes:
    return bytes(build_batch([Record(1000, key=None, value=b"v")], producer_id=producer_id,
                             producer_epoch=0 if producer_id >= 0 else -1, base_sequence=0 if producer_id >= 0 else -1))


def produce_request(*topics: tuple[str, int], records: bytes | None = None) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": name, "partition_data": [{"index": i, "records": records or batch()} for i in range(partitions)]}
        for name, partitions in topics]}


def partition_codes(response: Msg, topics_key: str, partitions_key: str, name_key: str = "name") -> dict:
    return {(topic[name_key], p.get("index", p.get("partition_index", p.get("partition")))): p.error_code
            for topic in response[topics_key] for p in topic[partitions_key]}


# --- Produce, Fetch, InitProducerId -------------------------------------------------------------


async def test_produce_needs_write_on_the_topic_before_its_existence_is_checked(broker) -> None:
    await create_topic(broker, "orders")
    await create_topic(broker, "secret")
    await allow(broker, ResourceType.TOPIC, "orders", Operation.WRITE)
    response = await call(broker, produce, 8, produce_request(("orders", 1), ("secret", 1), ("ghost", 1)))
    codes = partition_codes(response, "responses", "partition_responses")
    assert codes == {("orders", 0): ErrorCode.NONE, ("secret", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     ("ghost", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}


async def test_produce_decides_once_per_topic_not_per_partition(broker, monkeypatch) -> None:
    await create_topic(broker, "wide", partitions=4)
    await allow(broker, ResourceType.TOPIC, "wide", Operation.WRITE)
    decisions = count_decisions(broker, monkeypatch)
    response = await call(broker, produce, 8, produce_request(("wide", 4)))
    assert set(partition_codes(response, "responses", "partition_responses").values()) == {ErrorCode.NONE}
    assert decisions == [(Operation.WRITE, ResourceType.TOPIC, "wide")]


async def test_produce_with_sasl_off_consults_no_acl(open_broker, monkeypatch) -> None:
    await create_topic(open_broker, "free", partitions=2)
    decisions = count_decisions(open_broker, monkeypatch)
    response = await call(open_broker, produce, 8, produce_request(("free", 2)), ConnectionSession())
    assert set(partition_codes(response, "responses", "partition_responses").values()) == {ErrorCode.NONE}
    assert decisions == []


async def test_idempotent_produce_needs_only_write_on_the_topic_as_in_kafka_2_8(broker) -> None:
    await create_topic(broker, "orders")
    await allow(broker, ResourceType.TOPIC, "orders", Operation.WRITE)
    response = await call(broker, produce, 8, produce_request(("orders", 1), records=batch(producer_id=5)))
    assert partition_codes(response, "responses", "partition_responses") == {("orders", 0): ErrorCode.NONE}


async def test_fetch_needs_read_on_the_topic_before_its_existence_is_checked(broker) -> None:
    await create_topic(broker, "orders")
    await create_topic(broker, "secret")
    await allow(broker, ResourceType.TOPIC, "orders", Operation.READ)
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "topics": [
        {"topic": name, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}
        for name in ("orders", "secret", "ghost")]}
    response = await call(broker, fetch, 11, body)
    assert partition_codes(response, "responses", "partitions", "topic") == {
        ("orders", 0): ErrorCode.NONE, ("secret", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ("ghost", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}


async def test_follower_fetch_needs_cluster_action(broker) -> None:
    await create_topic(broker, "orders")
    await allow(broker, ResourceType.TOPIC, "orders", Operation.READ)
    body = {"replica_id": 1, "max_wait_ms": 0, "min_bytes": 0, "topics": [
        {"topic": "orders", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
    refused = await call(broker, fetch, 11, body)
    assert partition_codes(refused, "responses", "partitions", "topic") == {
        ("orders", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    await allow(broker, ResourceType.CLUSTER, CLUSTER_NAME, Operation.CLUSTER_ACTION)
    allowed = await call(broker, fetch, 11, body)
    assert partition_codes(allowed, "responses", "partitions", "topic") == {("orders", 0): ErrorCode.NONE}


async def test_init_producer_id_needs_idempotent_write_or_write_on_some_topic(broker) -> None:
    body = {"transactional_id": None, "transaction_timeout_ms": 60000}
    refused = await call(broker, init_producer_id, 2, body)
    assert (refused.error_code, refused.producer_id, refused.producer_epoch) == (
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1, -1)
    await allow(broker, ResourceType.TOPIC, "ord", Operation.WRITE, pattern=PatternType.PREFIXED)
    assert (await call(broker, init_producer_id, 2, body)).error_code == ErrorCode.NONE   # KIP-679


async def test_init_producer_id_with_idempotent_write_on_the_cluster(broker) -> None:
    await allow(broker, ResourceType.CLUSTER, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE)
    response = await call(broker, init_producer_id, 2, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert response.error_code == ErrorCode.NONE and response.producer_id >= 0


async def test_init_producer_id_write_on_a_topic_does_not_count_under_a_covering_deny(broker) -> None:
    await allow(broker, ResourceType.TOPIC, "orders", Operation.WRITE)
    await deny(broker, ResourceType.TOPIC, "ord", Operation.WRITE, pattern=PatternType.PREFIXED)
    response = await call(broker, init_producer_id, 2, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def test_init_producer_id_super_user_is_allowed(broker) -> None:
    response = await call(broker, init_producer_id, 2, {"transactional_id": None, "transaction_timeout_ms": 60000},
                          ADMIN)
    assert response.error_code == ErrorCode.NONE


# --- Metadata --------------------------------------------------------------------------------------


async def test_metadata_all_topics_leaves_out_topics_not_describable(broker) -> None:
    for name in ("orders", "secret"):
        await create_topic(broker, name)
    await allow(broker, ResourceType.TOPIC, "orders", Operation.READ)   # READ implies DESCRIBE
    response = await call(broker, metadata, 9, {"topics": None})
    assert [topic.name for topic in response.topics] == ["orders"]


async def test_metadata_named_topic_not_describable_does_not_reveal_whether_it_exists(broker) -> None:
    await create_topic(broker, "secret")
    response = await call(broker, metadata, 10, {"topics": [{"name": "secret"}, {"name": "ghost"}],
                                                 "allow_auto_topic_creation": True})
    answers = [(t.name, t.error_code, t.is_internal, t.partitions, t.topic_id) for t in response.topics]
    assert answers == [(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, False, [], uuid.UUID(int=0))
                       for name in ("secret", "ghost")]
    assert await broker.core.registry.list_topics(DEFAULT_TENANT, DEFAULT_NAMESPACE) == ["secret"]   # ghost not created


async def test_metadata_auto_creation_needs_create_on_the_topic_or_the_cluster(broker) -> None:
    await allow(broker, ResourceType.TOPIC, "new", Operation.DESCRIBE, pattern=PatternType.PREFIXED)
    body = {"topics": [{"name": "new-a"}], "allow_auto_topic_creation": True}
    refused = await call(broker, metadata, 9, body)
    assert [(t.name, t.error_code) for t in refused.topics] == [("new-a", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    assert await broker.core.registry.list_topics(DEFAULT_TENANT, DEFAULT_NAMESPACE) == []
    await allow(broker, ResourceType.TOPIC, "new-a", Operation.CREATE)
    created = await call(broker, metadata, 9, body)
    assert [(t.name, t.error_code, len(t.partitions)) for t in created.topics] == [("new-a", ErrorCode.NONE, 1)]
    await allow(broker, ResourceType.CLUSTER, CLUSTER_NAME, Operation.CREATE)
    other = await call(broker, metadata, 9, {"topics": [{"name": "new-b"}], "allow_auto_topic_creation": True})
    assert [(t.name, t.error_code) for t in other.topics] == [("new-b", ErrorCode.NONE)]


async def test_metadata_reports_authorized_operations_from_the_acls(broker) -> None:
    await create_topic(broker, "orders")
    await allow(broker, ResourceType.TOPIC, "orders", Operation.READ)
    body = {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": True, "include_topic_authorized_operations": True}
    alice = await call(broker, metadata, 8, body)
    assert alice.topics[0].topic_authorized_operations == READ | DESCRIBE
    assert alice.cluster_authorized_operations == 0   # no DESCRIBE on the cluster
    admin = await call(broker, metadata, 8, body, ADMIN)
    assert admin.cluster_authorized_operations == ALL_CLUSTER_OPERATIONS
    unasked = await call(broker, metadata, 8, {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False})
    assert (unasked.topics[0].topic_authorized_operations, unasked.cluster_authorized_operations) == (
        NOT_PROVIDED, NOT_PROVIDED)


async def test_metadata_with_sasl_off_reports_every_supported_operation(open_broker) -> None:
    await create_topic(open_broker, "orders")
    body = {"topics": [{"name": "orders"}], "include_cluster_authorized_operations": True,
            "include_topic_authorized_operations": True}
    response = await call(open_broker, metadata, 8, body, ConnectionSession())
    assert response.topics[0].topic_authorized_operations == (
        READ | WRITE | CREATE | DESCRIBE | DELETE | ALTER | DESCRIBE_CONFIGS | ALTER_CONFIGS)
    assert response.cluster_authorized_operations == ALL_CLUSTER_OPERATIONS


# --- ListOffsets, OffsetForLeaderEpoch -------------------------------------------------------------


async def test_list_offsets_needs_describe_on_the_topic(broker) -> None:
    for name in ("orders", "secret"):
        await create_topic(broker, name)
    await allow(broker, ResourceType.TOPIC, "orders", Operation.DESCRIBE)
    body = {"replica_id": -1, "topics": [{"name": name, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                                         for name in ("orders", "secret")]}
    response = await call(broker, list_offsets, 5, body)
    assert [(t.name, p.error_code, p.offset) for t in response.topics for p in t.partitions] == [
        ("orders", ErrorCode.NONE, 0), ("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)]


async def test_offset_for_leader_epoch_needs_describe_or_cluster_action(broker) -> None:
    await create_topic(broker, "orders")
    body = {"topics": [{"topic": "orders", "partitions": [{"partition": 0, "leader_epoch": 0}]}]}
    refused = await call(broker, offset_for_leader_epoch, 3, body)
    assert partition_codes(refused, "topics", "partitions", "topic") == {
        ("orders", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    await allow(broker, ResourceType.CLUSTER, CLUSTER_NAME, Operation.CLUSTER_ACTION)
    allowed = await call(broker, offset_for_leader_epoch, 3, body)
    assert partition_codes(allowed, "topics", "partitions", "topic") == {("orders", 0): ErrorCode.NONE}


# --- topic administration --------------------------------------------------------------------------


def new_topic(name: str) -> dict:
    return {"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}


async def test_create_topics_needs_create_and_describe_configs_to_see_the_result(broker) -> None:
    await allow(broker, ResourceType.TOPIC, "mine", Operation.CREATE, pattern=PatternType.PREFIXED)
    await allow(broker, ResourceType.TOPIC, "mine-seen", Operation.DESCRIBE_CONFIGS)
    body = {"topics": [new_topic("mine-seen"), new_topic("mine-blind"), new_topic("theirs")], "timeout_ms": 5000}
    response = await call(broker, create_topics, 7, body)
    results = {r.name: r for r in response.topics}
    seen, blind, theirs = results["mine-seen"], results["mine-blind"], results["theirs"]
    assert (seen.error_code, seen.topic_config_error_code, seen.num_partitions) == (ErrorCode.NONE, ErrorCode.NONE, 2)
    assert seen.configs and seen.topic_id != uuid.UUID(int=0)
    assert (blind.error_code, blind.topic_config_error_code, blind.num_partitions, blind.replication_factor,
            blind.configs, blind.topic_id) == (ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1, [],
                                               uuid.UUID(int=0))
    assert (theirs.error_code, theirs.error_message, theirs.topic_config_error_code) == (
        ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    assert sorted(await broker.core.registry.list_topics(DEFAULT_TENANT, DEFAULT_NAMESPACE)) == ["mine-blind", "mine-seen"]


async def test_create_topics_with_create_on_the_cluster_and_duplicates_checked_first(broker) -> None:
    await allow(broker, ResourceType.CLUSTER, CLUSTER_NAME, Operation.CREATE)
    body = {"topics": [new_topic("a"), new_topic("dup"), new_topic("dup")], "timeout_ms": 5000}
    response = await call(broker, create_topics, 4, body)
    assert [(r.name, r.error_code) for r in response.topics] == [
        ("a", ErrorCode.NONE), ("dup", ErrorCode.INVALID_REQUEST), ("dup", ErrorCode.INVALID_REQUEST)]


async def test_delete_topics_needs_delete_whether_or_not_the_topic_exists(broker) -> None:
    await create_topic(broker, "doomed")
    await create_topic(broker, "kept")
    await allow(broker, ResourceType.TOPIC, "doomed", Operation.DELETE)
    response = await call(broker, delete_topics, 5, {"topic_names": ["doomed", "kept", "ghost"], "timeout_ms": 5000})
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("doomed", ErrorCode.NONE), ("kept", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("ghost", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]


async def test_delete_topics_by_id_without_describe_hides_the_name(broker) -> None:
    await create_topic(broker, "hidden")
    info = await broker.core.registry.get_topic(TopicName.of("hidden"))
    topic_id = uuid.UUID(hex=info.topic_id)
    response = await call(broker, delete_topics, 6, {"topics": [{"name": None, "topic_id": topic_id}],
                                                     "timeout_ms": 5000})
    assert [(r.name, r.topic_id, r.error_code) for r in response.responses] == [
        (None, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]


async def test_delete_records_needs_delete_on_the_topic(broker) -> None:
    await create_topic(broker, "logs")
    body = {"topics": [{"name": "logs", "partitions": [{"partition_index": 0, "offset": -1}]}], "timeout_ms": 5000}
    refused = await call(broker, delete_records, 1, body)
    assert [(p.error_code, p.low_watermark) for t in refused.topics for p in t.partitions] == [
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)]
    await allow(broker, ResourceType.TOPIC, "logs", Operation.DELETE)
    allowed = await call(broker, delete_records, 1, body)
    assert [p.error_code for t in allowed.topics for p in t.partitions] == [ErrorCode.NONE]


async def test_create_partitions_needs_alter_on_the_topic(broker) -> None:
    await create_topic(broker, "grow")
    body = {"topics": [{"name": "grow", "count": 2, "assignments": None}, {"name": "ghost", "count": 2,
                                                                          "assignments": None}],
            "timeout_ms": 5000, "validate_only": False}
    await allow(broker, ResourceType.TOPIC, "grow", Operation.ALTER)
    response = await call(broker, create_partitions, 2, body)
    assert [(r.name, r.error_code, r.error_message) for r in response.results] == [
        ("grow", ErrorCode.NONE, None),
        ("ghost", ErrorCode.TOPIC_AUTHORIZATION_FAILED, "The topic authorization is failed.")]


# --- configs ---------------------------------------------------------------------------------------


async def test_describe_configs_needs_describe_configs_on_the_topic_or_the_cluster(broker) -> None:
    await create_topic(broker, "orders")
    body = {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": "orders", "configuration_keys": None},
                          {"resource_type": BROKER_RESOURCE, "resource_name": "0", "configuration_keys": None}]}
    refused = await call(broker, describe_configs, 3, body)
    assert [(r.error_code, r.error_message, r.configs) for r in refused.results] == [
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.", []),
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", [])]
    await allow(broker, ResourceType.TOPIC, "orders", Operation.ALTER_CONFIGS)   # implies DESCRIBE_CONFIGS
    await allow(broker, ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE_CONFIGS)
    allowed = await call(broker, describe_configs, 3, body)
    assert [r.error_code for r in allowed.results] == [ErrorCode.NONE, ErrorCode.NONE]
    assert all(r.configs for r in allowed.results)


async def test_alter_configs_needs_alter_configs_and_answers_no_message(broker) -> None:
    await create_topic(broker, "orders")
    body = {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": "orders",
                           "configs": [{"name": "retention.ms", "value": "1000"}]},
                          {"resource_type": BROKER_RESOURCE, "resource_name": "", "configs": []}],
            "validate_only": False}
    response = await call(broker, alter_configs, 1, body)
    assert [(r.error_code, r.error_message) for r in response.responses] == [
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None), (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)]
    info = await broker.core.registry.get_topic(TopicName.of("orders"))
    assert "retention.ms" not in info.configs


async def test_incremental_alter_configs_needs_alter_configs_on_the_topic(broker) -> None:
    await create_topic(broker, "orders")
    body = {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": "orders",
                           "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}]}],
            "validate_only": False}
    refused = await call(broker, incremental_alter_configs, 1, body)
    assert [(r.error_code, r.error_message) for r in refused.responses] == [(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)]
    await allow(broker, ResourceType.TOPIC, "orders", Operation.ALTER_CONFIGS)
    allowed = await call(broker, incremental_alter_configs, 1, body)
    assert [r.error_code for r in allowed.responses] == [ErrorCode.NONE]


# --- cluster-wide APIs -----------------------------------------------------------------------------


async def test_alter_partition_reassignments_needs_alter_on_the_cluster(broker) -> None:
    await create_topic(broker, "orders")
    body = {"timeout_ms": 5000, "topics": [{"name": "orders", "partitions": [{"partition_index": 0,
                                                                             "replicas": [0]}]}]}
    refused = await call(broker, alter_partition_reassignments, 0, body)
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [p.error_code for r in refused.responses for p in r.partitions] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    await allow(broker, ResourceType.CLUSTER, CLUSTER_NAME, Operation.ALTER)
    allowed = await call(broker, alter_partition_reassignments, 0, body)
    assert allowed.error_code == ErrorCode.NONE


async def test_list_partition_reassignments_needs_describe_on_the_cluster(broker) -> None:
    body = {"timeout_ms": 5000, "topics": [{"name": "orders", "partition_indexes": [0, 1]}]}
    refused = await call(broker, list_partition_reassignments, 0, body)
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in refused.topics] == [("orders", [0, 1])]
    await allow(broker, ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE)
    allowed = await call(broker, list_partition_reassignments, 0, body)
    assert (allowed.error_code, allowed.topics) == (ErrorCode.NONE, [])


async def test_elect_leaders_needs_alter_on_the_cluster(broker) -> None:
    await create_topic(broker, "orders")
    body = {"election_type": 0, "topic_partitions": [{"topic": "orders", "partition_id": [0, 0]}], "timeout_ms": 5000}
    refused = await call(broker, elect_leaders, 1, body)
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [(r.topic, p.partition_id, p.error_code, p.error_message) for r in refused.replica_election_results
            for p in r.partition_result] == [("orders", 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)]
    allowed = await call(broker, elect_leaders, 1, body, ADMIN)
    assert allowed.error_code == ErrorCode.NONE


async def test_describe_log_dirs_without_describe_on_the_cluster_lists_nothing(broker) -> None:
    await create_topic(broker, "orders")
    refused = await call(broker, describe_log_dirs, 1, {"topics": None})
    assert refused.results == []
    allowed = await call(broker, describe_log_dirs, 1, {"topics": None}, ADMIN)
    assert [t.name for r in allowed.results for t in r.topics] == ["orders"]


async def test_describe_cluster_reports_authorized_operations_only_with_describe(broker) -> None:
    refused = await call(broker, describe_cluster, 0, {"include_cluster_authorized_operations": True})
    assert refused.cluster_authorized_operations == 0
    await allow(broker, ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE)
    await allow(broker, ResourceType.CLUSTER, CLUSTER_NAME, Operation.CREATE)
    allowed = await call(broker, describe_cluster, 0, {"include_cluster_authorized_operations": True})
    assert allowed.cluster_authorized_operations == DESCRIBE | CREATE


# --- groups ----------------------------------------------------------------------------------------


async def test_find_coordinator_needs_describe_on_the_group_or_transactional_id(broker) -> None:
    group = await call(broker, find_coordinator, 2, {"key": "billing", "key_type": 0})
    assert (group.error_code, group.error_message, group.node_id, group.host, group.port) == (
        ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", -1, "", -1)
    txn = await call(broker, find_coordinator, 2, {"key": "tx", "key_type": 1})
    assert (txn.error_code, txn.error_message) == (
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed.")
    await allow(broker, ResourceType.GROUP, "billing", Operation.READ)
    allowed = await call(broker, find_coordinator, 2, {"key": "billing", "key_type": 0})
    assert (allowed.error_code, allowed.node_id) == (ErrorCode.NONE, 0)


async def test_group_membership_requests_need_read_on_the_group(broker) -> None:
    join = await call(broker, join_group, 5, {"group_id": "g", "session_timeout_ms": 10000,
                                              "rebalance_timeout_ms": 10000, "member_id": "m",
                                              "protocol_type": "consumer", "protocols": []})
    assert (join.error_code, join.member_id, join.generation_id) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, "", -1)
    sync = await call(broker, sync_group, 3, {"group_id": "g", "generation_id": 1, "member_id": "m",
                                              "assignments": []})
    assert sync.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    beat = await call(broker, heartbeat, 3, {"group_id": "g", "generation_id": 1, "member_id": "m"})
    assert beat.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    leave = await call(broker, leave_group, 3, {"group_id": "g", "members": [{"member_id": "m"}]})
    assert (leave.error_code, leave.members) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    await allow(broker, ResourceType.GROUP, "g", Operation.READ)
    beat = await call(broker, heartbeat, 3, {"group_id": "g", "generation_id": 1, "member_id": "m"})
    assert beat.error_code != ErrorCode.GROUP_AUTHORIZATION_FAILED


async def test_offset_commit_needs_read_on_the_group_then_on_each_topic(broker) -> None:
    await create_topic(broker, "orders")
    await create_topic(broker, "secret")
    body = {"group_id": "g", "generation_id": -1, "member_id": "", "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": None}]}
        for name in ("orders", "secret", "ghost")]}
    no_group = await call(broker, offset_commit, 7, body)
    assert set(partition_codes(no_group, "topics", "partitions").values()) == {ErrorCode.GROUP_AUTHORIZATION_FAILED}
    await allow(broker, ResourceType.GROUP, "g", Operation.READ)
    await allow(broker, ResourceType.TOPIC, "orders", Operation.READ)
    await allow(broker, ResourceType.TOPIC, "ghost", Operation.READ)
    response = await call(broker, offset_commit, 7, body)
    assert partition_codes(response, "topics", "partitions") == {
        ("orders", 0): ErrorCode.NONE, ("secret", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ("ghost", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


async def test_offset_fetch_needs_describe_on_the_group_and_hides_topics_not_describable(broker) -> None:
    for name in ("orders", "secret"):
        await create_topic(broker, name)
    commit = {"group_id": "g", "generation_id": -1, "member_id": "", "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 7, "committed_metadata": ""}]}
        for name in ("orders", "secret")]}
    assert set(partition_codes(await call(broker, offset_commit, 7, commit, ADMIN), "topics", "partitions").values()) \
        == {ErrorCode.NONE}
    named = {"group_id": "g", "topics": [{"name": n, "partition_indexes": [0]} for n in ("orders", "secret")]}
    refused = await call(broker, offset_fetch, 5, named)
    assert (refused.error_code, refused.topics) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    refused_v1 = await call(broker, offset_fetch, 1, named)
    assert set(partition_codes(refused_v1, "topics", "partitions").values()) == {ErrorCode.GROUP_AUTHORIZATION_FAILED}
    await allow(broker, ResourceType.GROUP, "g", Operation.DESCRIBE)
    await allow(broker, ResourceType.TOPIC, "orders", Operation.DESCRIBE)
    response = await call(broker, offset_fetch, 5, named)
    assert [(t.name, p.committed_offset, p.error_code) for t in response.topics for p in t.partitions] == [
        ("orders", 7, ErrorCode.NONE), ("secret", -1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    every = await call(broker, offset_fetch, 5, {"group_id": "g", "topics": None})
    assert [(t.name, p.committed_offset) for t in every.topics for p in t.partitions] == [("orders", 7)]


async def test_describe_groups_needs_describe_and_reports_group_operations(broker) -> None:
    await allow(broker, ResourceType.GROUP, "mine", Operation.READ)
    response = await call(broker, describe_groups, 3, {"groups": ["mine", "theirs"],
                                                       "include_authorized_operations": True})
    assert [(g.group_id, g.error_code, g.authorized_operations) for g in response.groups] == [
        ("mine", ErrorCode.NONE, READ | DESCRIBE), ("theirs", ErrorCode.GROUP_AUTHORIZATION_FAILED, NOT_PROVIDED)]


async def test_list_groups_shows_only_describable_groups_without_describe_on_the_cluster(broker) -> None:
    await create_topic(broker, "orders")
    for group in ("mine", "theirs"):
        commit = {"group_id": group, "generation_id": -1, "member_id": "", "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]}
        await call(broker, offset_commit, 7, commit, ADMIN)
    await allow(broker, ResourceType.GROUP, "mine", Operation.DESCRIBE)
    alice = await call(broker, list_groups, 3, {})
    assert [g.group_id for g in alice.groups] == ["mine"]
    await allow(broker, ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE)
    everything = await call(broker, list_groups, 3, {})
    assert [g.group_id for g in everything.groups] == ["mine", "theirs"]


async def test_delete_groups_needs_delete_on_each_group(broker) -> None:
    await allow(broker, ResourceType.GROUP, "mine", Operation.DELETE)
    response = await call(broker, delete_groups, 1, {"groups_names": ["mine", "theirs"]})
    assert [(r.group_id, r.error_code) for r in response.results] == [
        ("mine", ErrorCode.GROUP_ID_NOT_FOUND), ("theirs", ErrorCode.GROUP_AUTHORIZATION_FAILED)]


async def test_offset_delete_needs_delete_on_the_group_then_read_on_each_topic(broker) -> None:
    for name in ("orders", "secret"):
        await create_topic(broker, name)
    commit = {"group_id": "g", "generation_id": -1, "member_id": "", "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 1}]} for name in ("orders", "secret")]}
    await call(broker, offset_commit, 7, commit, ADMIN)
    body = {"group_id": "g", "topics": [{"name": n, "partitions": [{"partition_index": 0}]}
                                        for n in ("orders", "secret")]}
    refused = await call(broker, offset_delete, 0, body)
    assert (refused.error_code, refused.topics) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    await allow(broker, ResourceType.GROUP, "g", Operation.DELETE)
    await allow(broker, ResourceType.TOPIC, "orders", Operation.READ)
    response = await call(broker, offset_delete, 0, body)
    assert response.error_code == ErrorCode.NONE
    assert partition_codes(response, "topics", "partitions") == {
        ("orders", 0): ErrorCode.NONE, ("secret", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}


async def test_scram_credential_apis_need_cluster_alter_and_describe(broker) -> None:
    upsert = {"name": "zoe", "mechanism": 1, "iterations": 4096, "salt": b"s", "salted_password": b"p" * 32}
    altered = await call(broker, alter_user_scram_credentials, 0, {"deletions": [], "upsertions": [upsert]})
    assert [(r.user, r.error_code) for r in altered.results] == [("zoe", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
    described = await call(broker, describe_user_scram_credentials, 0, {"users": [{"name": "zoe"}]})
    assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert await broker.users.get("zoe") is None

    altered = await call(broker, alter_user_scram_credentials, 0, {"deletions": [], "upsertions": [upsert]}, ADMIN)
    assert [r.error_code for r in altered.results] == [ErrorCode.NONE]
    await allow(broker, ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE)
    described = await call(broker, describe_user_scram_credentials, 0, {"users": [{"name": "zoe"}]})
    assert (described.error_code, [r.error_code for r in described.results]) == (ErrorCode.NONE, [ErrorCode.NONE])


async def test_describe_producers_needs_read_on_the_topic_before_its_existence_shows(broker) -> None:
    await create_topic(broker, "orders")
    body = {"topics": [{"name": "orders", "partition_indexes": [0]}, {"name": "ghost", "partition_indexes": [0]}]}
    refused = await call(broker, describe_producers, 0, body)
    assert [t.partitions[0].error_code for t in refused.topics] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2
    await allow(broker, ResourceType.TOPIC, "orders", Operation.READ)
    await allow(broker, ResourceType.TOPIC, "ghost", Operation.READ)
    allowed = await call(broker, describe_producers, 0, body)
    assert [t.partitions[0].error_code for t in allowed.topics] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


async def test_alter_replica_log_dirs_needs_alter_on_the_cluster(broker) -> None:
    body = {"dirs": [{"path": "/data", "topics": [{"name": "orders", "partitions": [0]}]}]}
    refused = await call(broker, alter_replica_log_dirs, 1, body)
    assert refused.results[0].partitions[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    allowed = await call(broker, alter_replica_log_dirs, 1, body, ADMIN)
    assert allowed.results[0].partitions[0].error_code == ErrorCode.LOG_DIR_NOT_FOUND

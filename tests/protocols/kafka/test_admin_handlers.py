"""The Kafka admin handlers against a real core on a temporary embedded storage.

Every call goes through the wire format both ways: the request is encoded and decoded with the
API's compiled codecs at the version under test, and so is the handler's response, so what is
checked is what a client would read.
"""

from __future__ import annotations

import inspect
import uuid
from types import ModuleType

import pytest

from core.clock import FakeClock
from core.names import TopicName
from core.records.builder import Record, build_batch
from core.service import Core
from protocols.kafka.broker import ConnectionSession, KafkaBroker, KafkaSettings, RequestContext
from protocols.kafka.codec import types as t
from protocols.kafka.codec.compile import Msg, decode_request, encode_response, request_codec, response_codec
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.codec.frames import RequestHeader
from protocols.kafka.handlers import (alter_configs, alter_partition_reassignments, create_partitions, create_topics,
                                      delete_records, delete_topics, describe_cluster, describe_configs,
                                      describe_log_dirs, elect_leaders, incremental_alter_configs,
                                      list_partition_reassignments, offset_for_leader_epoch)
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = \
    1, 2, 3, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LOG_DIR = "/var/lib/gateway-test"


@pytest.fixture
async def broker(tmp_path):
    storage = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    core = Core(storage.metadata, storage.logs, FakeClock())
    await core.start()
    settings = KafkaSettings(host="127.0.0.1", port=9092, cluster_id="test-cluster", log_dir=LOG_DIR)
    yield KafkaBroker(core, settings, [])
    await core.close()
    await storage.close()


async def call(broker: KafkaBroker, module: ModuleType, version: int, body: dict,
               session: ConnectionSession | None = None) -> Msg:
    """Encode `body` as the request, handle it (on a connection that established `session`), and
    return the response as a client decodes it."""
    api = module.API
    encoded = bytearray()
    request_codec(api, version).write(encoded, body)
    request = decode_request(api, version, memoryview(bytes(encoded)))
    ctx = RequestContext(broker, RequestHeader(api.key, version, 7, "test"), session or ConnectionSession())
    response = await module.handle(request, ctx)
    if inspect.isawaitable(response):
        response = await response
    out = bytearray()
    encode_response(api, version, response, out)
    reader = t.Reader(bytes(out))
    decoded = response_codec(api, version).read(reader)
    assert reader.left() == 0
    return decoded


async def create(broker, name: str, partitions: int = 1, configs: dict | None = None) -> None:
    await broker.core.create_topic(TopicName.of(name), partitions, configs)


def new_topic(name: str, partitions: int = -1, replication: int = -1, configs: dict | None = None,
              assignments: dict | None = None) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": replication,
            "assignments": [{"partition_index": p, "broker_ids": b} for p, b in (assignments or {}).items()],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}


async def produce(broker, name: str, index: int, count: int) -> None:
    partition = await broker.core.partition(TopicName.of(name), index)
    await partition.append(build_batch([Record(1000 + i, key=None, value=b"v%d" % i) for i in range(count)]))


# --- CreateTopics -------------------------------------------------------------------------------

async def test_create_topics_v7_creates_and_reports_partitions_configs_and_id(broker) -> None:
    response = await call(broker, create_topics, 7, {"topics": [
        new_topic("orders", 3, 1, {"retention.ms": "1000"})], "timeout_ms": 5000})
    [result] = response.topics
    assert (result.error_code, result.error_message) == (ErrorCode.NONE, None)
    assert (result.num_partitions, result.replication_factor) == (3, 1)
    configs = {c.name: c for c in result.configs}
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("1000", DYNAMIC_TOPIC_CONFIG)
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].config_source) == ("delete", DEFAULT_CONFIG)
    info = await broker.core.registry.get_topic(TopicName.of("orders"))
    assert info.partitions == 3 and info.configs == {"retention.ms": "1000"}
    assert result.topic_id == uuid.UUID(hex=info.topic_id)


async def test_create_topics_minus_one_means_the_broker_defaults(broker) -> None:
    response = await call(broker, create_topics, 4, {"topics": [new_topic("defaults")], "timeout_ms": 5000})
    assert response.topics[0].error_code == ErrorCode.NONE
    assert (await broker.core.registry.get_topic(TopicName.of("defaults"))).partitions == 1


async def test_create_topics_validate_only_creates_nothing(broker) -> None:
    response = await call(broker, create_topics, 5, {"topics": [new_topic("dry", 2)], "timeout_ms": 5000,
                                                     "validate_only": True})
    assert response.topics[0].error_code == ErrorCode.NONE and response.topics[0].num_partitions == 2
    assert await broker.core.registry.list_topics("public", "default") == []


@pytest.mark.parametrize("topic, code, message", [
    (new_topic("x", 1, 3), ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor: 3 larger than available brokers: 1."),
    (new_topic("x", 1, 0), ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."),
    (new_topic("x", 0, 1), ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."),
    (new_topic("bad/name", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION, "illegal topic name"),
    (new_topic("x", configs={"no.such.config": "1"}), ErrorCode.INVALID_CONFIG, "no.such.config"),
    (new_topic("x", configs={"retention.ms": "soon"}), ErrorCode.INVALID_CONFIG, "retention.ms"),
    (new_topic("x", configs={"retention.ms": None}), ErrorCode.INVALID_REQUEST,
     "Null value not supported for topic configs : retention.ms"),
    (new_topic("x", 2, assignments={0: [0]}), ErrorCode.INVALID_REQUEST, "Both numPartitions"),
    (new_topic("x", assignments={0: [0], 1: [5]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "Unknown broker(s) in replica assignment: 5."),
    (new_topic("x", assignments={0: [0], 2: [0]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "consecutive 0-based"),
])
async def test_create_topics_refuses_what_kafka_refuses(broker, topic, code, message) -> None:
    response = await call(broker, create_topics, 5, {"topics": [topic], "timeout_ms": 5000})
    [result] = response.topics
    assert result.error_code == code and message in result.error_message
    assert (result.num_partitions, result.replication_factor, result.configs) == (-1, -1, [])
    assert await broker.core.registry.list_topics("public", "default") == []


async def test_create_topics_accepts_a_manual_assignment_to_this_broker(broker) -> None:
    response = await call(broker, create_topics, 5, {"topics": [new_topic("manual", assignments={0: [0], 1: [0]})],
                                                     "timeout_ms": 5000})
    assert response.topics[0].error_code == ErrorCode.NONE and response.topics[0].num_partitions == 2


async def test_create_topics_reports_an_existing_topic_and_a_name_given_twice(broker) -> None:
    await create(broker, "taken")
    response = await call(broker, create_topics, 1, {"topics": [new_topic("taken", 1, 1), new_topic("twice", 1, 1),
                                                                new_topic("twice", 1, 1)], "timeout_ms": 5000})
    assert [(r.name, r.error_code) for r in response.topics] == [
        ("taken", ErrorCode.TOPIC_ALREADY_EXISTS), ("twice", ErrorCode.INVALID_REQUEST),
        ("twice", ErrorCode.INVALID_REQUEST)]
    assert response.topics[0].error_message == "Topic 'taken' already exists."


async def test_create_topics_refuses_a_name_colliding_once_dots_are_underscores(broker) -> None:
    await create(broker, "metrics_cpu")
    response = await call(broker, create_topics, 3, {"topics": [new_topic("metrics.cpu", 1, 1)], "timeout_ms": 5000})
    assert response.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "collides with existing topics: metrics_cpu" in response.topics[0].error_message


async def test_create_topics_with_zero_timeout_creates_but_answers_request_timed_out(broker) -> None:
    response = await call(broker, create_topics, 0, {"topics": [new_topic("quick", 1, 1)], "timeout_ms": 0})
    assert response.topics[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    assert await broker.core.registry.list_topics("public", "default") == ["quick"]


# --- DeleteTopics -------------------------------------------------------------------------------

async def test_delete_topics_by_name_and_unknown_names(broker) -> None:
    await create(broker, "doomed")
    response = await call(broker, delete_topics, 3, {"topic_names": ["doomed", "ghost", "bad/name"], "timeout_ms": 5000})
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("doomed", ErrorCode.NONE), ("ghost", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("bad/name", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert await broker.core.registry.list_topics("public", "default") == []


async def test_delete_topics_v6_by_id_answers_the_name(broker) -> None:
    await create(broker, "by-id")
    topic_id = uuid.UUID(hex=(await broker.core.registry.get_topic(TopicName.of("by-id"))).topic_id)
    unknown_id = uuid.uuid4()
    response = await call(broker, delete_topics, 6, {"topics": [{"name": None, "topic_id": topic_id},
                                                                {"name": None, "topic_id": unknown_id}],
                                                     "timeout_ms": 5000})
    assert [(r.name, r.topic_id, r.error_code) for r in response.responses] == [
        ("by-id", topic_id, ErrorCode.NONE), (None, unknown_id, ErrorCode.UNKNOWN_TOPIC_ID)]
    assert await broker.core.registry.list_topics("public", "default") == []


async def test_delete_topics_v6_with_name_and_id_together_fails_the_request(broker) -> None:
    await create(broker, "kept")
    response = await call(broker, delete_topics, 6, {"topics": [{"name": "kept", "topic_id": uuid.uuid4()}],
                                                     "timeout_ms": 5000})
    assert response.responses[0].error_code == ErrorCode.INVALID_REQUEST
    assert await broker.core.registry.list_topics("public", "default") == ["kept"]


# --- CreatePartitions ---------------------------------------------------------------------------

async def test_create_partitions_grows_and_refuses_to_shrink_or_stay(broker) -> None:
    for name in ("grow", "shrink", "same"):
        await create(broker, name, 2)
    response = await call(broker, create_partitions, 2, {"topics": [
        {"name": "grow", "count": 4, "assignments": None}, {"name": "shrink", "count": 1, "assignments": None},
        {"name": "same", "count": 2, "assignments": None}, {"name": "ghost", "count": 3, "assignments": None}],
        "timeout_ms": 5000, "validate_only": False})
    assert [(r.name, r.error_code) for r in response.results] == [
        ("grow", ErrorCode.NONE), ("shrink", ErrorCode.INVALID_PARTITIONS), ("same", ErrorCode.INVALID_PARTITIONS),
        ("ghost", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert response.results[1].error_message == "Topic currently has 2 partitions, which is higher than the requested 1."
    assert response.results[2].error_message == "Topic already has 2 partitions."
    assert (await broker.core.registry.get_topic(TopicName.of("grow"))).partitions == 4
    await produce(broker, "grow", 3, 1)   # a new partition is usable at once


async def test_create_partitions_validate_only_and_assignments(broker) -> None:
    await create(broker, "t", 1)
    dry = await call(broker, create_partitions, 0, {"topics": [{"name": "t", "count": 3, "assignments": [
        {"broker_ids": [0]}, {"broker_ids": [0]}]}], "timeout_ms": 5000, "validate_only": True})
    assert dry.results[0].error_code == ErrorCode.NONE
    assert (await broker.core.registry.get_topic(TopicName.of("t"))).partitions == 1
    elsewhere = await call(broker, create_partitions, 3, {"topics": [{"name": "t", "count": 2, "assignments": [
        {"broker_ids": [1]}]}], "timeout_ms": 5000, "validate_only": False})
    assert elsewhere.results[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    short = await call(broker, create_partitions, 3, {"topics": [{"name": "t", "count": 3, "assignments": [
        {"broker_ids": [0]}]}], "timeout_ms": 5000, "validate_only": False})
    assert short.results[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    twice = await call(broker, create_partitions, 1, {"topics": [{"name": "t", "count": 2, "assignments": None},
                                                                 {"name": "t", "count": 3, "assignments": None}],
                                                      "timeout_ms": 5000, "validate_only": False})
    assert [(r.name, r.error_code) for r in twice.results] == [("t", ErrorCode.INVALID_REQUEST)]


# --- DeleteRecords ------------------------------------------------------------------------------

async def test_delete_records_moves_the_low_watermark(broker) -> None:
    await create(broker, "log", 2)
    await produce(broker, "log", 0, 5)
    await produce(broker, "log", 1, 3)
    response = await call(broker, delete_records, 2, {"topics": [{"name": "log", "partitions": [
        {"partition_index": 0, "offset": 2}, {"partition_index": 1, "offset": -1}, {"partition_index": 2, "offset": 0}]},
        {"name": "ghost", "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout_ms": 5000})
    assert [(p.partition_index, p.low_watermark, p.error_code) for p in response.topics[0].partitions] == [
        (0, 2, ErrorCode.NONE), (1, 3, ErrorCode.NONE), (2, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert response.topics[1].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await broker.core.partition(TopicName.of("log"), 0)).log_start_offset == 2


async def test_delete_records_refuses_past_the_high_watermark_and_compacted_topics(broker) -> None:
    await create(broker, "short")
    await create(broker, "compacted", configs={"cleanup.policy": "compact"})
    await produce(broker, "short", 0, 2)
    response = await call(broker, delete_records, 0, {"topics": [
        {"name": "short", "partitions": [{"partition_index": 0, "offset": 3}]},
        {"name": "compacted", "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout_ms": 5000})
    assert [t.partitions[0].error_code for t in response.topics] == [
        ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.POLICY_VIOLATION]


# --- DescribeConfigs ----------------------------------------------------------------------------

async def test_describe_configs_topic_explicit_and_default_values_with_synonyms(broker) -> None:
    await create(broker, "described", configs={"retention.ms": "5000"})
    response = await call(broker, describe_configs, 4, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": "described", "configuration_keys": None}],
        "include_synonyms": True, "include_documentation": True})
    [result] = response.results
    assert result.error_code == ErrorCode.NONE
    configs = {c.name: c for c in result.configs}
    retention, segment = configs["retention.ms"], configs["segment.bytes"]
    assert (retention.value, retention.config_source, retention.read_only) == ("5000", DYNAMIC_TOPIC_CONFIG, False)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "5000", DYNAMIC_TOPIC_CONFIG), ("log.retention.ms", "604800000", DEFAULT_CONFIG)]
    assert (segment.value, segment.config_source) == ("134217728", DEFAULT_CONFIG)
    assert [(s.name, s.source) for s in segment.synonyms] == [("log.segment.bytes", DEFAULT_CONFIG)]
    assert retention.config_type == 5 and configs["cleanup.policy"].config_type == 7   # LONG, LIST
    assert configs["flush.messages"].read_only and retention.documentation


async def test_describe_configs_v0_marks_defaults_and_filters_by_key(broker) -> None:
    await create(broker, "old", configs={"cleanup.policy": "compact"})
    response = await call(broker, describe_configs, 0, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": "old",
         "configuration_keys": ["cleanup.policy", "retention.ms", "no.such"]}]})
    assert [(c.name, c.value, c.is_default) for c in response.results[0].configs] == [
        ("cleanup.policy", "compact", False), ("retention.ms", "604800000", True)]


async def test_describe_configs_unknown_and_illegal_topics(broker) -> None:
    response = await call(broker, describe_configs, 1, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": "ghost", "configuration_keys": None},
        {"resource_type": TOPIC_RESOURCE, "resource_name": "bad/name", "configuration_keys": None}]})
    assert [(r.resource_name, r.error_code, r.configs) for r in response.results] == [
        ("ghost", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []), ("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION, [])]


async def test_describe_configs_broker_lists_settings_and_dynamic_defaults_as_kafka_2_8(broker) -> None:
    response = await call(broker, describe_configs, 3, {"resources": [
        {"resource_type": BROKER_RESOURCE, "resource_name": "0", "configuration_keys": None},
        {"resource_type": BROKER_RESOURCE, "resource_name": "", "configuration_keys": None},
        {"resource_type": BROKER_RESOURCE, "resource_name": "7", "configuration_keys": None}],
        "include_synonyms": True})
    this, defaults, other = response.results
    configs = {c.name: c for c in this.configs}
    # Settings the configuration left unset are Kafka's defaults; what the gateway always sets is static.
    assert (configs["num.partitions"].value, configs["num.partitions"].config_source) == ("1", DEFAULT_CONFIG)
    assert (configs["log.dirs"].value, configs["log.dirs"].config_source) == (LOG_DIR, STATIC_BROKER_CONFIG)
    assert configs["group.max.size"].value == "2147483647" and configs["group.max.size"].read_only
    # The broker-level topic defaults are dynamic: not read-only.
    assert (configs["log.retention.ms"].value, configs["log.retention.ms"].config_source,
            configs["log.retention.ms"].read_only) == ("604800000", DEFAULT_CONFIG, False)
    assert configs["log.flush.interval.ms"].read_only   # flush.ms cannot be changed here at all
    assert {"auto.create.topics.enable", "message.max.bytes", "default.replication.factor", "min.insync.replicas",
            "log.segment.bytes", "broker.id"} <= set(configs)
    assert (defaults.error_code, defaults.configs) == (ErrorCode.NONE, [])
    assert other.error_code == ErrorCode.INVALID_REQUEST and "expected 0 or empty string" in other.error_message


async def test_describe_configs_unknown_resource_type_fails_every_resource(broker) -> None:
    await create(broker, "fine")
    response = await call(broker, describe_configs, 2, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": "fine", "configuration_keys": None},
        {"resource_type": 3, "resource_name": "group", "configuration_keys": None}]})
    assert [r.error_code for r in response.results] == [ErrorCode.INVALID_REQUEST] * 2


# --- AlterConfigs and IncrementalAlterConfigs ---------------------------------------------------

async def explicit(broker, name: str) -> dict:
    return (await broker.core.registry.get_topic(TopicName.of(name))).configs


def topic_resource(name: str, **configs) -> dict:
    return {"resource_type": TOPIC_RESOURCE, "resource_name": name,
            "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()]}


async def test_alter_configs_replaces_the_whole_explicit_set(broker) -> None:
    await create(broker, "altered", configs={"retention.ms": "1000", "cleanup.policy": "compact"})
    response = await call(broker, alter_configs, 2, {"resources": [topic_resource("altered", retention_bytes="2048")],
                                                     "validate_only": False})
    assert response.responses[0].error_code == ErrorCode.NONE
    assert await explicit(broker, "altered") == {"retention.bytes": "2048"}


@pytest.mark.parametrize("configs, code, message", [
    ({"no.such": "1"}, ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such"),
    ({"retention.ms": "soon"}, ErrorCode.INVALID_REQUEST,
     "Invalid config value for resource ConfigResource(type=TOPIC, name='checked')"),
    ({"retention.ms": None}, ErrorCode.INVALID_REQUEST, "Null value not supported for : retention.ms"),
])
async def test_alter_configs_refuses_what_kafka_refuses(broker, configs, code, message) -> None:
    await create(broker, "checked", configs={"retention.ms": "1000"})
    resource = {"resource_type": TOPIC_RESOURCE, "resource_name": "checked",
                "configs": [{"name": k, "value": v} for k, v in configs.items()]}
    response = await call(broker, alter_configs, 0, {"resources": [resource], "validate_only": False})
    assert response.responses[0].error_code == code and message in response.responses[0].error_message
    assert await explicit(broker, "checked") == {"retention.ms": "1000"}


async def test_alter_configs_validate_only_unknown_topic_and_broker(broker) -> None:
    await create(broker, "steady", configs={"retention.ms": "1000"})
    response = await call(broker, alter_configs, 1, {"resources": [
        topic_resource("steady", retention_ms="2000"), topic_resource("ghost", retention_ms="2000"),
        {"resource_type": BROKER_RESOURCE, "resource_name": "0", "configs": [{"name": "num.partitions", "value": "1"}]},
        {"resource_type": BROKER_RESOURCE, "resource_name": "0", "configs": [{"name": "log.retention.ms", "value": "1"}]}],
        "validate_only": True})
    assert [r.error_code for r in response.responses] == [
        ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST, ErrorCode.NONE]
    assert "Cannot update these configs dynamically: Set(num.partitions)" in response.responses[2].error_message
    assert await explicit(broker, "steady") == {"retention.ms": "1000"}
    assert broker.core.broker_configs.get("0") == {}   # validate_only


def op(name: str, operation: int, value: str | None) -> dict:
    return {"name": name, "config_operation": operation, "value": value}


async def test_incremental_alter_configs_set_delete_append_subtract(broker) -> None:
    await create(broker, "inc", configs={"retention.ms": "1000", "retention.bytes": "4096"})
    response = await call(broker, incremental_alter_configs, 1, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": "inc", "configs": [
            op("segment.ms", SET, "60000"), op("retention.ms", DELETE, None), op("cleanup.policy", APPEND, "compact")]}],
        "validate_only": False})
    assert response.responses[0].error_code == ErrorCode.NONE
    assert await explicit(broker, "inc") == {"retention.bytes": "4096", "segment.ms": "60000",
                                             "cleanup.policy": "delete,compact"}
    response = await call(broker, incremental_alter_configs, 0, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": "inc", "configs": [op("cleanup.policy", SUBTRACT, "delete")]}],
        "validate_only": False})
    assert response.responses[0].error_code == ErrorCode.NONE
    assert (await explicit(broker, "inc"))["cleanup.policy"] == "compact"


@pytest.mark.parametrize("ops, code, message", [
    ([op("retention.ms", APPEND, "1")], ErrorCode.INVALID_REQUEST,
     "Config value append is not allowed for config key: retention.ms"),
    ([op("retention.ms", SET, "1"), op("retention.ms", DELETE, None)], ErrorCode.INVALID_REQUEST,
     "Error due to duplicate config keys : retention.ms"),
    ([op("retention.ms", SET, None)], ErrorCode.INVALID_REQUEST, "Null value not supported for : SET:retention.ms"),
    ([op("no.such", SET, "1")], ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such"),
    ([op("retention.ms", SET, "soon")], ErrorCode.INVALID_REQUEST, "Invalid config value"),
    ([op("retention.ms", 9, "1")], ErrorCode.INVALID_REQUEST, "Unknown operation type ID: 9"),
])
async def test_incremental_alter_configs_refuses_what_kafka_refuses(broker, ops, code, message) -> None:
    await create(broker, "guarded", configs={"retention.ms": "1000"})
    response = await call(broker, incremental_alter_configs, 1, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": "guarded", "configs": ops}], "validate_only": False})
    assert response.responses[0].error_code == code and message in response.responses[0].error_message
    assert await explicit(broker, "guarded") == {"retention.ms": "1000"}


async def test_incremental_alter_configs_on_the_broker(broker) -> None:
    response = await call(broker, incremental_alter_configs, 1, {"resources": [
        {"resource_type": BROKER_RESOURCE, "resource_name": "0", "configs": [op("log.retention.ms", DELETE, None)]},
        {"resource_type": BROKER_RESOURCE, "resource_name": "0", "configs": [op("num.partitions", SET, "3")]},
        {"resource_type": BROKER_RESOURCE, "resource_name": "0", "configs": [op("log.retention.ms", SET, "soon")]},
        {"resource_type": BROKER_RESOURCE, "resource_name": "0", "configs": [op("no.such.config", SET, "1")]},
        {"resource_type": BROKER_RESOURCE, "resource_name": "x", "configs": []}], "validate_only": False})
    assert [r.error_code for r in response.responses] == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST,
                                                          ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_CONFIG,
                                                          ErrorCode.INVALID_REQUEST]
    assert "Cannot update these configs dynamically: Set(num.partitions)" in response.responses[1].error_message
    assert response.responses[4].error_message == "Broker id must be an integer, but it is: x"


async def test_dynamic_broker_configs_are_topic_defaults_at_two_levels(broker) -> None:
    await create(broker, "own", configs={"retention.ms": "1000"})
    await create(broker, "inherits")
    response = await call(broker, incremental_alter_configs, 1, {"resources": [
        {"resource_type": BROKER_RESOURCE, "resource_name": "", "configs": [
            op("log.retention.ms", SET, "7000"), op("log.cleanup.policy", APPEND, "compact")]},
        {"resource_type": BROKER_RESOURCE, "resource_name": "0", "configs": [op("log.retention.ms", SET, "5000")]}],
        "validate_only": False})
    assert [r.error_code for r in response.responses] == [ErrorCode.NONE, ErrorCode.NONE]
    assert broker.core.broker_configs.get("") == {"log.retention.ms": "7000", "log.cleanup.policy": "delete,compact"}
    described = await call(broker, describe_configs, 1, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": "inherits", "configuration_keys": ["retention.ms"]},
        {"resource_type": TOPIC_RESOURCE, "resource_name": "own", "configuration_keys": ["retention.ms"]},
        {"resource_type": BROKER_RESOURCE, "resource_name": "", "configuration_keys": None}], "include_synonyms": True})
    inherits, own, cluster = (result.configs for result in described.results)
    assert (inherits[0].value, inherits[0].config_source) == ("5000", DYNAMIC_BROKER_CONFIG)
    assert [(s.value, s.source) for s in inherits[0].synonyms] == [
        ("5000", DYNAMIC_BROKER_CONFIG), ("7000", DYNAMIC_DEFAULT_BROKER_CONFIG), ("604800000", DEFAULT_CONFIG)]
    assert (own[0].value, own[0].config_source) == ("1000", DYNAMIC_TOPIC_CONFIG)
    assert {(c.name, c.value, c.config_source, c.read_only) for c in cluster} == {
        ("log.retention.ms", "7000", DYNAMIC_DEFAULT_BROKER_CONFIG, False),
        ("log.cleanup.policy", "delete,compact", DYNAMIC_DEFAULT_BROKER_CONFIG, False)}
    partition = await broker.core.partition(TopicName.of("inherits"), 0)
    assert partition.config.retention_ms == 5000   # open partitions take the new default at once
    await call(broker, alter_configs, 0, {"resources": [   # AlterConfigs replaces the broker's whole set
        {"resource_type": BROKER_RESOURCE, "resource_name": "0", "configs": []}], "validate_only": False})
    assert partition.config.retention_ms == 7000


# --- cluster, log dirs, leaders, reassignments, epochs ------------------------------------------

async def test_describe_cluster_names_this_broker_as_the_whole_cluster(broker) -> None:
    response = await call(broker, describe_cluster, 0, {"include_cluster_authorized_operations": True})
    assert (response.error_code, response.cluster_id, response.controller_id) == (ErrorCode.NONE, "test-cluster", 0)
    assert [(b.broker_id, b.host, b.port, b.rack) for b in response.brokers] == [(0, "127.0.0.1", 9092, None)]
    assert response.cluster_authorized_operations == 8096   # CREATE..IDEMPOTENT_WRITE, as Kafka without an authorizer
    plain = await call(broker, describe_cluster, 0, {"include_cluster_authorized_operations": False})
    assert plain.cluster_authorized_operations == -2147483648


async def test_describe_log_dirs_reports_partition_sizes(broker) -> None:
    await create(broker, "sized", 2)
    await create(broker, "empty")
    await produce(broker, "sized", 1, 10)
    asked = await call(broker, describe_log_dirs, 1, {"topics": [
        {"topic": "sized", "partition_index": [0, 1, 9]}, {"topic": "ghost", "partition_index": [0]}]})
    [result] = asked.results
    assert (result.error_code, result.log_dir) == (ErrorCode.NONE, LOG_DIR)
    [sized] = result.topics
    sizes = {p.partition_index: p.partition_size for p in sized.partitions}
    assert set(sizes) == {0, 1} and sizes[0] == 0 and sizes[1] > 0
    everything = await call(broker, describe_log_dirs, 2, {"topics": None})
    assert {(t.name, len(t.partitions)) for t in everything.results[0].topics} == {("sized", 2), ("empty", 1)}


async def test_elect_leaders_is_never_needed(broker) -> None:
    await create(broker, "led", 2)
    response = await call(broker, elect_leaders, 2, {"election_type": 0, "topic_partitions": [
        {"topic": "led", "partition_id": [0, 1, 5]}], "timeout_ms": 5000})
    assert response.error_code == ErrorCode.NONE
    assert [(p.partition_id, p.error_code) for p in response.replica_election_results[0].partition_result] == [
        (0, ErrorCode.ELECTION_NOT_NEEDED), (1, ErrorCode.ELECTION_NOT_NEEDED), (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    everything = await call(broker, elect_leaders, 0, {"topic_partitions": None, "timeout_ms": 5000})
    assert everything.replica_election_results == []


async def test_partition_reassignments_on_a_single_broker(broker) -> None:
    await create(broker, "moved", 1)
    response = await call(broker, alter_partition_reassignments, 0, {"topics": [{"name": "moved", "partitions": [
        {"partition_index": 0, "replicas": [0]}, {"partition_index": 0, "replicas": [1]},
        {"partition_index": 0, "replicas": None}, {"partition_index": 4, "replicas": [0]}]}]})
    assert [p.error_code for p in response.responses[0].partitions] == [
        ErrorCode.NONE, ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    listed = await call(broker, list_partition_reassignments, 0, {"topics": None})
    assert (listed.error_code, listed.topics) == (ErrorCode.NONE, [])


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
async def test_offset_for_leader_epoch_answers_undefined_as_kafka_does_without_epochs(broker, version) -> None:
    await create(broker, "epochs", 1)
    await produce(broker, "epochs", 0, 3)
    response = await call(broker, offset_for_leader_epoch, version, {"topics": [
        {"topic": "epochs", "partitions": [{"partition": 0, "leader_epoch": -1}, {"partition": 1, "leader_epoch": 0}]},
        {"topic": "ghost", "partitions": [{"partition": 0, "leader_epoch": 0}]}]})
    epochs, ghost = response.topics
    assert [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in epochs.partitions] == [
        (0, ErrorCode.NONE, -1, -1), (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    assert ghost.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_offset_for_leader_epoch_checks_the_current_leader_epoch(broker) -> None:
    await create(broker, "fenced", 1)
    response = await call(broker, offset_for_leader_epoch, 2, {"topics": [
        {"topic": "fenced", "partitions": [{"partition": 0, "current_leader_epoch": 4, "leader_epoch": 4}]}]})
    assert response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_LEADER_EPOCH

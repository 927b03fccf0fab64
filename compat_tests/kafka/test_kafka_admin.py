"""The Kafka admin APIs against a real `gateway serve` process, through real clients:
kafka-python's KafkaAdminClient and confluent-kafka's (librdkafka's) AdminClient.

OffsetForLeaderEpoch, which no client sends to a broker that hands out no leader epochs, is
exercised over a raw socket with the gateway's own codec.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import ElectionType, KafkaException
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   NewTopic, ResourceType)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import ConfigResource as KafkaPythonResource
from kafka.admin import KafkaAdminClient

from compat_tests.kafka.wire_call import raw_request
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.describe_configs import DESCRIBE_CONFIGS
from protocols.kafka.schema.incremental_alter_configs import INCREMENTAL_ALTER_CONFIGS
from protocols.kafka.schema.offset_for_leader_epoch import OFFSET_FOR_LEADER_EPOCH

TIMEOUT_S = 15.0
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG = 1, 2, 3, 5


def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


@pytest.fixture
def admin(gateway_process):
    client = KafkaAdminClient(bootstrap_servers=bootstrap(gateway_process), request_timeout_ms=10_000)
    yield client
    client.close()


@pytest.fixture
def confluent(gateway_process) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap(gateway_process)})


def outcomes(futures: dict) -> dict:
    """Each future's result, or the KafkaError it failed with."""
    results = {}
    for key, future in futures.items():
        try:
            results[key] = future.result(TIMEOUT_S)
        except KafkaException as exc:
            results[key] = exc.args[0]
    return results


def produce(gateway, topic: str, partition: int, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap(gateway))
    try:
        for i in range(count):
            producer.send(topic, b"value-%d" % i, partition=partition)
        producer.flush(TIMEOUT_S)
    finally:
        producer.close()


def topic_names(admin: KafkaAdminClient) -> set[str]:
    return set(admin.list_topics())


# --- kafka-python -------------------------------------------------------------------------------

def test_kafka_python_creates_topics_with_configs_and_validate_only_creates_nothing(admin):
    created = admin.create_topics({"orders": {"num_partitions": 3, "configs": {"retention.ms": "60000"}}})
    [result] = created["topics"]
    assert (result["error_code"], result["num_partitions"], result["replication_factor"]) == (0, 3, 1)
    assert result["configs"]["retention.ms"]["value"] == "60000"
    assert result["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    [described] = admin.describe_topics(["orders"])
    assert [p["partition_index"] for p in described["partitions"]] == [0, 1, 2]
    assert str(described["topic_id"]) == str(result["topic_id"])

    dry = admin.create_topics({"dry-run": {"num_partitions": 2}}, validate_only=True)
    assert dry["topics"][0]["error_code"] == 0
    assert topic_names(admin) == {"orders"}


def test_kafka_python_create_topics_errors_are_kafkas(admin):
    admin.create_topics({"taken": {"num_partitions": 1}})
    with pytest.raises(kafka_errors.TopicAlreadyExistsError, match="Topic 'taken' already exists"):
        admin.create_topics({"taken": {"num_partitions": 1}})
    with pytest.raises(kafka_errors.InvalidTopicError, match="illegal topic name"):
        admin.create_topics({"no spaces": {"num_partitions": 1}})
    with pytest.raises(kafka_errors.InvalidReplicationFactorError,
                       match="Replication factor: 3 larger than available brokers: 1"):
        admin.create_topics({"replicated": {"num_partitions": 1, "replication_factor": 3}})
    with pytest.raises(kafka_errors.InvalidConfigurationError, match="no.such.config"):
        admin.create_topics({"configured": {"configs": {"no.such.config": "1"}}})
    assert topic_names(admin) == {"taken"}


def test_kafka_python_deletes_topics_by_name_and_by_id(admin):
    admin.create_topics({"by-name": {}, "by-id": {}})
    [by_id] = admin.describe_topics(["by-id"])
    admin.delete_topics(["by-name"])
    admin.delete_topics([uuid.UUID(str(by_id["topic_id"]))])
    assert topic_names(admin) == set()
    with pytest.raises(kafka_errors.UnknownTopicOrPartitionError):
        admin.delete_topics(["by-name"])


def test_kafka_python_describes_topic_and_broker_configs(admin):
    admin.create_topics({"described": {"configs": {"cleanup.policy": "compact"}}})
    modified = admin.describe_configs([KafkaPythonResource("TOPIC", "described")])
    assert list(modified["topic"]["described"]) == ["cleanup.policy"]   # only what differs from the default
    everything = admin.describe_configs([KafkaPythonResource("TOPIC", "described")], include_synonyms=True,
                                        config_filter="all")["topic"]["described"]
    policy, retention = everything["cleanup.policy"], everything["retention.ms"]
    assert (policy["value"], policy["config_source"]) == ("compact", "DYNAMIC_TOPIC_CONFIG")
    assert [(s["name"], s["source"]) for s in policy["synonyms"]] == [
        ("cleanup.policy", "DYNAMIC_TOPIC_CONFIG"), ("log.cleanup.policy", "DEFAULT_CONFIG")]
    assert (retention["value"], retention["config_source"], retention["config_type"]) == (
        "604800000", "DEFAULT_CONFIG", "LONG")

    broker = admin.describe_configs([KafkaPythonResource("BROKER", "0")], config_filter="all")["broker"]["0"]
    assert broker["num.partitions"]["value"] == "1" and broker["num.partitions"]["read_only"]
    assert broker["log.retention.ms"]["value"] == "604800000"
    assert broker["auto.create.topics.enable"]["value"] == "true"


def test_kafka_python_alters_configs_incrementally_and_wholesale(admin):
    admin.create_topics({"altered": {"configs": {"retention.ms": "1000"}}})

    def explicit() -> dict:
        described = admin.describe_configs([KafkaPythonResource("TOPIC", "altered")])["topic"]["altered"]
        return {name: entry["value"] for name, entry in described.items()}

    result = admin.alter_configs([KafkaPythonResource("TOPIC", "altered", {"segment.ms": "60000"})], incremental=True)
    assert result == {"topic": {"altered": "OK"}}
    assert explicit() == {"retention.ms": "1000", "segment.ms": "60000"}
    admin.alter_configs([KafkaPythonResource("TOPIC", "altered", {"retention.ms": ("DELETE", None)})], incremental=True)
    assert explicit() == {"segment.ms": "60000"}
    # The legacy API replaces the whole set (the client adds back what it does not mean to reset).
    admin.alter_configs([KafkaPythonResource("TOPIC", "altered", {"retention.bytes": "4096"})], incremental=False)
    assert explicit() == {"segment.ms": "60000", "retention.bytes": "4096"}
    refused = admin.alter_configs([KafkaPythonResource("TOPIC", "altered", {"retention.ms": "soon"})],
                                  incremental=True)
    assert refused["topic"]["altered"].startswith("[Error 42] InvalidRequestError")


def test_kafka_python_creates_partitions_and_refuses_to_shrink(admin):
    admin.create_topics({"growing": {"num_partitions": 2}})
    admin.create_partitions({"growing": 5})
    assert len(admin.describe_topics(["growing"])[0]["partitions"]) == 5
    with pytest.raises(kafka_errors.InvalidPartitionsError, match="higher than the requested 3"):
        admin.create_partitions({"growing": 3})
    with pytest.raises(kafka_errors.InvalidPartitionsError, match="already has 5 partitions"):
        admin.create_partitions({"growing": 5})


def test_kafka_python_delete_records_moves_the_beginning_offset(admin, gateway_process):
    admin.create_topics({"trimmed": {"num_partitions": 1}})
    produce(gateway_process, "trimmed", 0, 10)
    partition = TopicPartition("trimmed", 0)
    deleted = admin.delete_records({partition: 4})
    assert deleted[partition]["low_watermark"] == 4
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway_process))
    try:
        assert consumer.beginning_offsets([partition]) == {partition: 4}
        assert consumer.end_offsets([partition]) == {partition: 10}
        admin.delete_records({partition: -1})   # -1: up to the high watermark
        assert consumer.beginning_offsets([partition]) == {partition: 10}
    finally:
        consumer.close()
    with pytest.raises(kafka_errors.OffsetOutOfRangeError):
        admin.delete_records({partition: 11})


def test_kafka_python_describe_log_dirs_reports_the_data_dir_and_sizes(admin, gateway_process):
    admin.create_topics({"sized": {"num_partitions": 2}})
    produce(gateway_process, "sized", 1, 20)
    [answer] = admin.describe_log_dirs()
    [log_dir] = answer["log_dirs"]
    assert (log_dir["error_code"], log_dir["log_dir"]) == (0, str(gateway_process.data_dir))
    [sized] = log_dir["topics"]
    sizes = {p["partition_index"]: p["partition_size"] for p in sized["partitions"]}
    assert sizes[0] == 0 and sizes[1] > 20 * len(b"value-0")


def test_kafka_python_elect_leaders_and_reassignments_on_one_broker(admin):
    admin.create_topics({"led": {"num_partitions": 2}})
    response = admin.elect_leaders(0, {"led": [0, 1]})
    assert [(p.partition_id, p.error_code) for p in response.replica_election_results[0].partition_result] == [
        (0, ErrorCode.ELECTION_NOT_NEEDED), (1, ErrorCode.ELECTION_NOT_NEEDED)]
    assert admin.alter_partition_reassignments({TopicPartition("led", 0): [0]}) == {TopicPartition("led", 0): None}
    assert admin.list_partition_reassignments() == {}


# --- confluent-kafka (librdkafka) ---------------------------------------------------------------

def test_confluent_creates_and_deletes_topics(confluent, admin):
    created = outcomes(confluent.create_topics([
        NewTopic("fresh", 2, 1, config={"retention.ms": "1000"}), NewTopic("replicated", 1, 3),
        NewTopic("bad/name", 1, 1)]))
    assert created["fresh"] is None
    assert created["replicated"].code() == ErrorCode.INVALID_REPLICATION_FACTOR
    assert created["bad/name"].code() == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert outcomes(confluent.create_topics([NewTopic("fresh", 1, 1)]))["fresh"].code() == \
        ErrorCode.TOPIC_ALREADY_EXISTS
    assert outcomes(confluent.create_topics([NewTopic("dry", 1, 1)], validate_only=True)) == {"dry": None}
    assert topic_names(admin) == {"fresh"}

    deleted = outcomes(confluent.delete_topics(["fresh", "ghost"]))
    assert deleted["fresh"] is None and deleted["ghost"].code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert topic_names(admin) == set()


def test_confluent_describes_and_alters_configs(confluent):
    outcomes(confluent.create_topics([NewTopic("tuned", 1, 1, config={"retention.ms": "1000"})]))
    topic = ConfigResource(ResourceType.TOPIC, "tuned")

    def described() -> dict:
        return outcomes(confluent.describe_configs([topic]))[topic]

    configs = described()
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == ("1000", DYNAMIC_TOPIC_CONFIG)
    assert set(configs["retention.ms"].synonyms) == {"retention.ms", "log.retention.ms"}
    assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == ("134217728", DEFAULT_CONFIG)

    changed = outcomes(confluent.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, "tuned",
        incremental_configs=[ConfigEntry("segment.ms", "60000", incremental_operation=AlterConfigOpType.SET),
                             ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])]))
    assert list(changed.values()) == [None]
    configs = described()
    assert {name: c.value for name, c in configs.items() if c.source == DYNAMIC_TOPIC_CONFIG} == {"segment.ms": "60000"}

    broker = ConfigResource(ResourceType.BROKER, "0")
    broker_configs = outcomes(confluent.describe_configs([broker]))[broker]
    assert broker_configs["log.dirs"].is_read_only and broker_configs["message.max.bytes"].value == "1048588"
    assert not broker_configs["message.max.bytes"].is_read_only   # dynamic in Kafka
    refused = outcomes(confluent.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "0",
        incremental_configs=[ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])]))
    assert list(refused.values())[0].code() == ErrorCode.INVALID_REQUEST


def broker_config(confluent, name: str):
    resource = ConfigResource(ResourceType.BROKER, "0")
    return outcomes(confluent.describe_configs([resource]))[resource].get(name)


def test_dynamic_broker_configs_change_topic_defaults_at_run_time_and_persist(gateway_launcher, tmp_path):
    data_dir = tmp_path / "data"
    gateway = gateway_launcher.start(data_dir=data_dir)
    confluent = AdminClient({"bootstrap.servers": bootstrap(gateway)})
    outcomes(confluent.create_topics([NewTopic("follows", 1, 1)]))
    # librdkafka cannot name the cluster-wide default (""): that level is set over a raw socket.
    cluster_wide = raw_request(gateway.kafka, INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": 4, "resource_name": "", "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "7200000"}]}]})
    assert [r.error_code for r in cluster_wide.responses] == [ErrorCode.NONE]
    changed = outcomes(confluent.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "0",
        incremental_configs=[ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])]))
    assert list(changed.values()) == [None]
    entry = broker_config(confluent, "log.retention.ms")
    assert (entry.value, entry.source, entry.is_read_only) == ("3600000", DYNAMIC_BROKER_CONFIG, False)
    gateway.stop()

    gateway = gateway_launcher.start(data_dir=data_dir)
    confluent = AdminClient({"bootstrap.servers": bootstrap(gateway)})
    topic = ConfigResource(ResourceType.TOPIC, "follows")
    retention = outcomes(confluent.describe_configs([topic]))[topic]["retention.ms"]
    assert (retention.value, retention.source) == ("3600000", DYNAMIC_BROKER_CONFIG)
    described = raw_request(gateway.kafka, DESCRIBE_CONFIGS, 1, {"include_synonyms": False, "resources": [
        {"resource_type": 4, "resource_name": "", "configuration_keys": None}]})
    assert [(c.name, c.value, c.config_source) for c in described.results[0].configs] == [
        ("log.retention.ms", "7200000", DYNAMIC_DEFAULT_BROKER_CONFIG)]
    deleted = outcomes(confluent.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "0",
        incremental_configs=[ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])]))
    assert list(deleted.values()) == [None]
    retention = outcomes(confluent.describe_configs([topic]))[topic]["retention.ms"]
    assert (retention.value, retention.source) == ("7200000", DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_confluent_partitions_records_cluster_and_leaders(confluent, gateway_process):
    outcomes(confluent.create_topics([NewTopic("wide", 1, 1)]))
    grown = outcomes(confluent.create_partitions([NewPartitions("wide", 3)]))
    assert grown == {"wide": None}
    shrunk = outcomes(confluent.create_partitions([NewPartitions("wide", 2)]))
    assert shrunk["wide"].code() == ErrorCode.INVALID_PARTITIONS

    produce(gateway_process, "wide", 2, 6)
    [deleted] = outcomes(confluent.delete_records([ConfluentPartition("wide", 2, 5)])).values()
    assert deleted.low_watermark == 5

    cluster = confluent.describe_cluster().result(TIMEOUT_S)
    host, port = gateway_process.kafka
    assert cluster.cluster_id == "gateway-cluster" and cluster.controller.id == 0
    assert [(node.id, node.host, node.port) for node in cluster.nodes] == [(0, host, port)]

    elected = confluent.elect_leaders(ElectionType.PREFERRED, [ConfluentPartition("wide", 0)]).result(TIMEOUT_S)
    assert [error.code() for error in elected.values()] == [ErrorCode.ELECTION_NOT_NEEDED]


# --- OffsetForLeaderEpoch over a raw socket -----------------------------------------------------

@pytest.mark.parametrize("version", [2, 4])
def test_offset_for_leader_epoch_answers_no_epoch_for_known_partitions(admin, gateway_process, version):
    admin.create_topics({"epochs": {"num_partitions": 1}})
    produce(gateway_process, "epochs", 0, 3)
    response = raw_request(gateway_process.kafka, OFFSET_FOR_LEADER_EPOCH, version, {"topics": [
        {"topic": "epochs", "partitions": [{"partition": 0, "leader_epoch": -1}, {"partition": 1, "leader_epoch": 0}]}]})
    [topic] = response.topics
    assert [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in topic.partitions] == [
        (0, ErrorCode.NONE, -1, -1), (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]

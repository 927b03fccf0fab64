"""The committed leader epoch (KIP-320) against a real `gateway serve`: what OffsetCommit v6+ and
TxnOffsetCommit v2+ carry is what OffsetFetch v5+ answers, also after a restart, through
kafka-python and confluent-kafka (librdkafka)."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

TIMEOUT_S = 20.0


def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


def make_topic(gateway, partitions: int = 2) -> str:
    name = f"epoch-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(gateway))
    admin.create_topics([NewTopic(name, partitions, 1)])
    admin.close()
    return name


def kafka_python_committed(gateway, group: str, partition: TopicPartition) -> OffsetAndMetadata | None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway), group_id=group, enable_auto_commit=False)
    try:
        return consumer.committed(partition, metadata=True)
    finally:
        consumer.close()


def test_kafka_python_commits_and_fetches_the_leader_epoch_across_a_restart(gateway_launcher, tmp_path):
    data_dir = tmp_path / "data"
    gateway = gateway_launcher.start(data_dir=data_dir)
    topic = make_topic(gateway)
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway), group_id=group, enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "zero", 7),
                     TopicPartition(topic, 1): OffsetAndMetadata(0, "unknown epoch", -1)})
    consumer.close()
    assert kafka_python_committed(gateway, group, TopicPartition(topic, 0)) == OffsetAndMetadata(0, "zero", 7)
    gateway.stop()
    gateway = gateway_launcher.start(data_dir=data_dir)
    assert kafka_python_committed(gateway, group, TopicPartition(topic, 0)) == OffsetAndMetadata(0, "zero", 7)
    assert kafka_python_committed(gateway, group, TopicPartition(topic, 1)) == OffsetAndMetadata(0, "unknown epoch", -1)


def test_confluent_commit_and_transactional_commit_carry_the_leader_epoch(gateway_process):
    topic = make_topic(gateway_process)
    group = f"g-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": bootstrap(gateway_process), "transactional.id": f"t-{group}"})
    producer.init_transactions(TIMEOUT_S)
    consumer = Consumer({"bootstrap.servers": bootstrap(gateway_process), "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[ConfluentPartition(topic, 0, 2, leader_epoch=4)], asynchronous=False)
        producer.begin_transaction()
        producer.send_offsets_to_transaction([ConfluentPartition(topic, 1, 1, leader_epoch=9)],
                                             consumer.consumer_group_metadata(), TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)
        committed = consumer.committed([ConfluentPartition(topic, 0), ConfluentPartition(topic, 1)], TIMEOUT_S)
        assert [(tp.partition, tp.offset, tp.leader_epoch) for tp in committed] == [(0, 2, 4), (1, 1, 9)]
    finally:
        consumer.close()

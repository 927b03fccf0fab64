"""The delayed-delivery store's topics (`__delayed_messages`, `__delayed_index`) against a real
`gateway serve`: unmodified clients may read them, but every change a client can ask for (produce,
delete, delete records, add partitions, alter configs, create, auto-create, an AMQP queue over one)
is refused, so no client can lose or corrupt held messages; Kafka clients see them as internal
topics, which their default listings leave out."""

from __future__ import annotations

import time
import uuid

import pika
import pika.exceptions
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                  NewTopic)
from kafka import KafkaConsumer

from compat_tests.amqp.clients import connect
from compat_tests.conftest import start_gateway

HELD = "__delayed_messages"
INDEX = "__delayed_index"
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    process = start_gateway(tmp_path_factory.mktemp("system-topics"))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def bootstrap(gateway) -> str:
    """The gateway's Kafka address, once one record is held (so the store's topics exist)."""
    host, port = gateway.kafka
    address = f"{host}:{port}"
    topic = f"later-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(topic, 1, 1, config={"delayed.delivery.enable": "true"})])[topic].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": address})
    producer.produce(topic, b"in an hour", headers=[("deliver-after-ms", b"3600000")])
    assert producer.flush(TIMEOUT_S) == 0
    return address


def test_producing_to_a_system_topic_is_refused_and_stores_nothing(bootstrap) -> None:
    before = _end_offset(bootstrap, HELD)
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.send.max.retries": 0})
    producer.produce(HELD, b"forged", on_delivery=lambda error, _: errors.append(error))
    producer.flush(TIMEOUT_S)
    assert [error.code() for error in errors] == [KafkaError.TOPIC_EXCEPTION]
    assert _end_offset(bootstrap, HELD) == before


def test_admin_changes_to_system_topics_are_refused(bootstrap) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    refused = {
        "delete": admin.delete_topics([HELD])[HELD],
        "partitions": admin.create_partitions([NewPartitions(INDEX, 3)])[INDEX],
        "configs": next(iter(admin.incremental_alter_configs([ConfigResource(
            ConfigResource.Type.TOPIC, HELD, incremental_configs=[
                ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])]).values())),
        "delete records": next(iter(admin.delete_records([TopicPartition(HELD, 0, 1)]).values())),
    }
    for what, future in refused.items():
        with pytest.raises(Exception) as caught:
            future.result(TIMEOUT_S)
        assert caught.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, what
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert {HELD, INDEX} <= set(metadata.topics)
    assert len(metadata.topics[INDEX].partitions) == 1


def test_system_topics_are_internal_and_still_readable(bootstrap) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)   # exclude_internal_topics=True, as by default
    try:
        listed = consumer.topics()
    finally:
        consumer.close()
    assert HELD not in listed and INDEX not in listed and any(name.startswith("later-") for name in listed)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"look-{uuid.uuid4().hex[:8]}",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.assign([TopicPartition(HELD, 0, 0)])
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while (message := reader.poll(0.5)) is None or message.error() is not None:
            assert time.monotonic() < deadline, "nothing read from the held messages"
        assert message.value() == b"in an hour"
    finally:
        reader.close()


def test_a_system_topic_name_cannot_be_created_or_auto_created(gateway_process) -> None:
    """On a fresh gateway nothing was held yet: a client must not get there first."""
    host, port = gateway_process.kafka
    fresh = f"{host}:{port}"
    admin = AdminClient({"bootstrap.servers": fresh})
    with pytest.raises(Exception) as caught:
        admin.create_topics([NewTopic(INDEX, 1, 1)])[INDEX].result(TIMEOUT_S)
    assert caught.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    asked = Producer({"bootstrap.servers": fresh}).list_topics(INDEX, timeout=TIMEOUT_S)   # auto-create on
    assert asked.topics[INDEX].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert INDEX not in admin.list_topics(timeout=TIMEOUT_S).topics


def test_an_amqp_queue_over_a_system_topic_is_access_refused(gateway) -> None:
    connection = connect(gateway.amqp)
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
            connection.channel().queue_declare(HELD, durable=True)
        assert caught.value.reply_code == 403
    finally:
        connection.close()


def _end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)[1]
    finally:
        consumer.close()

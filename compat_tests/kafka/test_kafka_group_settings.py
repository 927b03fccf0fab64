"""The group coordinator's broker settings against a real `gateway serve`, through kafka-python and
confluent-kafka: group.min/max.session.timeout.ms, group.max.size and offsets.retention.minutes."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError
from kafka import KafkaConsumer, TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

TIMEOUT_S = 30.0


def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


def make_topic(gateway) -> str:
    name = f"groups-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(gateway))
    admin.create_topics([NewTopic(name, 2, 1)])
    admin.close()
    return name


def test_session_timeouts_outside_the_configured_bounds_are_refused(gateway_launcher):
    gateway = gateway_launcher.start("--kafka-group-min-session-timeout-ms", "7000",
                                     env={"GATEWAY_KAFKA_GROUP_MAX_SESSION_TIMEOUT_MS": "20000"})
    topic = make_topic(gateway)
    for session_ms in (6000, 25000):
        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap(gateway), group_id=f"g-{session_ms}",
                                 session_timeout_ms=session_ms, heartbeat_interval_ms=1000,
                                 request_timeout_ms=30_000)
        try:
            with pytest.raises(kafka_errors.InvalidSessionTimeoutError):
                consumer.poll(timeout_ms=int(TIMEOUT_S * 1000))
        finally:
            consumer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap(gateway), group_id="g-ok",
                             session_timeout_ms=10_000, heartbeat_interval_ms=1000)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer within the bounds got no assignment"
            consumer.poll(timeout_ms=200)
    finally:
        consumer.close()


def test_a_member_past_group_max_size_is_refused(gateway_launcher):
    gateway = gateway_launcher.start("--kafka-group-max-size", "1")
    topic = make_topic(gateway)
    first = Consumer({"bootstrap.servers": bootstrap(gateway), "group.id": "full", "session.timeout.ms": 10_000})
    second = Consumer({"bootstrap.servers": bootstrap(gateway), "group.id": "full", "session.timeout.ms": 10_000})
    try:
        first.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while not first.assignment():
            assert time.monotonic() < deadline, "the first member got no assignment"
            first.poll(0.2)
        second.subscribe([topic])
        refused = None
        while refused is None:
            assert time.monotonic() < deadline + TIMEOUT_S, "the second member was not refused"
            message = second.poll(0.2)
            if message is not None and message.error() is not None:
                refused = message.error()
            first.poll(0)
        assert refused.code() == KafkaError.GROUP_MAX_SIZE_REACHED
        assert len(first.assignment()) == 2 and second.assignment() == []
    finally:
        first.close()
        second.close()


@pytest.mark.slow
def test_committed_offsets_of_an_empty_group_expire_after_the_retention(gateway_launcher):
    gateway = gateway_launcher.start("--kafka-offsets-retention-minutes", "1",
                                     "--kafka-offsets-retention-check-interval-ms", "500")
    topic = make_topic(gateway)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(gateway))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway), group_id="short-lived", enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
        committed_at = time.monotonic()
        assert "short-lived" in [group["group_id"] for group in admin.list_groups()]
        while consumer.committed(TopicPartition(topic, 0)) is not None:
            assert time.monotonic() < committed_at + 60 + TIMEOUT_S, "the offsets did not expire"
            time.sleep(0.5)
        assert time.monotonic() - committed_at >= 59, "the offsets expired before the retention"
        assert "short-lived" not in [group["group_id"] for group in admin.list_groups()]
    finally:
        consumer.close()
        admin.close()

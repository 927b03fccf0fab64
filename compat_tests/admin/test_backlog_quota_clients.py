"""Backlog quotas with real clients: a subscription that falls behind makes Kafka producers get
POLICY_VIOLATION and AMQP publishers a basic.nack until it catches up (refuse_producers), or the
oldest records go (drop_oldest)."""

from __future__ import annotations

import pytest

from compat_tests.admin.test_namespace_policies import fresh_namespace
from compat_tests.conftest import wait_for

QUOTA = 20_000
VALUE = b"x" * 1000


def kafka_settings(gateway) -> dict:
    return dict(bootstrap_servers="%s:%d" % gateway.kafka, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="PLAIN", sasl_plain_username="writer", sasl_plain_password="w")


def commit_at(settings: dict, topic: str, offset: int) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    consumer = KafkaConsumer(group_id="billing", enable_auto_commit=False, **settings)
    consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)})
    consumer.close()


def test_a_slow_kafka_group_refuses_producers_until_it_catches_up(admin_gateway, api):
    from kafka import KafkaProducer
    from kafka.errors import PolicyViolationError

    tenant = fresh_namespace(api, backlog_quota_bytes=QUOTA)
    settings = kafka_settings(admin_gateway)
    producer = KafkaProducer(retries=0, **settings)
    for _ in range(40):
        producer.send("ledger", VALUE).get(timeout=20)
    commit_at(settings, "ledger", 0)

    def refused() -> bool:
        try:
            producer.send("ledger", VALUE).get(timeout=20)
            return False
        except PolicyViolationError:
            return True
    wait_for(refused, "the producer to be refused")
    end = api.get(f"/tenants/{tenant}/namespaces/ns/topics/ledger").json()["partitions"][0]["end_offset"]

    commit_at(settings, "ledger", end)       # the group caught up: producers are let in again
    wait_for(lambda: not refused(), "the producer to be let in")
    producer.close()
    topic = api.get(f"/tenants/{tenant}/namespaces/ns/topics/ledger").json()["partitions"][0]
    assert topic["start_offset"] == 0          # refusing drops nothing
    api.delete("/users/writer").raise_for_status()


def test_a_full_amqp_queue_nacks_publishes_under_confirms(admin_gateway, api):
    import pika

    tenant = fresh_namespace(api, backlog_quota_bytes=QUOTA)
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        *admin_gateway.amqp, virtual_host=f"{tenant}/ns", credentials=pika.PlainCredentials("writer", "w")))
    channel = connection.channel()
    channel.queue_declare("inbox")
    channel.confirm_delivery()

    def nacked(burst: int = 1) -> bool:
        """Publish up to `burst` messages; whether one was nacked (the quota's sweep may come at any
        of them, so the queue is filled by this same call)."""
        try:
            for _ in range(burst):
                channel.basic_publish("", "inbox", VALUE)
            return False
        except pika.exceptions.NackError:
            return True
    wait_for(lambda: nacked(burst=10), "a publish to be nacked")
    while channel.basic_get("inbox", auto_ack=True)[0] is not None:   # the queue is drained
        pass
    wait_for(lambda: not nacked(), "publishes to be confirmed again")
    connection.close()
    api.delete("/users/writer").raise_for_status()


def test_drop_oldest_moves_the_log_start_and_producers_go_on(admin_gateway, api):
    from kafka import KafkaProducer

    tenant = fresh_namespace(api, backlog_quota_bytes=QUOTA, backlog_quota_action="drop_oldest")
    settings = kafka_settings(admin_gateway)
    producer = KafkaProducer(**settings)
    producer.send("events", VALUE).get(timeout=20)
    commit_at(settings, "events", 0)               # a group that never reads on
    for _ in range(59):
        producer.send("events", VALUE).get(timeout=20)
    producer.close()

    def partition() -> dict:
        return api.get(f"/tenants/{tenant}/namespaces/ns/topics/events").json()["partitions"][0]
    wait_for(lambda: partition()["start_offset"] > 0, "the oldest records to go")
    kept = partition()
    assert kept["end_offset"] == 60
    assert kept["size_bytes"] > 0
    api.delete("/users/writer").raise_for_status()


@pytest.mark.parametrize("action", ["refuse_producers", "drop_oldest"])
def test_the_quota_policy_is_shown_as_set(admin_gateway, api, action):
    tenant = fresh_namespace(api, backlog_quota_bytes=QUOTA, backlog_quota_action=action)
    policies = api.get(f"/tenants/{tenant}/namespaces/ns").json()["policies"]
    assert (policies["backlog_quota_bytes"], policies["backlog_quota_action"]) == (QUOTA, action)
    api.delete("/users/writer").raise_for_status()

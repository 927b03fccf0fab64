"""Namespace policies with real clients: max_connections (Kafka SASL and AMQP), max_topics (Kafka
CreateTopics and AMQP queue.declare), and one publish rate held across Kafka and AMQP together."""

from __future__ import annotations

import uuid

import pytest


def fresh_namespace(api, **policies) -> str:
    tenant = f"pol-{uuid.uuid4().hex[:6]}"
    api.put(f"/tenants/{tenant}").raise_for_status()
    api.put(f"/tenants/{tenant}/namespaces/ns", json={"policies": policies}).raise_for_status()
    api.put("/users/writer", json={"password": "w", "tenant": tenant, "namespace": "ns"}).raise_for_status()
    return tenant


def test_max_connections_refuses_one_more_over_either_protocol(admin_gateway, api):
    import pika
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    tenant = fresh_namespace(api, max_connections=1)
    parameters = pika.ConnectionParameters(*admin_gateway.amqp, virtual_host=f"{tenant}/ns",
                                           credentials=pika.PlainCredentials("writer", "w"), connection_attempts=1)
    first = pika.BlockingConnection(parameters)
    with pytest.raises((pika.exceptions.ProbableAccessDeniedError, pika.exceptions.ConnectionClosedByBroker)):
        pika.BlockingConnection(parameters)
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers="%s:%d" % admin_gateway.kafka, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="PLAIN", sasl_plain_username="writer", sasl_plain_password="w",
                      bootstrap_timeout_ms=3000, max_block_ms=3000).send("t", b"x").get(timeout=10)
    first.close()
    pika.BlockingConnection(parameters).close()   # the place is free again
    api.delete("/users/writer").raise_for_status()


def test_max_topics_refuses_one_more_over_either_protocol(admin_gateway, api):
    import pika
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import PolicyViolationError

    tenant = fresh_namespace(api, max_topics=2)
    admin = KafkaAdminClient(bootstrap_servers="%s:%d" % admin_gateway.kafka, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="writer", sasl_plain_password="w")
    admin.create_topics([NewTopic("a", 1, 1)])
    with pytest.raises(PolicyViolationError):
        admin.create_topics([NewTopic("b", 1, 1), NewTopic("c", 1, 1)])
    admin.close()
    assert api.get(f"/tenants/{tenant}/namespaces/ns/topics").json()["total"] == 2
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        *admin_gateway.amqp, virtual_host=f"{tenant}/ns", credentials=pika.PlainCredentials("writer", "w")))
    with pytest.raises((pika.exceptions.ChannelClosedByBroker, pika.exceptions.ConnectionClosedByBroker)):
        connection.channel().queue_declare("one-too-many")
    if connection.is_open:
        connection.close()
    api.delete("/users/writer").raise_for_status()


def test_default_partitions_of_auto_created_topics(admin_gateway, api):
    from kafka import KafkaProducer

    tenant = fresh_namespace(api, default_partitions=3)
    producer = KafkaProducer(bootstrap_servers="%s:%d" % admin_gateway.kafka, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="writer", sasl_plain_password="w")
    producer.send("auto", b"x").get(timeout=20)
    producer.close()
    assert len(api.get(f"/tenants/{tenant}/namespaces/ns/topics/auto").json()["partitions"]) == 3
    api.delete("/users/writer").raise_for_status()


def test_message_ttl_is_the_default_of_queues_without_their_own(admin_gateway, api):
    import time

    import pika

    tenant = fresh_namespace(api, message_ttl_ms=200)
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        *admin_gateway.amqp, virtual_host=f"{tenant}/ns", credentials=pika.PlainCredentials("writer", "w")))
    channel = connection.channel()
    channel.queue_declare("short")
    channel.queue_declare("long", arguments={"x-message-ttl": 600_000})
    channel.confirm_delivery()
    for queue in ("short", "long"):
        channel.basic_publish("", queue, b"m")
    time.sleep(0.6)
    assert channel.basic_get("short", auto_ack=True) == (None, None, None)   # expired
    assert channel.basic_get("long", auto_ack=True)[2] == b"m"
    connection.close()
    api.delete("/users/writer").raise_for_status()


def test_one_publish_rate_holds_across_kafka_and_amqp(gateway_launcher, tmp_path):
    """A loose bound for a loaded machine; bench/namespace_rate.py measures the accuracy."""
    from bench.namespace_rate import ADMIN, CONFIG, measure

    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    gateway = gateway_launcher.start("--config", str(config))
    result = measure(gateway.admin_url, "%s:%d" % gateway.kafka, gateway.amqp, ADMIN, rate=500, seconds=4)
    assert 0.6 * 500 <= result["measured_rate"] <= 1.3 * 500, result
    assert result["amqp_blocked_notices"] >= 1, result   # AMQP's client was told why it was slowed


def test_one_dispatch_rate_holds_across_kafka_and_amqp(admin_gateway, api):
    """Reading 200 KB through both protocols at once takes at least what the shared rate allows
    (a lower bound on time: a slow machine only makes it longer; unlimited, it takes ~0.3 s)."""
    import threading
    import time

    import pika
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    tenant = fresh_namespace(api)
    kafka = dict(bootstrap_servers="%s:%d" % admin_gateway.kafka, security_protocol="SASL_PLAINTEXT",
                 sasl_mechanism="PLAIN", sasl_plain_username="writer", sasl_plain_password="w")
    body = b"d" * 1000
    producer = KafkaProducer(**kafka)
    for _ in range(100):
        producer.send("stream", body)
    producer.flush(timeout=20)
    producer.close()
    parameters = pika.ConnectionParameters(*admin_gateway.amqp, virtual_host=f"{tenant}/ns",
                                           credentials=pika.PlainCredentials("writer", "w"))
    connection = pika.BlockingConnection(parameters)
    channel = connection.channel()
    channel.queue_declare("work")
    channel.confirm_delivery()
    for _ in range(100):
        channel.basic_publish("", "work", body)
    rate = 50_000
    api.put(f"/tenants/{tenant}/namespaces/ns/policies", json={"dispatch_rate_bytes": rate}).raise_for_status()
    time.sleep(0.5)   # the policy reaches the gateway through a watch

    received = {"kafka": 0, "amqp": 0}

    def read_kafka() -> None:
        consumer = KafkaConsumer(max_partition_fetch_bytes=4096, fetch_max_bytes=4096, **kafka)
        consumer.assign([TopicPartition("stream", 0)])
        consumer.seek(TopicPartition("stream", 0), 0)
        deadline = time.monotonic() + 60
        while received["kafka"] < 100 and time.monotonic() < deadline:
            received["kafka"] += sum(len(records) for records in consumer.poll(500).values())
        consumer.close()

    began = time.monotonic()
    reader = threading.Thread(target=read_kafka)
    reader.start()
    deadline = time.monotonic() + 60
    for method, _properties, _body in channel.consume("work", auto_ack=True, inactivity_timeout=1):
        if method is not None:
            received["amqp"] += 1
        if received["amqp"] >= 100 or time.monotonic() > deadline:
            break
    channel.cancel()
    reader.join(70)
    elapsed = time.monotonic() - began
    connection.close()
    assert received == {"kafka": 100, "amqp": 100}
    assert elapsed >= 0.8 * (200 * len(body)) / rate, elapsed   # 4 s at the rate, less a burst
    api.delete("/users/writer").raise_for_status()

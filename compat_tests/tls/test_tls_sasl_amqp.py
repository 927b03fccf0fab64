"""SASL over TLS (SASL_SSL) for Kafka and amqps for AMQP on one gateway that requests client
certificates: SCRAM and PLAIN with confluent-kafka, kafka-python and aiokafka trusting only the CA;
pika and aio-pika over amqps with PLAIN, and with EXTERNAL as the user a certificate's CN names
(RabbitMQ's rabbitmq_auth_mechanism_ssl); the admin API tells how each connection logged in."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pika
import pytest

from compat_tests.tls.conftest import client_context, read_values

ADMIN = ("root", "root-secret")
ALICE_VHOST = "acme/payments"


def address(gateway, name: str) -> tuple[str, int]:
    host, _, port = gateway.ready[name].rpartition(":")
    return host, int(port)


def connections(gateway) -> list[dict]:
    host, port = gateway.admin
    return httpx.get(f"http://{host}:{port}/api/v1/connections", auth=ADMIN, timeout=20).json()


def test_confluent_kafka_scram_over_tls_trusting_only_the_ca(secured, certificates) -> None:
    from confluent_kafka import Consumer, Producer
    topic = f"sasl-ssl-{uuid.uuid4().hex[:6]}"
    conf = {"bootstrap.servers": "%s:%d" % address(secured, "kafka_tls"), "security.protocol": "SASL_SSL",
            "ssl.ca.location": certificates.ca, "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice", "sasl.password": "alice-secret"}
    producer = Producer(conf)
    delivered = []
    producer.produce(topic, b"scram over tls", on_delivery=lambda error, message: delivered.append(error))
    assert producer.flush(30) == 0 and delivered == [None]
    consumer = Consumer({**conf, "group.id": "sasl-ssl", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(1)
        assert message is not None and message.error() is None and message.value() == b"scram over tls"
        mine = [c for c in connections(secured) if c["client_id"] == "rdkafka"]
        assert mine and all(c["user"] == "alice" and c["mechanism"] == "SCRAM-SHA-256" and c["tls"] is not None
                            and c["tls"]["client_certificate"] is None for c in mine)
    finally:
        consumer.close()


def test_kafka_python_plain_and_aiokafka_scram_512_over_tls(secured, certificates) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    bootstrap = "%s:%d" % address(secured, "kafka_tls")
    topic = f"sasl-ssl-clients-{uuid.uuid4().hex[:6]}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SASL_SSL", ssl_cafile=certificates.ca,
                             sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="bob-secret")
    producer.send(topic, b"plain").get(timeout=30)
    producer.close()

    async def aiokafka_send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, security_protocol="SASL_SSL",
                                    ssl_context=create_ssl_context(cafile=certificates.ca),
                                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="bob",
                                    sasl_plain_password="bob-secret")
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"scram-512")
        finally:
            await producer.stop()

    asyncio.run(aiokafka_send())
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, security_protocol="SASL_SSL",
                             ssl_cafile=certificates.ca, sasl_mechanism="SCRAM-SHA-256",
                             sasl_plain_username="bob", sasl_plain_password="bob-secret")
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    assert read_values(consumer, 2) == [b"plain", b"scram-512"]
    consumer.close()


def test_sasl_over_tls_still_needs_its_password(secured, certificates, caplog) -> None:
    # A client certificate does not replace SASL on a SASL_SSL listener
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError
    from aiokafka.helpers import create_ssl_context

    async def log_in() -> None:
        producer = AIOKafkaProducer(bootstrap_servers="%s:%d" % address(secured, "kafka_tls"),
                                    security_protocol="SASL_SSL",
                                    ssl_context=create_ssl_context(cafile=certificates.ca,
                                                                   certfile=certificates.alice.cert,
                                                                   keyfile=certificates.alice.key),
                                    sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="wrong")
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(KafkaError):
        asyncio.run(log_in())
    assert "SaslAuthenticationFailed" in caplog.text


def pika_parameters(secured, certificates, pair=None, **options) -> pika.ConnectionParameters:
    host, port = address(secured, "amqp_tls")
    ssl_options = pika.SSLOptions(client_context(certificates, pair), host)
    return pika.ConnectionParameters(host, port, ssl_options=ssl_options, connection_attempts=1, **options)


def round_trip(parameters: pika.ConnectionParameters) -> bytes:
    with pika.BlockingConnection(parameters) as connection:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"over amqps")
        for _ in range(100):
            method, _, body = channel.basic_get(queue, auto_ack=True)
            if method is not None:
                return body
            time.sleep(0.05)
    raise AssertionError("the message never came back")


def test_pika_over_amqps_with_a_password(secured, certificates) -> None:
    parameters = pika_parameters(secured, certificates, virtual_host=ALICE_VHOST,
                                 credentials=pika.PlainCredentials("alice", "alice-secret"))
    assert round_trip(parameters) == b"over amqps"


def test_pika_logs_in_with_external_as_the_certificates_cn(secured, certificates) -> None:
    parameters = pika_parameters(secured, certificates, certificates.alice, virtual_host=ALICE_VHOST,
                                 credentials=pika.credentials.ExternalCredentials())
    with pika.BlockingConnection(parameters) as connection:
        connection.channel()
        mine = [c for c in connections(secured) if c["protocol"] == "amqp" and c["mechanism"] == "EXTERNAL"]
        assert len(mine) == 1 and mine[0]["user"] == "alice" and mine[0]["tenant"] == "acme"
        assert mine[0]["tls"]["client_certificate"].startswith("CN=alice,")
    assert round_trip(parameters) == b"over amqps"


def test_external_refuses_a_cn_that_is_no_user_or_no_certificate_and_is_not_on_the_plaintext_port(
        secured, certificates) -> None:
    stranger = pika_parameters(secured, certificates, certificates.carol,
                               credentials=pika.credentials.ExternalCredentials())
    with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="ACCESS_REFUSED"):
        pika.BlockingConnection(stranger)
    without_certificate = pika_parameters(secured, certificates, credentials=pika.credentials.ExternalCredentials())
    with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="ACCESS_REFUSED"):
        pika.BlockingConnection(without_certificate)
    host, port = secured.amqp
    plaintext = pika.ConnectionParameters(host, port, credentials=pika.credentials.ExternalCredentials(),
                                          connection_attempts=1)
    with pytest.raises(pika.exceptions.AuthenticationError):
        pika.BlockingConnection(plaintext)


def test_aio_pika_over_amqps_with_external(secured, certificates) -> None:
    import aio_pika
    host, port = address(secured, "amqp_tls")

    async def round() -> bytes:
        connection = await aio_pika.connect(f"amqps://{host}:{port}/acme%2Fpayments?auth=external",
                                            ssl_context=client_context(certificates, certificates.alice))
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(exclusive=True)
            await channel.default_exchange.publish(aio_pika.Message(b"aio-pika external"), routing_key=queue.name)
            message = await queue.get(timeout=10, fail=True)
            await message.ack()
            return message.body

    assert asyncio.run(round()) == b"aio-pika external"

"""SASL PLAIN and SCRAM-SHA-256/512 with kafka-python, aiokafka and confluent-kafka against a real
gateway that requires authentication; a user lands in its tenant/namespace."""

import asyncio
import socket
import struct
import time
import uuid

import pytest

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

CONFIG = """
[kafka]
sasl_mechanisms = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
# With SASL on, ACLs are enforced: these tests are about logging in, so both users may do anything.
super_users = "User:alice,User:bob"

[[users]]
name = "alice"
password = "alice-secret"
tenant = "acme"
namespace = "payments"

[[users]]
name = "bob"
password = "bob-secret"
"""


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    from compat_tests.conftest import start_gateway
    tmp = tmp_path_factory.mktemp("sasl")
    config = tmp / "gateway.toml"
    config.write_text(CONFIG)
    gateway = start_gateway(tmp, "--config", str(config))
    yield gateway
    gateway.stop()


def bootstrap(gateway) -> str:
    return "%s:%d" % gateway.kafka


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_logs_in_and_round_trips(secured, mechanism: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    topic = f"kp-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    auth = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username="alice", sasl_plain_password="alice-secret")
    producer = KafkaProducer(bootstrap_servers=bootstrap(secured), **auth)
    producer.send(topic, b"hello").get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(secured), consumer_timeout_ms=5000, **auth)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    assert [m.value for m in consumer] == [b"hello"]
    consumer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_wrong_password_fails_authentication(secured, mechanism: str, caplog) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError
    # kafka-python retries a failed login until max_block_ms, then times out; the broker's answer
    # (SASL_AUTHENTICATION_FAILED, error 58) is what it logs for each try.
    with pytest.raises(KafkaTimeoutError):
        KafkaProducer(bootstrap_servers=bootstrap(secured), security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism=mechanism, sasl_plain_username="alice", sasl_plain_password="wrong",
                      bootstrap_timeout_ms=2000, max_block_ms=2000).send("t", b"x").get(timeout=10)
    assert "[Error 58] SaslAuthenticationFailedError" in caplog.text


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_logs_in_and_wrong_password_is_reported(secured, mechanism: str) -> None:
    from confluent_kafka import Consumer, KafkaError, Producer
    topic = f"ck-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    good = {"bootstrap.servers": bootstrap(secured), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": "bob", "sasl.password": "bob-secret"}
    producer = Producer({**good, "enable.idempotence": True})
    delivered = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(20) == 0 and delivered == [None]
    consumer = Consumer({**good, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    message = None
    while message is None and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error():
            message = None
    consumer.close()
    assert message is not None and message.value() == b"v"

    errors = []
    bad = Producer({**good, "sasl.password": "nope", "error_cb": errors.append})
    bad.produce(topic, b"never")
    bad.flush(5)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_aiokafka_logs_in(secured, mechanism: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def produce() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap(secured), security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism=mechanism, sasl_plain_username="alice",
                                    sasl_plain_password="alice-secret")
        await producer.start()
        try:
            return (await producer.send_and_wait(f"aio-{uuid.uuid4().hex[:6]}", b"x")).offset
        finally:
            await producer.stop()
    assert asyncio.run(produce()) == 0


def test_users_see_only_their_tenant(secured) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    def admin(user: str, password: str) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=bootstrap(secured), security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=password)
    alice, bob = admin("alice", "alice-secret"), admin("bob", "bob-secret")
    name = f"private-{uuid.uuid4().hex[:6]}"
    alice.create_topics([NewTopic(name, 1, 1)])
    assert name in alice.list_topics()
    assert name not in bob.list_topics()
    alice.close()
    bob.close()


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, 7, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_requests_before_authentication_close_the_connection(secured) -> None:
    metadata_v1_all_topics = struct.pack(">i", -1)
    with socket.create_connection(secured.kafka, timeout=5) as sock:
        sock.sendall(_frame(3, 1, metadata_v1_all_topics))
        assert sock.recv(100) == b""   # closed without an answer


def test_oversized_frames_before_authentication_close_the_connection(secured) -> None:
    with socket.create_connection(secured.kafka, timeout=5) as sock:
        sock.sendall(struct.pack(">i", 600 * 1024) + b"\0" * 1024)
        assert sock.recv(100) == b""


def test_confluent_admin_sets_describes_and_deletes_scram_credentials_that_then_log_in(secured) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialDeletion, UserScramCredentialUpsertion)
    auth = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": "alice-secret"}
    admin = AdminClient({"bootstrap.servers": bootstrap(secured), **auth})
    user = f"carol{uuid.uuid4().hex[:6]}"
    sha256, sha512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512

    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(sha512, 8192), b"carol-secret", b"salt-of-carol"),
               UserScramCredentialUpsertion("x", ScramCredentialInfo(sha256, 1000), b"pw")]
    outcome = admin.alter_user_scram_credentials(upserts)
    assert outcome[user].result() is None
    with pytest.raises(KafkaException, match="Too few iterations"):
        outcome["x"].result()

    described = admin.describe_user_scram_credentials([user])[user].result()
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [(sha512, 8192)]
    assert user in admin.describe_user_scram_credentials().result()   # every user
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result()

    login = {"bootstrap.servers": bootstrap(secured), "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user}
    # Logged in, then refused by the ACLs (the new user has none) ...
    delivered = []
    producer = Producer({**login, "sasl.password": "carol-secret", "message.timeout.ms": 10000})
    producer.produce("scram-admin", b"hi", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(15)
    assert [e.code() for e in delivered] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # ... while a wrong password never gets that far.
    errors = []
    bad = Producer({**login, "sasl.password": "wrong", "error_cb": errors.append})
    bad.produce("scram-admin", b"never")
    bad.flush(5)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors

    assert admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, sha512)])[user].result() is None
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials([user])[user].result()

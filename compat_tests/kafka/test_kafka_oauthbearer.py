"""SASL OAUTHBEARER (KIP-255) with confluent-kafka, kafka-python and aiokafka against a real gateway
that checks JWTs against the key set a local token issuer serves; refused tokens, and logins that
last as long as their token unless the client re-authenticates (KIP-368)."""

import asyncio
import socket
import struct
import time
import uuid

import httpx
import pytest

from compat_tests.kafka.wire_call import receive_exactly
from compat_tests.token_issuer import AUDIENCE, ISSUER, SigningKey, TokenIssuer
from protocols.kafka.codec import types as t
from protocols.kafka.codec.compile import request_codec, response_codec
from protocols.kafka.schema.metadata import METADATA
from protocols.kafka.schema.sasl_authenticate import SASL_AUTHENTICATE
from protocols.kafka.schema.sasl_handshake import SASL_HANDSHAKE

CONFIG = """
[kafka]
sasl_mechanisms = "OAUTHBEARER,PLAIN"
# With SASL on, ACLs are enforced: these tests are about logging in.
super_users = "User:alice,User:bob,User:carol"
oauth_jwks_url = "{url}"
oauth_issuer = "{issuer}"
oauth_audience = "{audience}"
oauth_tenant_claim = "tenant"

[[users]]
name = "bob"
password = "bob-secret"
tenant = "acme"
namespace = "payments"

[[users]]
name = "admin"
password = "admin-secret"
tags = ["administrator"]
"""

SASL_AUTHENTICATION_FAILED = 58
INVALID_TOKEN = b'{"status":"invalid_token"}'


@pytest.fixture(scope="module")
def issuer():
    issuer = TokenIssuer("RSA", "EC")
    yield issuer
    issuer.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory, issuer):
    from compat_tests.conftest import start_gateway
    tmp = tmp_path_factory.mktemp("oauth")
    config = tmp / "gateway.toml"
    config.write_text(CONFIG.format(url=issuer.serve(), issuer=ISSUER, audience=AUDIENCE))
    gateway = start_gateway(tmp, "--config", str(config))
    yield gateway
    gateway.stop()


def mint(source: TokenIssuer, subject: str = "alice", **claims) -> str:
    """This gateway names tenants by a claim: every token carries one."""
    return source.mint(subject, **{"tenant": "public", **claims})


def bootstrap(gateway) -> str:
    return "%s:%d" % gateway.kafka


def consume_one(consumer, deadline_s: float = 30):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            return message
    return None


# --- the clients ----------------------------------------------------------------------------------


def confluent_auth(issuer: TokenIssuer, subject: str = "alice", lifetime_s: float = 300, calls=None) -> dict:
    def oauth_cb(_config: str):
        if calls is not None:
            calls.append(time.monotonic())
        # The expiry librdkafka is told is the token's own: it refreshes at 80% of it.
        expires = int(time.time() + lifetime_s)
        return mint(issuer, subject, exp=expires), expires, subject, {}
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}


def test_confluent_kafka_logs_in_with_a_token_and_round_trips(secured, issuer) -> None:
    from confluent_kafka import Consumer, Producer
    topic = f"ck-oauth-{uuid.uuid4().hex[:6]}"
    auth = {"bootstrap.servers": bootstrap(secured), **confluent_auth(issuer)}
    producer = Producer({**auth, "enable.idempotence": True})
    delivered = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(20) == 0 and delivered == [None]
    consumer = Consumer({**auth, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    message = consume_one(consumer)
    consumer.close()
    assert message is not None and message.value() == b"v"


def test_kafka_python_and_aiokafka_log_in_with_a_token_provider(secured, issuer) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider as AsyncTokenProvider
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return mint(issuer)

    class AsyncProvider(AsyncTokenProvider):
        async def token(self) -> str:
            return mint(issuer)

    topic = f"kp-oauth-{uuid.uuid4().hex[:6]}"
    auth = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER")
    producer = KafkaProducer(bootstrap_servers=bootstrap(secured), sasl_oauth_token_provider=Provider(), **auth)
    producer.send(topic, b"from kafka-python").get(timeout=20)
    producer.close()

    async def produce() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap(secured), sasl_oauth_token_provider=AsyncProvider(),
                                    **auth)
        await producer.start()
        try:
            return (await producer.send_and_wait(topic, b"from aiokafka")).offset
        finally:
            await producer.stop()
    assert asyncio.run(produce()) == 1

    consumer = KafkaConsumer(bootstrap_servers=bootstrap(secured), consumer_timeout_ms=5000,
                             sasl_oauth_token_provider=Provider(), **auth)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    assert [m.value for m in consumer] == [b"from kafka-python", b"from aiokafka"]
    consumer.close()


def test_a_token_user_lands_in_its_stored_tenant_or_the_one_its_token_names(secured, issuer) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def __init__(self, token: str) -> None:
            self._token = token

        def token(self) -> str:
            return self._token

    def admin(**login) -> KafkaAdminClient:
        if "token" in login:
            login = dict(sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Provider(login["token"]))
        else:
            login = dict(sasl_mechanism="PLAIN", sasl_plain_username=login["user"], sasl_plain_password=login["password"])
        return KafkaAdminClient(bootstrap_servers=bootstrap(secured), security_protocol="SASL_PLAINTEXT", **login)

    # carol is no stored user: her token's claim puts her in acme/payments, where bob's password puts him.
    carol = admin(token=mint(issuer, "carol", tenant="acme/payments"))
    bob_password = admin(user="bob", password="bob-secret")
    bob_token = admin(token=mint(issuer, "bob", tenant="public"))    # stored: his tenant, not the claim's
    alice = admin(token=mint(issuer, "alice"))
    name = f"acme-{uuid.uuid4().hex[:6]}"
    carol.create_topics([NewTopic(name, 1, 1)])
    assert name in bob_password.list_topics() and name in bob_token.list_topics()
    assert name not in alice.list_topics()
    for client in (carol, bob_password, bob_token, alice):
        client.close()


# --- refusals --------------------------------------------------------------------------------------


class Wire:
    """One Kafka connection spoken by hand with the gateway's own codec: for the exact SASL answers."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=15)
        self._correlation = 0

    def call(self, api, version: int, body: dict):
        self._correlation += 1
        payload = bytearray(struct.pack(">hhih", api.key, version, self._correlation, 4) + b"wire")
        if api.is_flexible(version):
            payload += b"\x00"
        request_codec(api, version).write(payload, body)
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", receive_exactly(self.sock, 4))[0]
        reader = t.Reader(receive_exactly(self.sock, size))
        assert reader.unpack(struct.Struct(">i")) == self._correlation
        if api.is_flexible(version):
            assert reader.uvarint() == 0
        return response_codec(api, version).read(reader)

    def authenticate(self, token: str, mechanism: str = "OAUTHBEARER"):
        assert self.call(SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == 0
        message = f"n,,\x01auth=Bearer {token}\x01\x01".encode() if mechanism == "OAUTHBEARER" else token.encode()
        return self.call(SASL_AUTHENTICATE, 1, {"auth_bytes": message})

    def metadata(self):
        return self.call(METADATA, 1, {"topics": []})

    def closed(self) -> bool:
        return self.sock.recv(100) == b""

    def close(self) -> None:
        self.sock.close()


BAD_TOKENS = {
    "expired": lambda issuer: mint(issuer, lifetime_s=-120),
    "wrong issuer": lambda issuer: mint(issuer, issuer="https://elsewhere.test"),
    "wrong audience": lambda issuer: mint(issuer, audience="another-service"),
    "wrong key": lambda issuer: mint(issuer, key=SigningKey("EC")),
    "garbage": lambda issuer: "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtYWxsb3J5In0.c2lnbmF0dXJl",
}


@pytest.mark.parametrize("case", BAD_TOKENS)
def test_a_refused_token_gets_the_json_error_then_authentication_failed(secured, issuer, case: str) -> None:
    wire = Wire(secured.kafka)
    challenge = wire.authenticate(BAD_TOKENS[case](issuer))
    assert (challenge.error_code, bytes(challenge.auth_bytes)) == (0, INVALID_TOKEN)
    final = wire.call(SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x01"})   # the client's acknowledgement
    assert final.error_code == SASL_AUTHENTICATION_FAILED
    assert wire.closed()
    wire.close()


def test_a_malformed_oauthbearer_message_fails_at_once(secured) -> None:
    wire = Wire(secured.kafka)
    assert wire.call(SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
    answer = wire.call(SASL_AUTHENTICATE, 1, {"auth_bytes": b"n,,\x01auth=Basic abc\x01\x01"})
    assert answer.error_code == SASL_AUTHENTICATION_FAILED and wire.closed()
    wire.close()


def test_clients_report_a_refused_token(secured, issuer) -> None:
    from confluent_kafka import KafkaError, Producer
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    def expired(_config: str):   # librdkafka is told a later expiry, so it sends the token
        return mint(issuer, lifetime_s=-120), time.time() + 60, "alice", {}

    errors = []
    producer = Producer({"bootstrap.servers": bootstrap(secured), "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "OAUTHBEARER", "oauth_cb": expired, "error_cb": errors.append})
    producer.produce("never", b"x")
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    del producer   # no more retries while the next tests run
    assert any(e.code() == KafkaError._AUTHENTICATION and "invalid_token" in e.str() for e in errors), errors

    # aiokafka does not read the server's answer: it takes the JSON error for success, sends Metadata
    # unauthenticated, and the connection is closed.
    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider as AsyncTokenProvider
    from aiokafka.errors import KafkaConnectionError

    class WrongKey(AsyncTokenProvider):
        async def token(self) -> str:
            return mint(issuer, key=SigningKey("RSA"))

    async def start() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap(secured), security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=WrongKey())
        try:
            await producer.start()
        finally:
            await producer.stop()
    with pytest.raises(KafkaConnectionError):
        asyncio.run(start())

    class WrongAudience(AbstractTokenProvider):
        def token(self) -> str:
            return mint(issuer, audience="another-service")
    with pytest.raises(KafkaTimeoutError):
        KafkaProducer(bootstrap_servers=bootstrap(secured), security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=WrongAudience(),
                      bootstrap_timeout_ms=1000, max_block_ms=1000).send("t", b"x").get(timeout=10)


# --- session lifetime and re-authentication (KIP-368) ----------------------------------------------


def test_the_session_lasts_until_the_token_expires_and_re_authentication_extends_it(secured, issuer) -> None:
    renewed, lapsed = Wire(secured.kafka), Wire(secured.kafka)
    expires = int(time.time()) + 2
    for wire in (renewed, lapsed):
        answer = wire.authenticate(mint(issuer, exp=expires))
        assert answer.error_code == 0 and 0 < answer.session_lifetime_ms <= 2000
        assert wire.metadata().brokers
    again = renewed.authenticate(mint(issuer, lifetime_s=300))    # the same principal, a new token
    assert again.error_code == 0 and again.session_lifetime_ms > 250_000
    time.sleep(max(0.0, expires + 0.5 - time.time()))             # past the first token's expiry
    assert renewed.metadata().brokers                             # still logged in
    # A client that did not re-authenticate is closed at its first request after the expiry.
    lapsed.sock.sendall(struct.pack(">i", 14) + struct.pack(">hhih", 3, 1, 99, 0) + struct.pack(">i", 0))
    assert lapsed.closed()
    renewed.close()
    lapsed.close()


def test_re_authentication_must_keep_the_principal_and_the_mechanism(secured, issuer) -> None:
    wire = Wire(secured.kafka)
    assert wire.authenticate(mint(issuer, "alice")).error_code == 0
    assert wire.authenticate(mint(issuer, "carol")).error_code == SASL_AUTHENTICATION_FAILED
    assert wire.closed()
    wire.close()
    wire = Wire(secured.kafka)
    assert wire.authenticate(mint(issuer, "bob")).error_code == 0
    assert wire.authenticate("\0bob\0bob-secret", mechanism="PLAIN").error_code == SASL_AUTHENTICATION_FAILED
    assert wire.closed()
    wire.close()


def test_librdkafka_and_kafka_python_re_authenticate_with_fresh_tokens_on_the_same_connections(secured,
                                                                                             issuer) -> None:
    from confluent_kafka import Producer
    from kafka import KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            calls.append(time.monotonic())
            return mint(issuer, lifetime_s=5)

    calls: list[float] = []
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    lapsed_before = secured.stderr.count("expired without re-authentication")
    confluent = Producer({"bootstrap.servers": bootstrap(secured), "enable.idempotence": True,
                          **confluent_auth(issuer, "alice", lifetime_s=5, calls=calls)})
    python = KafkaProducer(bootstrap_servers=bootstrap(secured), security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Provider())
    delivered = []
    confluent.produce(topic, b"0", on_delivery=lambda err, msg: delivered.append(err))
    assert confluent.flush(20) == 0
    futures = [python.send(topic, b"0")]
    futures[0].get(timeout=20)
    before = alice_connections(secured)
    # Past the first tokens' expiry: each connection must have re-authenticated with a new token to
    # live on. librdkafka asks oauth_cb for a new token at 80% of the old one's lifetime, from
    # poll(); kafka-python asks its provider at each re-authentication.
    sent = 1
    deadline = time.monotonic() + 7
    while time.monotonic() < deadline:
        confluent.produce(topic, str(sent).encode(), on_delivery=lambda err, msg: delivered.append(err))
        futures.append(python.send(topic, str(sent).encode()))
        sent += 1
        confluent.poll(0.2)
    assert confluent.flush(60) == 0
    assert delivered == [None] * sent and all(f.get(timeout=60) for f in futures)
    after = alice_connections(secured)
    python.close()
    assert len(calls) >= 4                                          # both refreshed their tokens
    # On time, each connection re-authenticated in place. A client held up past its token's expiry (a
    # loaded machine can delay librdkafka's refresh from poll()) has that connection closed, as Kafka
    # does, and the gateway says so: then, and only then, a connection may have been opened again.
    if secured.stderr.count("expired without re-authentication") == lapsed_before:
        assert before and after and after <= before                 # no connection was opened again


def alice_connections(gateway) -> set[int]:
    response = httpx.get(f"{gateway.admin_url}/api/v1/connections", auth=("admin", "admin-secret"), timeout=10)
    response.raise_for_status()
    return {c["id"] for c in response.json() if c["user"] == "alice" and c["protocol"] == "kafka"}

"""AMQP logins with a JWT as the password, as RabbitMQ's OAuth 2 backend takes them, seen by pika
against a real gateway that reads the token issuer's key set (JWKS) from a file; a token login ends
when its token expires unless connection.update-secret brings a new one."""

from __future__ import annotations

import time

import httpx
import pika
import pika.exceptions
import pytest

from compat_tests.amqp.clients import unique
from compat_tests.token_issuer import AUDIENCE, ISSUER, SigningKey, TokenIssuer

CONFIG = """
[kafka]
oauth_jwks_file = "{jwks}"
oauth_issuer = "{issuer}"
oauth_audience = "{audience}"

[[users]]
name = "owner"
password = "owner-secret"
tenant = "acme"
namespace = "orders"

[[users]]
name = "admin"
password = "admin-secret"
tags = ["administrator"]
"""


@pytest.fixture(scope="module")
def issuer() -> TokenIssuer:
    return TokenIssuer("EC")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, issuer):
    from compat_tests.conftest import start_gateway
    tmp = tmp_path_factory.mktemp("amqp-oauth")
    config = tmp / "gateway.toml"
    config.write_text(CONFIG.format(jwks=issuer.write(tmp / "jwks.json"), issuer=ISSUER, audience=AUDIENCE))
    process = start_gateway(tmp, "--config", str(config))
    yield process
    process.stop()


def connect(gateway, password: str, vhost: str = "/", username: str = "ignored") -> pika.BlockingConnection:
    host, port = gateway.amqp
    return pika.BlockingConnection(pika.ConnectionParameters(host, port, vhost, pika.PlainCredentials(username, password),
                                                             connection_attempts=1))


def round_trip(connection: pika.BlockingConnection) -> bytes:
    channel = connection.channel()
    queue = channel.queue_declare(unique("oauth"), exclusive=True).method.queue
    channel.basic_publish("", queue, b"hello")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        _, _, body = channel.basic_get(queue, auto_ack=True)
        if body is not None:
            return body
        connection.sleep(0.05)
    return b""


def test_a_token_as_the_password_logs_in_as_the_user_it_names(gateway, issuer) -> None:
    connection = connect(gateway, issuer.mint("alice"), username="whoever")
    assert round_trip(connection) == b"hello"
    listed = httpx.get(f"{gateway.admin_url}/api/v1/connections", auth=("admin", "admin-secret"), timeout=10).json()
    assert "alice" in {c["user"] for c in listed if c["protocol"] == "amqp"}
    connection.close()


def test_a_stored_user_with_a_token_opens_its_own_vhost_and_passwords_still_work(gateway, issuer) -> None:
    for password in (issuer.mint("owner"), "owner-secret"):
        connection = connect(gateway, password, vhost="acme/orders", username="owner")
        assert round_trip(connection) == b"hello"
        connection.close()
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):   # alice lands in the default tenant
        connect(gateway, issuer.mint("alice"), vhost="acme/orders")


@pytest.mark.parametrize("case", ["expired", "wrong key", "wrong audience", "forged"])
def test_refused_tokens_do_not_log_in(gateway, issuer, case: str) -> None:
    token = {
        "expired": lambda: issuer.mint("alice", lifetime_s=-120),
        "wrong key": lambda: issuer.mint("alice", key=SigningKey("EC")),
        "wrong audience": lambda: issuer.mint("alice", audience="someone-else"),
        "forged": lambda: issuer.mint("alice")[:-8] + "AAAAAAAA",
    }[case]()
    with pytest.raises((pika.exceptions.ProbableAuthenticationError, pika.exceptions.AuthenticationError)):
        connect(gateway, token)


def test_a_token_login_ends_with_its_token_unless_update_secret_renews_it(gateway, issuer) -> None:
    expires = int(time.time()) + 3
    lapsing = connect(gateway, issuer.mint("alice", exp=expires))
    renewed = connect(gateway, issuer.mint("alice", exp=expires))
    renewed.update_secret(issuer.mint("alice", lifetime_s=300), "token refreshed")
    hijacked = connect(gateway, issuer.mint("alice", exp=expires))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as refused:
        hijacked.update_secret(issuer.mint("mallory", lifetime_s=300), "another user")
    assert refused.value.reply_code == 530

    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        while time.time() < expires + 4:
            lapsing.process_data_events(time_limit=0.2)
    assert closed.value.reply_code == 403 and closed.value.reply_text.endswith("credential expired")
    assert round_trip(renewed) == b"hello"     # past the first token's expiry, on the new one
    renewed.close()

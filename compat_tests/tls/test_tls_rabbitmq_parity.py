"""amqps side by side: the gateway and RabbitMQ (Debian's 3.10, its TLS listener and the
rabbitmq_auth_mechanism_ssl plugin with ssl_cert_login_from = common_name), the same pika client
and the same certificates, the same outcomes: PLAIN over TLS, EXTERNAL as the certificate's CN, a
CN that is no user refused with ACCESS_REFUSED, and so is EXTERNAL from a client without a
certificate."""

from __future__ import annotations

import time

import pika
import pytest

from compat_tests.tls.conftest import client_context

@pytest.fixture(scope="module")
def rabbitmq_amqps(tmp_path_factory, certificates):
    from bench.rabbitmq import RABBIT_BIN, pick_port, start_rabbitmq
    if not (RABBIT_BIN / "rabbitmq-server").exists():
        pytest.skip(f"no rabbitmq-server in {RABBIT_BIN}: nothing to compare with")
    port = pick_port(5860)
    tls_port = pick_port(port + 1)
    tls = (f"listeners.ssl.default = 127.0.0.1:{tls_port}\n"
           f"ssl_options.cacertfile = {certificates.ca}\n"
           f"ssl_options.certfile = {certificates.server.cert}\n"
           f"ssl_options.keyfile = {certificates.server.key}\n"
           "ssl_options.verify = verify_peer\n"
           "ssl_options.fail_if_no_peer_cert = false\n"
           "ssl_cert_login_from = common_name\n"
           "auth_mechanisms.1 = EXTERNAL\nauth_mechanisms.2 = PLAIN\nauth_mechanisms.3 = AMQPLAIN\n")
    node = start_rabbitmq(tmp_path_factory.mktemp("rabbit-tls"), port, extra_config=tls,
                          plugins=("rabbitmq_auth_mechanism_ssl",))
    try:
        node.ctl("add_user", "alice", "alice-secret")
        node.ctl("set_permissions", "-p", "/", "alice", ".*", ".*", ".*")
        yield tls_port
    finally:
        node.stop()


@pytest.fixture(params=["gateway", "rabbitmq"])
def amqps(request) -> tuple[str, int, str]:
    """host, TLS port, and the vhost alice may open: her tenant/namespace on the gateway (the shared
    `secured` one), "/" on RabbitMQ."""
    if request.param == "gateway":
        host, _, port = request.getfixturevalue("secured").ready["amqp_tls"].rpartition(":")
        return host, int(port), "acme/payments"
    return "127.0.0.1", request.getfixturevalue("rabbitmq_amqps"), "/"


def parameters(amqps, certificates, pair=None, **options) -> pika.ConnectionParameters:
    host, port, vhost = amqps
    return pika.ConnectionParameters(host, port, ssl_options=pika.SSLOptions(client_context(certificates, pair), host),
                                     virtual_host=vhost, connection_attempts=1, **options)


def round_trip(params: pika.ConnectionParameters) -> bytes:
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"amqps")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            method, _, body = channel.basic_get(queue, auto_ack=True)
            if method is not None:
                return body
            time.sleep(0.05)
    raise AssertionError("nothing came back")


def test_plain_over_tls(amqps, certificates) -> None:
    assert round_trip(parameters(amqps, certificates,
                                 credentials=pika.PlainCredentials("alice", "alice-secret"))) == b"amqps"


def test_external_logs_in_the_certificates_cn(amqps, certificates) -> None:
    assert round_trip(parameters(amqps, certificates, certificates.alice,
                                 credentials=pika.credentials.ExternalCredentials())) == b"amqps"


def test_external_refuses_a_cn_that_is_no_user(amqps, certificates) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="ACCESS_REFUSED"):
        pika.BlockingConnection(parameters(amqps, certificates, certificates.carol,
                                           credentials=pika.credentials.ExternalCredentials()))


def test_external_without_a_certificate_is_refused(amqps, certificates) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="ACCESS_REFUSED"):
        pika.BlockingConnection(parameters(amqps, certificates, credentials=pika.credentials.ExternalCredentials()))

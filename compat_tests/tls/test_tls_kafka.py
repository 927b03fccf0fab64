"""Kafka over TLS with client certificates as logins (an SSL listener, no SASL): confluent-kafka,
kafka-python, aiokafka and kcat log in as User:<CN> and land in that user's tenant; handshakes
that must fail (no certificate, another CA, an expired or revoked certificate, plaintext, garbage, a client
that stalls) are refused and logged, leave nothing behind, and do not disturb anyone else; new
certificates are taken on SIGHUP while open sessions go on."""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import ssl
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest

from compat_tests.conftest import wait_for
from compat_tests.tls.certificates import serial_of
from compat_tests.tls.conftest import (api_versions_request, client_context, read_response, read_values, refused,
                                       tls_connect)

ADMIN = ("root", "root-secret")
CONFIG = """
tls_handshake_timeout_ms = 1500

[kafka]
super_users = "User:alice"

[[users]]
name = "alice"
password = "not-used-by-certificates"
tenant = "acme"
namespace = "payments"

[[users]]
name = "root"
password = "root-secret"
tags = ["administrator"]
"""
REFUSED_LINE = "TLS handshake with"


@pytest.fixture(scope="module")
def mtls(tmp_path_factory, certificates):
    from compat_tests.conftest import start_gateway
    tmp = tmp_path_factory.mktemp("mtls")
    (tmp / "gateway.toml").write_text(CONFIG)
    # Copies, so the reload test can replace them
    cert, key = tmp / "server.pem", tmp / "server.key"
    shutil.copy(certificates.server.cert, cert)
    shutil.copy(certificates.server.key, key)
    gateway = start_gateway(tmp, "--config", str(tmp / "gateway.toml"), "--kafka-tls-port", "0",
                            "--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", certificates.ca,
                            "--tls-client-auth", "required", "--tls-crl", certificates.crl)
    gateway.cert_file, gateway.key_file = cert, key
    yield gateway
    gateway.stop()


def tls_address(gateway) -> tuple[str, int]:
    host, _, port = gateway.ready["kafka_tls"].rpartition(":")
    return host, int(port)


def bootstrap(gateway) -> str:
    return "%s:%d" % tls_address(gateway)


def connections(gateway) -> list[dict]:
    host, port = gateway.admin
    return httpx.get(f"http://{host}:{port}/api/v1/connections", auth=ADMIN, timeout=20).json()


def test_the_ready_line_names_the_tls_port_beside_the_plaintext_one(mtls) -> None:
    assert tls_address(mtls)[1] not in (mtls.kafka[1], 0)
    assert "amqp_tls" not in mtls.ready   # only what is configured


def test_the_broker_describes_both_listeners(mtls, certificates) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource
    admin = AdminClient({"bootstrap.servers": bootstrap(mtls), "security.protocol": "SSL",
                         "ssl.ca.location": certificates.ca, "ssl.certificate.location": certificates.alice.cert,
                         "ssl.key.location": certificates.alice.key})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(30)
    host, port = tls_address(mtls)
    assert configs["listeners"].value == f"PLAINTEXT://{host}:{mtls.kafka[1]},SSL://{host}:{port}"


def test_confluent_kafka_logs_in_as_its_certificates_cn(mtls, certificates) -> None:
    from confluent_kafka import Consumer, Producer
    topic = f"mtls-{uuid.uuid4().hex[:6]}"
    conf = {"bootstrap.servers": bootstrap(mtls), "security.protocol": "SSL", "ssl.ca.location": certificates.ca,
            "ssl.certificate.location": certificates.alice.cert, "ssl.key.location": certificates.alice.key}
    producer = Producer(conf)
    delivered = []
    producer.produce(topic, b"over tls", on_delivery=lambda error, message: delivered.append(error))
    assert producer.flush(30) == 0 and delivered == [None]
    consumer = Consumer({**conf, "group.id": "mtls-group", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(1)
        assert message is not None and message.error() is None and message.value() == b"over tls"
        mine = [c for c in connections(mtls) if c["client_id"] == "rdkafka" and c["protocol"] == "kafka"]
        assert mine and all(c["user"] == "alice" and (c["tenant"], c["namespace"]) == ("acme", "payments")
                            and c["mechanism"] == "SSL" for c in mine)
        assert all(c["tls"]["version"] in ("TLSv1.2", "TLSv1.3") for c in mine)
        assert all(c["tls"]["client_certificate"] == "CN=alice,OU=payments,O=Gateway Tests" for c in mine)
    finally:
        consumer.close()


def test_kafka_python_aiokafka_and_kcat_round_trip_over_mtls(mtls, certificates) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    topic = f"mtls-clients-{uuid.uuid4().hex[:6]}"
    ssl_args = dict(security_protocol="SSL", ssl_cafile=certificates.ca, ssl_certfile=certificates.alice.cert,
                    ssl_keyfile=certificates.alice.key)
    producer = KafkaProducer(bootstrap_servers=bootstrap(mtls), **ssl_args)
    producer.send(topic, b"kafka-python").get(timeout=30)
    producer.close()

    async def aiokafka_round() -> list[bytes]:
        context = create_ssl_context(cafile=certificates.ca, certfile=certificates.alice.cert,
                                     keyfile=certificates.alice.key)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap(mtls), security_protocol="SSL", ssl_context=context)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"aiokafka")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap(mtls), security_protocol="SSL",
                                    ssl_context=context, auto_offset_reset="earliest")
        await consumer.start()
        try:
            batches = await consumer.getmany(timeout_ms=10_000, max_records=10)
            return [record.value for records in batches.values() for record in records]
        finally:
            await consumer.stop()

    assert asyncio.run(aiokafka_round()) == [b"kafka-python", b"aiokafka"]

    kcat_ssl = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certificates.ca}",
                "-X", f"ssl.certificate.location={certificates.alice.cert}",
                "-X", f"ssl.key.location={certificates.alice.key}"]
    subprocess.run(["kcat", "-b", bootstrap(mtls), *kcat_ssl, "-P", "-t", topic], input=b"kcat\n",
                   check=True, timeout=60, capture_output=True)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(mtls), **ssl_args)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    assert read_values(consumer, 3) == [b"kafka-python", b"aiokafka", b"kcat"]
    consumer.close()
    read = subprocess.run(["kcat", "-b", bootstrap(mtls), *kcat_ssl, "-C", "-t", topic, "-o", "beginning", "-e",
                           "-q"], check=True, timeout=60, capture_output=True)
    assert read.stdout.split() == [b"kafka-python", b"aiokafka", b"kcat"]


def test_a_certificate_of_a_principal_without_acls_is_authorized_as_nobody_else(mtls, certificates) -> None:
    # CN=carol: a valid certificate, no user of that name (default tenant), no ACL, not a super user.
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap(mtls), "security.protocol": "SSL",
                         "ssl.ca.location": certificates.ca, "ssl.certificate.location": certificates.carol.cert,
                         "ssl.key.location": certificates.carol.key, "message.timeout.ms": 10_000})
    errors = []
    producer.produce("carol-topic", b"x", on_delivery=lambda error, message: errors.append(error))
    producer.flush(30)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].name() == "TOPIC_AUTHORIZATION_FAILED", errors[0]


def test_refused_handshakes_are_logged_once_each_and_disturb_nobody(mtls, certificates) -> None:
    address = tls_address(mtls)
    before = mtls.stderr.count(REFUSED_LINE)
    assert refused(address, client_context(certificates))                                  # no certificate
    assert refused(address, client_context(certificates, certificates.stranger))           # another CA
    assert refused(address, client_context(certificates, certificates.alice_expired))      # expired
    assert refused(address, client_context(certificates, certificates.revoked))            # revoked by the CA
    with socket.create_connection(address, timeout=20) as plain:                            # no TLS at all
        plain.sendall(api_versions_request(1))
        assert _closed(plain)
    wait_for(lambda: mtls.stderr.count(REFUSED_LINE) >= before + 5, "five refusal lines")
    log = mtls.stderr
    for reason in ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "unable to get local issuer certificate",
                   "certificate has expired", "certificate revoked", "WRONG_VERSION_NUMBER (not a TLS client?)"):
        assert log.count(reason) == 1, reason
    with tls_connect(address, client_context(certificates, certificates.alice)) as good:
        good.sendall(api_versions_request(7))
        assert read_response(good)[:4] == (7).to_bytes(4, "big")


def test_garbage_before_or_after_the_handshake_closes_only_that_connection(mtls, certificates) -> None:
    address = tls_address(mtls)
    with socket.create_connection(address, timeout=20) as before:
        before.sendall(b"\x16\x03\x01\x00\x10" + b"\xde\xad\xbe\xef" * 4)   # a TLS record of nonsense
        assert _closed(before)
    with tls_connect(address, client_context(certificates, certificates.alice)) as after:
        after.sendall(b"\xff" * 64)   # a negative Kafka frame size, inside the TLS session
        assert _closed(after)
    with tls_connect(address, client_context(certificates, certificates.alice)) as good:
        good.sendall(api_versions_request(3))
        assert read_response(good)[:4] == (3).to_bytes(4, "big")


def test_stalled_and_failed_handshakes_leave_no_socket_or_memory_behind(mtls, certificates) -> None:
    process = psutil.Process(mtls.proc.pid)
    address = tls_address(mtls)
    fds_before = process.num_fds()
    # Never a ClientHello, then half of one: both dropped after the handshake timeout (1.5 s)
    silent = socket.create_connection(address, timeout=30)
    half = socket.create_connection(address, timeout=30)
    half.sendall(b"\x16\x03\x01\x02\x00\x01\x00")
    started = time.monotonic()
    assert _closed(silent) and _closed(half)
    assert time.monotonic() - started < 20
    silent.close()
    half.close()

    wrong = client_context(certificates, certificates.stranger)
    rss_start = process.memory_info().rss
    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(lambda _: refused(address, wrong), range(150)))
    rss_after = process.memory_info().rss
    with tls_connect(address, client_context(certificates, certificates.alice)) as good:
        good.sendall(api_versions_request(5))
        assert read_response(good)[:4] == (5).to_bytes(4, "big")
    wait_for(lambda: process.num_fds() <= fds_before + 4, "the refused connections' sockets closed")
    print(f"150 refused handshakes: RSS {rss_start / 2**20:.1f} -> {rss_after / 2**20:.1f} MiB, "
          f"fds {fds_before} -> {process.num_fds()}")
    assert rss_after - rss_start < 64 * 2**20
    assert "taking longer than" in mtls.stderr or "no handshake within" in mtls.stderr
    host, port = mtls.admin
    metrics = httpx.get(f"http://{host}:{port}/metrics", auth=ADMIN, timeout=20).text
    refused_count = next(line for line in metrics.splitlines() if line.startswith(
        'gateway_connections_failed_total{listener="kafka_tls",reason="tls_handshake_refused"}'))
    assert float(refused_count.split()[-1]) >= 153


def test_sighup_brings_in_new_certificates_while_open_sessions_go_on(mtls, certificates) -> None:
    address = tls_address(mtls)
    context = client_context(certificates, certificates.alice)
    with tls_connect(address, context) as open_session:
        assert _serial(open_session) == serial_of(certificates.server.cert)
        shutil.copy(certificates.server_renewed.cert, mtls.cert_file)
        shutil.copy(certificates.server_renewed.key, mtls.key_file)
        mtls.send_signal(signal.SIGHUP)
        wait_for(lambda: "TLS certificates reloaded" in mtls.stderr, "the reload")
        with tls_connect(address, context) as fresh:
            assert _serial(fresh) == serial_of(certificates.server_renewed.cert)
        open_session.sendall(api_versions_request(11))
        assert read_response(open_session)[:4] == (11).to_bytes(4, "big")

    # A file that does not load keeps the certificate in use
    mtls.cert_file.write_text("not a certificate\n")
    mtls.send_signal(signal.SIGHUP)
    wait_for(lambda: "previous ones stay in use" in mtls.stderr, "the refused reload")
    with tls_connect(address, context) as after:
        assert _serial(after) == serial_of(certificates.server_renewed.cert)


def _serial(sock: ssl.SSLSocket) -> int:
    from cryptography import x509
    return x509.load_der_x509_certificate(sock.getpeercert(binary_form=True)).serial_number


def _closed(sock: socket.socket) -> bool:
    """Whether the server closes the connection (reading until it does, or 20 s go by)."""
    sock.settimeout(20)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionError, ssl.SSLError):
        pass
    except TimeoutError:
        return False
    return True

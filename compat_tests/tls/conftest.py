"""A private CA, the certificates the TLS tests use, and helpers to speak to a TLS port."""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from compat_tests.tls.certificates import Authority, Pair


@dataclass(frozen=True)
class Certificates:
    ca: str                 # the CA the gateway trusts and clients check the gateway against
    server: Pair
    server_renewed: Pair    # the same names, another key and serial: what a reload brings in
    alice: Pair             # CN=alice, a user of the store (tenant acme)
    carol: Pair             # CN=carol, no such user
    alice_expired: Pair
    other_ca: str
    stranger: Pair          # CN=alice, signed by the other CA
    revoked: Pair           # CN=dave, on the main CA's revocation list
    crl: str                # the main CA's revocation list


@pytest.fixture(scope="session")
def certificates(tmp_path_factory) -> Certificates:
    directory: Path = tmp_path_factory.mktemp("certificates")
    authority, other = Authority(directory, "main"), Authority(directory, "other")
    revoked = authority.client("dave", "dave")
    return Certificates(revoked=revoked, crl=authority.revocation_list("main-crl", [revoked]),
                        ca=authority.cert, server=authority.server("server"),
                        server_renewed=authority.server("server-renewed"),
                        alice=authority.client("alice", "alice", organization_unit="payments"),
                        carol=authority.client("carol", "carol"),
                        alice_expired=authority.client("alice-expired", "alice", expired=True),
                        other_ca=other.cert, stranger=other.client("stranger", "alice"))


SECURED_CONFIG = """
[kafka]
sasl_mechanisms = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
super_users = "User:alice,User:bob"

[[users]]
name = "alice"
password = "alice-secret"
tenant = "acme"
namespace = "payments"

[[users]]
name = "bob"
password = "bob-secret"

[[users]]
name = "root"
password = "root-secret"
tags = ["administrator"]
"""


@pytest.fixture(scope="session")
def secured(tmp_path_factory, certificates):
    """A gateway with SASL, Kafka and AMQP TLS ports, and client certificates requested (alice of
    tenant acme/payments, bob, and root the administrator), shared by the modules that need one."""
    from compat_tests.conftest import start_gateway
    tmp = tmp_path_factory.mktemp("sasl-ssl")
    (tmp / "gateway.toml").write_text(SECURED_CONFIG)
    gateway = start_gateway(tmp, "--config", str(tmp / "gateway.toml"), "--kafka-tls-port", "0",
                            "--amqp-tls-port", "0", "--tls-cert", certificates.server.cert,
                            "--tls-key", certificates.server.key, "--tls-ca", certificates.ca,
                            "--tls-client-auth", "requested")
    yield gateway
    gateway.stop()


def client_context(certificates: Certificates, pair: Pair | None = None, *, ca: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca or certificates.ca)
    if pair is not None:
        context.load_cert_chain(pair.cert, pair.key)
    return context


def tls_connect(address: tuple[str, int], context: ssl.SSLContext, timeout: float = 20) -> ssl.SSLSocket:
    sock = socket.create_connection(address, timeout=timeout)
    try:
        return context.wrap_socket(sock, server_hostname=address[0])
    except BaseException:
        sock.close()
        raise


def refused(address: tuple[str, int], context: ssl.SSLContext) -> bool:
    """Whether the gateway refuses a TLS session with this context (for TLS 1.3 a refused client
    certificate shows only at the first read)."""
    try:
        with tls_connect(address, context) as sock:
            sock.sendall(api_versions_request(1))
            return sock.recv(4) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def api_versions_request(correlation_id: int) -> bytes:
    """Kafka ApiVersions v0, framed: the smallest request every Kafka listener answers."""
    client_id = b"tls-test"
    body = (18).to_bytes(2, "big") + (0).to_bytes(2, "big") + correlation_id.to_bytes(4, "big") \
        + len(client_id).to_bytes(2, "big") + client_id
    return len(body).to_bytes(4, "big") + body


def read_response(sock: socket.socket) -> bytes:
    size = int.from_bytes(_exactly(sock, 4), "big")
    return _exactly(sock, size)


def _exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def read_values(consumer, count: int, deadline_s: float = 30) -> list[bytes]:
    """The values of the next `count` records a kafka-python consumer gets (fewer if time runs out)."""
    values: list[bytes] = []
    deadline = time.monotonic() + deadline_s
    while len(values) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values += [record.value for record in records]
    return values

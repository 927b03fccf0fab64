"""`gateway cluster up --tls` (LocalCluster with tls): every link is TLS. Kafka clients that trust
the cluster's CA are told every broker's TLS port and produce and consume across both brokers
(the brokers write to the bookie over mutual TLS); an AMQP client on one broker's TLS port reaches
a queue wherever it is served (peer links over mutual TLS); the bookie takes neither a plaintext
client nor one whose certificate comes from another CA."""

from __future__ import annotations

import socket
import ssl
import time

import pika
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.conftest import wait_for
from gateway.cluster.certificates import cluster_certificates
from gateway.cluster.launcher import ClusterSpec, LocalCluster

PARTITIONS = 8


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(data_dir=tmp_path_factory.mktemp("tls-cluster"), bookies=1, brokers=2, ensemble=1,
                       write_quorum=1, ack_quorum=1, tls=True)
    local = LocalCluster(spec)
    ready = local.start()
    try:
        yield local, ready
    finally:
        local.stop()


def kafka_conf(ready: dict, broker: int = 0) -> dict:
    return {"bootstrap.servers": ready["brokers"][broker]["kafka_tls"], "security.protocol": "SSL",
            "ssl.ca.location": ready["tls_ca"]}


def test_kafka_clients_stay_on_tls_ports_across_the_brokers(cluster) -> None:
    _, ready = cluster
    admin = AdminClient(kafka_conf(ready))
    wait_for(lambda: len(admin.list_topics(timeout=10).brokers) == 2, "both brokers in Metadata", 60)
    advertised = {f"{b.host}:{b.port}" for b in admin.list_topics(timeout=10).brokers.values()}
    assert advertised == {b["kafka_tls"] for b in ready["brokers"]}
    admin.create_topics([NewTopic("tls-spread", PARTITIONS, 1)])["tls-spread"].result(60)
    producer = Producer(kafka_conf(ready, 1))
    failed = []
    for i in range(4 * PARTITIONS):
        producer.produce("tls-spread", b"m%d" % i, partition=i % PARTITIONS,
                         on_delivery=lambda error, message: error and failed.append(error))
    assert producer.flush(60) == 0 and not failed
    consumer = Consumer({**kafka_conf(ready), "group.id": "tls-cluster", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["tls-spread"])
        values = set()
        deadline = time.monotonic() + 60
        while len(values) < 4 * PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                values.add(message.value())
        assert values == {b"m%d" % i for i in range(4 * PARTITIONS)}
    finally:
        consumer.close()


def test_amqp_over_tls_on_either_broker_reaches_the_queue(cluster) -> None:
    _, ready = cluster
    context = ssl.create_default_context(cafile=ready["tls_ca"])

    def connect(broker: int) -> pika.BlockingConnection:
        host, _, port = ready["brokers"][broker]["amqp_tls"].rpartition(":")
        return pika.BlockingConnection(pika.ConnectionParameters(host, int(port),
                                                                 ssl_options=pika.SSLOptions(context, host)))

    with connect(0) as first, connect(1) as second:
        publisher, getter = first.channel(), second.channel()
        publisher.confirm_delivery()
        for index in range(4):   # queues spread over the bundles, so some are served by the other broker
            publisher.queue_declare(f"tls-q{index}", durable=True)
            publisher.basic_publish("", f"tls-q{index}", b"over tls %d" % index)
        for index in range(4):
            body = None
            deadline = time.monotonic() + 30
            while body is None and time.monotonic() < deadline:
                body = getter.basic_get(f"tls-q{index}", auto_ack=True)[2]
            assert body == b"over tls %d" % index


def test_the_bookie_refuses_plaintext_and_other_cas(cluster, tmp_path) -> None:
    local, ready = cluster
    host, _, port = ready["bookies"][0]["address"].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=20) as plain:
        plain.sendall(b"\x00" * 64)
        answer = _everything(plain)
    assert not answer or answer[0] == 0x15, answer   # nothing, or a TLS alert: never the bookie's hello
    other = cluster_certificates(tmp_path / "other")
    stranger = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    stranger.load_cert_chain(other.cert, other.key)
    stranger.load_verify_locations(local.certificates.ca)
    stranger.check_hostname = False
    try:
        with stranger.wrap_socket(socket.create_connection((host, int(port)), timeout=20)) as sock:
            answer = sock.recv(1)   # TLS 1.3: a refused client certificate shows at the first read
    except (ssl.SSLError, ConnectionError):
        answer = b""
    assert answer == b""


def _everything(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection."""
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except ConnectionError:
        pass
    return data

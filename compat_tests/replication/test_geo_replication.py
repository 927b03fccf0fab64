"""Geo-replication between two gateways on this machine: the source copies its namespace's topics
to the remote as mirror topics (protocols/kafka/mirror). Driven by confluent-kafka on both sides:
every record, transaction marker and offset is the same on the mirror (read_committed readers see
the same records at the same offsets), consumer groups' committed offsets follow, the copy
resumes exactly after a kill -9 of the source, the mirror refuses producers, a remote that is
down never holds back the source's producers, and a link logs in to a remote that wants SASL over
TLS and keeps the mirrors' topic settings and ACLs in step."""

from __future__ import annotations

import asyncio
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic,
                                   ResourcePatternType, ResourceType)

from compat_tests.conftest import wait_for
from gateway.cluster.launcher import ClusterSpec, LocalCluster
from gateway.cluster.ports import free_port

LINK = "dc1"
PARTITIONS = 3


def bootstrap(gateway) -> str:
    return "%s:%d" % gateway.kafka


def start_source(gateway_launcher, tmp_path: Path, remote_port: int, topics: str = "orders.*"):
    config = tmp_path / "source.toml"
    config.write_text(f'[[replication]]\nname = "{LINK}"\nremote = "127.0.0.1:{remote_port}"\n'
                      f'namespace = "public/default"\ntopics = "{topics}"\n')
    return gateway_launcher.start("--config", str(config), data_dir=tmp_path / "source")


def start_remote(gateway_launcher, tmp_path: Path, port: int):
    """The remote on a fixed Kafka port, so that it comes back where the source's link points."""
    return gateway_launcher.start(command=[sys.executable, "-m", "gateway", "serve", "--data-dir",
                                           str(tmp_path / "remote"), "--kafka-port", str(port),
                                           "--amqp-port", "0", "--mqtt-port", "0", "--pulsar-port", "0", "--admin-port", "0"])


def create_orders(gateway) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(gateway)})
    admin.create_topics([NewTopic("orders", PARTITIONS, 1)])["orders"].result(30)


def caught_up(remote, source) -> bool:
    there = ends(remote, "orders")
    return bool(there) and there == ends(source, "orders")


def produce(gateway, topic: str, values: range, **config) -> list:
    producer = Producer({"bootstrap.servers": bootstrap(gateway), "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 60_000, **config})
    reports: list = []
    for n in values:
        producer.produce(topic, key=b"k%d" % (n % 7), value=b"v%d" % n, on_delivery=lambda e, m: reports.append(e))
        producer.poll(0)
    assert producer.flush(60) == 0
    return reports


def transaction(gateway, topic: str, values: list[bytes], commit: bool) -> None:
    producer = Producer({"bootstrap.servers": bootstrap(gateway), "transactional.id": f"tx-{commit}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    (producer.commit_transaction if commit else producer.abort_transaction)(30)


def ends(gateway, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap(gateway), "group.id": "ends"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)]
    except KafkaException:
        return []
    finally:
        consumer.close()


def committed_records(gateway, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every partition's records as a read_committed reader sees them: (offset, value)."""
    consumer = Consumer({"bootstrap.servers": bootstrap(gateway), "group.id": f"read-{time.monotonic()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    expected = ends(gateway, topic)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    positions = [0] * PARTITIONS
    deadline = time.monotonic() + 60
    try:
        while any(positions[p] < expected[p] - 1 for p in range(PARTITIONS)) and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=1):
                if message.error() is None:
                    seen[message.partition()].append((message.offset(), message.value()))
                    positions[message.partition()] = message.offset()
            # markers and aborted records end a partition below its high watermark
            positions = [max(positions[p], consumer.position([TopicPartition(topic, p)])[0].offset - 1)
                         for p in range(PARTITIONS)]
    finally:
        consumer.close()
    return seen


def committed(gateway, group: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap(gateway), "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition("orders", p) for p in range(PARTITIONS)],
                                                       timeout=10)]
    finally:
        consumer.close()


def metrics(gateway) -> str:
    host, port = gateway.admin
    return urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()


def failures(gateway) -> float:
    return float(re.search(r'^gateway_replication_failures_total\{link="dc1"\} (\S+)$', metrics(gateway), re.M)[1])


def lag_metric(gateway, topic: str = "orders") -> dict[str, float]:
    """Records not yet copied, by partition, as the source's /metrics says."""
    return {m[1]: float(m[2]) for m in re.finditer(
        r'^gateway_replication_lag_records\{link="dc1",partition="(\d+)",topic="%s"\} (\S+)$' % re.escape(topic),
        metrics(gateway), re.M)}


def test_a_namespace_is_mirrored_offset_for_offset_and_the_copy_resumes_after_a_kill9(gateway_launcher,
                                                                                       tmp_path) -> None:
    remote_port = free_port()
    remote = start_remote(gateway_launcher, tmp_path, remote_port)
    source = start_source(gateway_launcher, tmp_path, remote_port)
    create_orders(source)
    assert not any(produce(source, "orders", range(0, 1500)))
    transaction(source, "orders", [b"committed-1", b"committed-2"], commit=True)
    transaction(source, "orders", [b"aborted-1", b"aborted-2"], commit=False)
    wait_for(lambda: caught_up(remote, source), "the mirror caught up", 60, 0.5)
    # A consumer group's positions follow, untranslated: the mirror's offsets are the source's.
    app = Consumer({"bootstrap.servers": bootstrap(source), "group.id": "payments-app"})
    app.commit(offsets=[TopicPartition("orders", p, 100 + p) for p in range(PARTITIONS)], asynchronous=False)
    app.close()
    wait_for(lambda: committed(remote, "payments-app") == [100, 101, 102], "the group's offsets on the mirror", 30, 0.5)
    # A group with members on the remote keeps its own positions; the others still follow.
    busy = Consumer({"bootstrap.servers": bootstrap(remote), "group.id": "busy-app", "enable.auto.commit": False})
    busy.subscribe(["orders"])
    wait_for(lambda: busy.poll(0.2) is not None or busy.assignment(), "a member of busy-app on the remote", 30)
    for group, base in (("busy-app", 7), ("payments-app", 200)):
        app = Consumer({"bootstrap.servers": bootstrap(source), "group.id": group})
        app.commit(offsets=[TopicPartition("orders", p, base + p) for p in range(PARTITIONS)], asynchronous=False)
        app.close()
    wait_for(lambda: committed(remote, "payments-app") == [200, 201, 202], "the group's new offsets", 30, 0.5)
    assert all(offset < 0 for offset in committed(remote, "busy-app")) and failures(source) == 0
    busy.close()

    source.send_signal(signal.SIGKILL)
    source.wait()
    source = start_source(gateway_launcher, tmp_path, remote_port, topics=".*")   # internal topics too, but skipped
    committer = Consumer({"bootstrap.servers": bootstrap(source), "group.id": "committer"})
    committer.commit(offsets=[TopicPartition("orders", 0, 5)], asynchronous=False)   # into __consumer_offsets
    committer.close()
    assert not any(produce(source, "orders", range(1500, 3000)))
    wait_for(lambda: caught_up(remote, source), "the mirror caught up after the restart", 60, 0.5)
    wait_for(lambda: set(lag_metric(source).values()) == {0.0}, "lag reported 0 on every partition", 30)

    here, there = committed_records(source, "orders"), committed_records(remote, "orders")
    assert there == here
    values = [value for records in there.values() for _, value in records]
    assert len(values) == len(set(values)) == 3002           # every record once, none of the aborted
    assert b"committed-1" in values and b"aborted-1" not in values

    refused = produce(remote, "orders", range(1), retries=0, **{"enable.idempotence": False})
    assert [str(error.name()) for error in refused] == ["INVALID_REQUEST"]
    # Committed offsets live in the source's __consumer_offsets, which the link leaves alone: once
    # a topic created after the commit is being copied, the scans since saw it and skipped it.
    assert not any(produce(source, "late", range(1)))
    wait_for(lambda: lag_metric(source, "late"), "the copy of a topic created later", 30, 0.5)
    assert not lag_metric(source, "__consumer_offsets") and failures(source) == 0


def test_a_remote_that_is_down_never_holds_back_local_producers(gateway_launcher, tmp_path) -> None:
    remote_port = free_port()
    remote = start_remote(gateway_launcher, tmp_path, remote_port)
    source = start_source(gateway_launcher, tmp_path, remote_port)
    create_orders(source)
    assert not any(produce(source, "orders", range(0, 300)))
    wait_for(lambda: sum(ends(remote, "orders") or [0]) == 300, "the first records copied", 60, 0.5)
    remote.stop(signal.SIGKILL)
    started = time.monotonic()
    assert not any(produce(source, "orders", range(300, 2300)))
    produced_in = time.monotonic() - started
    wait_for(lambda: sum(lag_metric(source).values()) == 2000, "the lag of what the remote missed", 30, 0.5)
    remote = start_remote(gateway_launcher, tmp_path, remote_port)
    wait_for(lambda: caught_up(remote, source), "the mirror caught up", 90, 0.5)
    assert produced_in < 30, f"producing while the remote was down took {produced_in:.1f} s"


class Broker:
    """A broker of a cluster where the helpers above expect a gateway: its Kafka address."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.kafka = (host, int(port))


def test_a_cluster_of_brokers_copies_each_partition_from_its_owner(gateway_launcher, tmp_path) -> None:
    """A source of two brokers on ZooKeeper and three bookies: each broker copies the partitions it
    owns (its bundles), and the mirror gets every record once, at its offset."""
    remote_port = free_port()
    remote = start_remote(gateway_launcher, tmp_path, remote_port)
    cluster = LocalCluster(ClusterSpec(
        data_dir=tmp_path / "cluster", bookies=3, brokers=2, log_level="warning",
        extra_config=f'[[replication]]\nname = "{LINK}"\nremote = "127.0.0.1:{remote_port}"\n'))
    ready = cluster.start()
    try:
        source = Broker(ready["brokers"][0]["kafka"])
        create_orders(source)
        assert not any(produce(source, "orders", range(0, 1200)))
        wait_for(lambda: caught_up(remote, source), "the mirror caught up with the cluster", 90, 0.5)
        here, there = committed_records(source, "orders"), committed_records(remote, "orders")
        assert there == here and sum(len(records) for records in there.values()) == 1200
    finally:
        cluster.stop()


# --- a link to a secured remote --------------------------------------------------------------------


class TlsTerminator:
    """TLS in front of a plaintext Kafka port (the gateway's listener speaks plaintext), in a thread;
    with `client_ca`, clients must present a certificate that CA signed (mutual TLS)."""

    def __init__(self, cert: Path, key: Path, port: int, upstream_port: int, client_ca: Path | None = None) -> None:
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(cert, key)
        if client_ca is not None:
            self._context.verify_mode = ssl.CERT_REQUIRED
            self._context.load_verify_locations(client_ca)
        self._port, self._upstream_port = port, upstream_port
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        threading.Thread(target=self._serve, args=(started,), daemon=True, name="tls-terminator").start()
        started.wait(10)

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._relay, "127.0.0.1", self._port, ssl=self._context))
        started.set()
        self._loop.run_forever()
        self._loop.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        except OSError:
            writer.close()
            return

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (OSError, ConnectionError):
                pass
            finally:
                sink.close()
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    def stop(self) -> None:
        async def shut_down() -> None:
            self._server.close()
            relays = asyncio.all_tasks() - {asyncio.current_task()}
            for task in relays:
                task.cancel()
            await asyncio.gather(*relays, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(shut_down(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def topic_settings(admin: AdminClient, topic: str) -> dict[str, str]:
    """The settings set on the topic (not defaults)."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: entry.value for name, entry in entries.items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def topic_acl(principal: str, operation: AclOperation, permission: AclPermissionType = AclPermissionType.ALLOW,
              topic: str = "orders", pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, pattern, principal, "*", operation, permission)


def topic_acls(admin: AdminClient) -> set[tuple]:
    every = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    return {(b.name, b.resource_pattern_type, b.principal, b.operation, b.permission_type)
            for b in admin.describe_acls(every).result(30)}


def test_a_link_logs_in_over_tls_and_keeps_the_mirrors_settings_and_acls_in_step(gateway_launcher, tmp_path) -> None:
    """The remote wants SCRAM-SHA-256 and is reached through TLS that wants a client certificate: the
    link presents its own and logs in as its user, so the mirror lands in that user's tenant; the
    topic's settings and ACLs go with it and follow their changes (MirrorMaker 2's rules for ACLs:
    literal topic ACLs only, no ALLOW of WRITE, an ALLOW of ALL as READ)."""
    cert, key = self_signed(tmp_path)       # the remote's, and (trusted as its own CA) the link's
    remote_port, tls_port = free_port(), free_port()
    (tmp_path / "remote.toml").write_text(
        f'[kafka]\nsasl_mechanisms = "SCRAM-SHA-256"\nsuper_users = "User:replicator"\nadvertised_port = {tls_port}\n'
        '\n[[users]]\nname = "replicator"\npassword = "mirror-secret"\ntenant = "dr"\nnamespace = "copies"\n')
    gateway_launcher.start(command=[sys.executable, "-m", "gateway", "serve", "--data-dir", str(tmp_path / "remote"),
                                    "--kafka-port", str(remote_port), "--amqp-port", "0", "--mqtt-port", "0", "--pulsar-port", "0", "--admin-port", "0",
                                    "--config", str(tmp_path / "remote.toml")])
    terminator = TlsTerminator(cert, key, tls_port, remote_port, client_ca=cert)
    try:
        (tmp_path / "source.toml").write_text(
            f'[[replication]]\nname = "{LINK}"\nremote = "127.0.0.1:{tls_port}"\ntopics = "orders.*"\n'
            'security_protocol = "SASL_SSL"\nsasl_mechanism = "SCRAM-SHA-256"\nsasl_username = "replicator"\n'
            f'sasl_password = "mirror-secret"\nssl_ca_file = "{cert}"\n'
            f'ssl_certificate_file = "{cert}"\nssl_key_file = "{key}"\n')
        source = gateway_launcher.start("--config", str(tmp_path / "source.toml"), data_dir=tmp_path / "source")
        source_admin = AdminClient({"bootstrap.servers": bootstrap(source)})
        source_admin.create_topics([NewTopic("orders", PARTITIONS, 1, config={
            "retention.ms": "86400000", "max.message.bytes": "2000000"})])["orders"].result(30)
        assert not any(produce(source, "orders", range(0, 90)))
        for future in source_admin.create_acls([
                topic_acl("User:alice", AclOperation.READ), topic_acl("User:bob", AclOperation.WRITE),
                topic_acl("User:carol", AclOperation.ALL), topic_acl("User:dave", AclOperation.WRITE, AclPermissionType.DENY),
                topic_acl("User:erin", AclOperation.READ, topic="ord", pattern=ResourcePatternType.PREFIXED),
                topic_acl("User:frank", AclOperation.READ, topic="payments")]).values():
            future.result(30)
        secured = {"bootstrap.servers": f"127.0.0.1:{tls_port}", "security.protocol": "SASL_SSL",
                   "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "replicator",
                   "sasl.password": "mirror-secret", "ssl.ca.location": str(cert),
                   "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
        remote_admin = AdminClient(secured)

        def mirrored() -> int:
            consumer = Consumer({**secured, "group.id": "ends"})
            try:
                return sum(consumer.get_watermark_offsets(TopicPartition("orders", p), timeout=10)[1]
                           for p in range(PARTITIONS))
            except KafkaException:
                return 0
            finally:
                consumer.close()
        wait_for(lambda: mirrored() == 90, "the mirror in the link user's tenant caught up", 60, 0.5)
        assert topic_settings(remote_admin, "orders") == {"retention.ms": "86400000", "max.message.bytes": "2000000",
                                                          "mirror.source": LINK}
        resource = ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
        source_admin.incremental_alter_configs([resource])[resource].result(30)
        wait_for(lambda: topic_settings(remote_admin, "orders") == {"retention.ms": "3600000", "mirror.source": LINK},
                 "the mirror's settings followed", 60, 1.0)
        literal = ResourcePatternType.LITERAL
        copied = {("orders", literal, "User:alice", AclOperation.READ, AclPermissionType.ALLOW),
                  ("orders", literal, "User:carol", AclOperation.READ, AclPermissionType.ALLOW),
                  ("orders", literal, "User:dave", AclOperation.WRITE, AclPermissionType.DENY)}
        wait_for(lambda: topic_acls(remote_admin) == copied, "the topic's ACLs were copied", 60, 1.0)
        source_admin.create_acls([topic_acl("User:grace", AclOperation.DESCRIBE)])[
            topic_acl("User:grace", AclOperation.DESCRIBE)].result(30)
        wait_for(lambda: topic_acls(remote_admin) == copied | {
            ("orders", literal, "User:grace", AclOperation.DESCRIBE, AclPermissionType.ALLOW)},
            "a new ACL followed", 60, 1.0)
        assert failures(source) == 0
    finally:
        terminator.stop()

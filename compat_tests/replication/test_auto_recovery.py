"""Auto-recovery on a real local cluster (`LocalCluster`: ZooKeeper, 4 `gateway bookie`, one
`gateway serve`; E = Qw = 3, Qa = 2), driven by confluent-kafka.

kill -9 of a bookie that holds data, whose disk is then wiped (its restart is refused by the cookie
check; a new bookie joins under a new id); once the gateway's auditor has re-replicated its fragments,
kill -9 of every other bookie that held the first data: only the bookie that received the copies
is left with it, and a consumer still reads back every acknowledged message. Prints the time it
took to re-replicate the data after the loss was noticed."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.cluster.launcher import ClusterSpec, LocalCluster
from storage.ledger.metadata import LedgerMetadata, LedgerState
from storage.metadata.zookeeper import ZooKeeperMetadataStore

GRACE_MS = 1000
SEGMENT_BYTES = 1 << 20           # each ledger closes past 1 MiB: the data spans closed ledgers
FIRST_MB = 16
VALUE = 1024


@pytest.fixture
def cluster(tmp_path: Path):
    cluster = LocalCluster(ClusterSpec(tmp_path / "cluster", bookies=4, brokers=1, ensemble=3, write_quorum=3,
                                       ack_quorum=2, log_level="info",
                                       extra_storage={"lost_bookie_grace_ms": GRACE_MS, "audit_interval_ms": 100,
                                                      "rereplication_bytes_per_s": 0,
                                                      "zookeeper_session_timeout_ms": 4000}))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def metrics(cluster: LocalCluster) -> dict[str, float]:
    """The gateway's gateway_storage_* samples without labels, from its admin /metrics."""
    with urllib.request.urlopen(f"http://{cluster.brokers[0].ready['admin']}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {m[1]: float(m[2]) for m in re.finditer(r"^(gateway_storage_\w+) (\S+)$", text, re.M)}


def ledgers(cluster: LocalCluster) -> dict[int, LedgerMetadata]:
    async def read() -> dict[int, LedgerMetadata]:
        store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
        try:
            found = {}
            for name in await store.children("/ledgers"):
                node = await store.get(f"/ledgers/{name}")
                if node is not None:
                    found[int(name)] = LedgerMetadata.from_json(node.value)
            return found
        finally:
            await store.close()
    return asyncio.run(read())


def named(metadata: LedgerMetadata) -> set[str]:
    return {b for _, ensemble in metadata.ensembles for b in ensemble}


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    failures = []
    for i in range(first, first + count):
        producer.produce(topic, value=b"%08d" % i + b"x" * (VALUE - 8),
                         on_delivery=lambda err, _msg: err and failures.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert failures == []


def consume(bootstrap: str, topic: str, count: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "recovery-check", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    got: list[int] = []
    consumer.subscribe([topic])
    deadline = time.monotonic() + 90
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(int(message.value()[:8]))
    finally:
        consumer.close()
    return got


def until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_lost_bookie_is_re_replicated_and_nothing_acknowledged_is_lost(cluster: LocalCluster) -> None:
    bootstrap = cluster.brokers[0].ready["kafka"]
    topic = "recovered"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": str(SEGMENT_BYTES)})])[topic].result(30)
    first = FIRST_MB * 1024
    produce(bootstrap, topic, 0, first)
    by_id = {b.ready["id"]: b for b in cluster.bookies}
    before = ledgers(cluster)
    first_ledger = min(before)
    victim = sorted(named(before[first_ledger]))[0]

    by_id[victim].signal(signal.SIGKILL)
    killed_at = time.monotonic()
    # Its disk is lost too: restarted on an empty directory, the cookie check refuses it, and the
    # operator brings the machine back as a new bookie (a new id). The old id stays lost.
    shutil.rmtree(cluster.dir / victim)
    with pytest.raises(RuntimeError):
        cluster.restart(by_id[victim])
    assert "directory wiped?" in by_id[victim].log_path.read_text()
    cluster.add_bookie()
    until(lambda: metrics(cluster).get("gateway_storage_lost_bookies", 0) >= 1, 60, "the loss to be noticed")
    noticed_at = time.monotonic()
    closed = {i: m for i, m in before.items() if m.state is LedgerState.CLOSED and victim in named(m)}
    until(lambda: not any(victim in named(ledgers(cluster)[i]) for i in closed), 120, "re-replication")
    done_at = time.monotonic()
    size = sum(m.length for m in closed.values())
    copies = [(int(b), float(t)) for b, t in re.findall(r"re-replicated: \d+ fragment\(s\), (\d+) bytes in ([0-9.]+) s",
                                                        cluster.brokers[0].log_path.read_text())]
    copied, copying_s = sum(b for b, _ in copies), sum(t for _, t in copies)
    print(f"\nre-replication of {len(closed)} closed ledgers ({size / 1e6:.1f} MB): the auditor copied "
          f"{copied / 1e6:.1f} MB in {copying_s:.2f} s ({copied / 1e6 / max(copying_s, 1e-3):.0f} MB/s); "
          f"{done_at - noticed_at:.2f} s from the loss showing in the metrics to the metadata naming only live "
          f"bookies; the loss showed {noticed_at - killed_at:.1f} s after kill -9 (ZooKeeper session timeout 4 s "
          f"+ grace {GRACE_MS / 1000:.0f} s)")
    assert size > 2 * SEGMENT_BYTES and metrics(cluster)["gateway_storage_rereplicated_bytes_total"] >= size

    # The ledger that was open at the kill is re-replicated once closed: more data makes the writer
    # replace the victim and roll past it.
    second = 2 * SEGMENT_BYTES // VALUE
    produce(bootstrap, topic, first, second)
    until(lambda: not any(victim in named(m) for m in ledgers(cluster).values())
          and metrics(cluster)["gateway_storage_underreplicated_ledgers"] == 0, 120, "the open ledger's turn")

    # Every other bookie that held the first ledger dies too: its entries now live only where the
    # auditor copied them.
    after = ledgers(cluster)
    originals = named(before[first_ledger]) - {victim}
    assert named(after[first_ledger]) - originals, "the first ledger has no new bookie"
    for bookie_id in originals:
        by_id[bookie_id].signal(signal.SIGKILL)
    got = consume(bootstrap, topic, first + second)
    assert sorted(got) == list(range(first + second)), f"{first + second - len(set(got))} acknowledged messages lost"
    assert got == sorted(got)

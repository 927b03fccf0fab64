"""Faults against a real replicated cluster on loopback (`gateway cluster up` as a library): one
private ZooKeeper, four `gateway bookie` processes, one `gateway serve` with E=3, Qw=3, Qa=2, and
Kafka (confluent-kafka, idempotent, acks=all) and AMQP (pika, confirms) clients producing and
consuming throughout. Each test ends with the checkers' verdict: nothing acknowledged lost, no
offset holding two values, no reordering, no duplicate from the idempotent producer.

The cluster is shared by the module; every test leaves all its processes running again.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.faults.harness import disk_full, fsync_errors, lazyfs
from compat_tests.faults.harness.failover import ack_latencies
from compat_tests.faults.harness.lazyfs import LazyFsMount
from compat_tests.faults.harness.proxy import UPSTREAM, TcpProxy
from compat_tests.faults.harness.scenarios import settle
from gateway.cluster.launcher import ClusterSpec, LocalCluster
from storage.bookie import journal_format as fmt
from storage.bookie.journal import list_segments
from storage.ledger.metadata import LedgerMetadata
from storage.metadata.zookeeper import ZooKeeperMetadataStore

MIN_ACKED = 100   # a loaded CI machine: enough to show the faults landed under load
BOOKIE_TIMEOUT_MS = 1500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(data_dir=tmp_path_factory.mktemp("cluster"), bookies=4, brokers=1, ensemble=3,
                       write_quorum=3, ack_quorum=2, racks=2,
                       extra_storage={"bookie_timeout_ms": BOOKIE_TIMEOUT_MS, "zookeeper_session_timeout_ms": 4000})
    local = LocalCluster(spec)
    local.start()
    yield local
    local.stop()


def bootstrap(cluster) -> list[str]:
    return [cluster.brokers[0].ready["kafka"]]


def amqp(cluster) -> list[tuple[str, int]]:
    host, _, port = cluster.brokers[0].ready["amqp"].rpartition(":")
    return [(host, int(port))]


def finish(workloads, name: str) -> None:
    workloads.stop()
    workloads.drain()
    settle(workloads.verdicts(name), MIN_ACKED)


async def _ledgers(cluster) -> list[LedgerMetadata]:
    store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
    try:
        found = []
        for name in await store.children("/ledgers"):
            node = await store.get(f"/ledgers/{name}")
            if node is not None:
                found.append(LedgerMetadata.from_json(node.value))
        return found
    finally:
        await store.close()


def ledgers(cluster) -> list[LedgerMetadata]:
    return asyncio.run(_ledgers(cluster))


def bookie_holding_data(cluster):
    """A bookie in the ensemble of the newest ledger (so killing it hits writers)."""
    newest = max(ledgers(cluster), key=lambda m: m.ctime_ms)
    current = set(newest.ensembles[-1][1])
    return next(b for b in cluster.bookies if b.ready["id"] in current)


def test_data_is_replicated_on_three_bookies_across_racks(healthy, workloads_for) -> None:
    workloads = workloads_for(bootstrap(healthy), amqp(healthy), partitions=2)
    workloads.wait_for_progress(200)
    finish(workloads, "replicated")
    found = ledgers(healthy)
    assert found
    for metadata in found:
        assert (metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum) == (3, 3, 2)
        for _, ensemble in metadata.ensembles:
            assert len(set(ensemble)) == 3
            racks = {f"/rack-{int(b.rpartition('-')[2]) % 2}" for b in ensemble}
            assert len(racks) == 2, f"ensemble {ensemble} is on one rack"


def test_kill9_of_a_bookie_under_load_loses_nothing(healthy, workloads_for) -> None:
    workloads = workloads_for(bootstrap(healthy), amqp(healthy))
    for round_ in range(2):
        workloads.wait_for_progress()
        victim = bookie_holding_data(healthy)
        victim.kill()
        workloads.fault("kill9-bookie", round=round_, bookie=victim.name)
        workloads.wait_for_progress()   # the writers replaced it: acknowledgements flow on
        healthy.restart(victim)
    workloads.wait_for_progress()
    finish(workloads, "kill9-bookie")


def test_a_bookie_paused_past_every_timeout_is_replaced_and_stays_harmless(healthy, workloads_for) -> None:
    workloads = workloads_for(bootstrap(healthy), amqp(healthy))
    workloads.wait_for_progress()
    victim = bookie_holding_data(healthy)
    victim.signal(signal.SIGSTOP)
    workloads.fault("sigstop-bookie", bookie=victim.name)
    time.sleep(BOOKIE_TIMEOUT_MS / 1000 * 2)
    workloads.wait_for_progress()
    victim.signal(signal.SIGCONT)
    workloads.fault("sigcont-bookie", bookie=victim.name)
    workloads.wait_for_progress()
    finish(workloads, "sigstop-bookie")


def test_kill9_of_the_gateway_under_load_loses_nothing(healthy, workloads_for) -> None:
    workloads = workloads_for(bootstrap(healthy), amqp(healthy))
    broker = healthy.brokers[0]
    for round_ in range(2):
        workloads.wait_for_progress()
        broker.kill()
        workloads.fault("kill9-gateway", round=round_)
        healthy.restart(broker)   # recovers every open ledger by fencing it on the bookies
    workloads.wait_for_progress()
    finish(workloads, "kill9-gateway")


def test_delayed_records_on_replicated_storage_come_out_once_each_across_a_kill9(healthy) -> None:
    """Held in random due order, released from ledgers on three bookies (scattered reads through the
    bookie protocol), with a kill -9 of the gateway between the first and the last release."""
    servers = ",".join(bootstrap(healthy))
    topic = f"delayed-{int(time.time() * 1000)}"
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(topic, 1, 1, config={"delayed.delivery.enable": "true"})])[topic].result(30)
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "linger.ms": 5})
    count, start = 600, int(time.time() * 1000) + 4000
    dues = {str(n).encode(): start + (n * 7919) % 6000 for n in range(count)}     # out of order
    for value, due in dues.items():
        producer.produce(topic, value=value, headers=[("deliver-at-ms", str(due).encode())])
    assert producer.flush(60) == 0
    while time.time() * 1000 < start + 2000:     # some released, most pending
        time.sleep(0.05)
    broker = healthy.brokers[0]
    broker.kill()
    killed_at = int(time.time() * 1000)
    healthy.restart(broker)
    consumer = Consumer({"bootstrap.servers": ",".join(bootstrap(healthy)), "group.id": topic,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    found, deadline = [], time.monotonic() + 90
    while len(found) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            found.append(message)
    time.sleep(1.0)                              # anything released twice would follow now
    while (message := consumer.poll(0.2)) is not None:
        if message.error() is None:
            found.append(message)
    consumer.close()
    values = [message.value() for message in found]
    assert sorted(values) == sorted(dues), f"{len(values)} records, {len(set(values))} distinct, {count} held"
    assert [message.offset() for message in found] == list(range(count))
    assert all(message.timestamp()[1] >= dues[message.value()] for message in found), "released early"
    assert 0 < sum(1 for message in found if message.timestamp()[1] < killed_at) < count


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def test_network_faults_between_the_gateway_and_a_bookie(healthy, workloads_for) -> None:
    """A bookie reached through a TCP proxy that blackholes, half-opens, delays and resets its
    traffic: the writers time out on it, replace it, and nothing acknowledged is lost."""
    victim = healthy.bookies[0]
    port = _port(victim.ready["listen"])
    proxy = TcpProxy(("127.0.0.1", port)).start()
    try:
        victim.stop()
        victim.command = healthy.bookie_command(0, port, advertised="%s:%d" % proxy.address)
        victim.start()
        healthy.bookies[3].stop()   # three bookies left for E = 3: every new ledger uses the victim
        workloads = workloads_for(bootstrap(healthy), amqp(healthy), partitions=4)
        deadline = time.monotonic() + 30
        while proxy.stats.forwarded_bytes < 100_000:   # the writers found it behind its new address
            assert time.monotonic() < deadline, "no ledger writes through the proxied bookie"
            time.sleep(0.2)
        for name, act in (("drop", proxy.drop), ("half-open", lambda: proxy.half_open(UPSTREAM)),
                          ("delay", lambda: proxy.delay(BOOKIE_TIMEOUT_MS * 2)), ("reset", proxy.reset)):
            workloads.wait_for_progress()
            act()
            workloads.fault(f"proxy-{name}", bookie=victim.name)
            time.sleep(BOOKIE_TIMEOUT_MS / 1000 * 1.5)
            workloads.wait_for_progress()
            proxy.heal()
        finish(workloads, "network-bookie")
    finally:
        victim.stop()
        victim.command = healthy.bookie_command(0, port)
        victim.start()
        proxy.close()


def test_fewer_bookies_than_the_ack_quorum_refuses_then_recovers(healthy) -> None:
    topic = f"quorum-{int(time.time() * 1000)}"
    producer = Producer({"bootstrap.servers": ",".join(bootstrap(healthy)), "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 60_000})
    delivered: list = []
    producer.produce(topic, b"before", on_delivery=lambda e, m: delivered.append((e, m)))
    assert producer.flush(30) == 0 and delivered[0][0] is None
    stopped = healthy.bookies[:3]          # one of four left: below Qa = 2
    for bookie in stopped:
        bookie.kill()
    outage_producer = Producer({"bootstrap.servers": ",".join(bootstrap(healthy)), "acks": "all",
                                "message.timeout.ms": 4000, "retries": 0})
    refused: list = []
    outage_producer.produce(topic, b"during", on_delivery=lambda e, m: refused.append(e))
    outage_producer.flush(20)
    assert refused and refused[0] is not None, "a write was acknowledged with one bookie up"
    assert refused[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT,
                                 KafkaError.KAFKA_STORAGE_ERROR), refused[0]
    for bookie in stopped:
        healthy.restart(bookie)
    deadline = time.monotonic() + 60
    after: list = []
    while not after or after[-1][0] is not None:
        assert time.monotonic() < deadline, f"produce did not recover: {after[-1][0]}"
        producer.produce(topic, b"after", on_delivery=lambda e, m: after.append((e, m)))
        producer.flush(15)
    assert after[-1][1].offset() >= 1


@pytest.mark.skipif(lazyfs.unavailable_reason() is not None, reason=f"power loss: {lazyfs.unavailable_reason()}")
def test_power_loss_of_every_bookie_loses_nothing_acknowledged(tmp_path, workloads_for) -> None:
    """All bookies on lazy filesystems that keep only what was fsynced: kill everything, drop what
    was not synced, restart: every acknowledged record must come back (kill -9 cannot show this)."""
    spec = ClusterSpec(data_dir=tmp_path / "cluster", bookies=3, brokers=1, ensemble=3, write_quorum=3,
                       ack_quorum=2, extra_storage={"bookie_timeout_ms": BOOKIE_TIMEOUT_MS})
    local = LocalCluster(spec)
    mounts = []
    for index in range(3):
        backing = tmp_path / f"bookie-{index}.disk"
        backing.mkdir()
        (tmp_path / "cluster").mkdir(exist_ok=True)
        mounts.append(LazyFsMount(backing, tmp_path / "cluster" / f"bookie-{index}").start())
    try:
        local.start()
        workloads = workloads_for([local.brokers[0].ready["kafka"]], None, partitions=2)
        workloads.wait_for_progress(300)
        local.brokers[0].kill()
        for bookie, mount in zip(local.bookies, mounts):
            bookie.kill()
            workloads.fault("power-loss", bookie=bookie.name, **mount.power_off())
        mounts = [LazyFsMount(m.backing, m.mountpoint).start() for m in mounts]
        for process in (*local.bookies, *local.brokers):
            local.restart(process)
        workloads.wait_for_progress()
        finish(workloads, "power-loss-bookies")
    finally:
        local.stop()
        for mount in mounts:
            mount.close()


def wait_for_read_only(cluster, bookie_id: str, deadline_s: float = 30.0) -> None:
    """Until the bookie's registration says it no longer takes writes."""

    async def registered_read_only() -> bool:
        store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
        try:
            node = await store.get(f"/bookies-available/{bookie_id}")
            return node is not None and json.loads(node.value)["read_only"]
        finally:
            await store.close()

    deadline = time.monotonic() + deadline_s
    while not asyncio.run(registered_read_only()):
        assert time.monotonic() < deadline, f"{bookie_id} never published read-only"
        time.sleep(0.2)


@pytest.mark.skipif(fsync_errors.unavailable_reason() is not None,
                    reason=f"failed fsync: {fsync_errors.unavailable_reason()}")
def test_a_failed_fsync_turns_a_bookie_read_only_and_writers_move_on(healthy, workloads_for) -> None:
    index = 1
    victim = healthy.bookies[index]
    port = _port(victim.ready["listen"])
    victim.stop()
    victim.command = healthy.bookie_command(index, port, prefix=fsync_errors.PREFIX)
    victim.start()
    healthy.bookies[3].stop()   # three bookies left for E = 3: every new ledger uses the victim
    try:
        workloads = workloads_for(bootstrap(healthy), amqp(healthy), partitions=4)
        workloads.wait_for_progress()
        fsync_errors.FsyncErrors(victim.pid).enable()
        workloads.fault("fsync-eio", bookie=victim.name)
        wait_for_read_only(healthy, victim.ready["id"])
        workloads.wait_for_progress()
        finish(workloads, "fsync-bookie")
        assert "read-only" in victim.log_path.read_text()
    finally:
        victim.stop()
        victim.command = healthy.bookie_command(index, port)
        victim.start()


def test_a_full_disk_turns_a_bookie_read_only_and_writers_move_on(healthy, workloads_for, tmp_path) -> None:
    index = 2
    victim = healthy.bookies[index]
    data = healthy.dir / victim.name
    reason = disk_full.unavailable_reason(tmp_path / "probe")
    if reason:
        pytest.skip(f"full disk: {reason}")
    victim.stop()
    healthy.bookies[3].stop()   # three bookies left for E = 3: every new ledger uses the victim
    saved = tmp_path / "saved"
    shutil.copytree(data, saved)
    disk = disk_full.SmallDisk(data, size_mib=64).mount()
    try:
        shutil.copytree(saved, data, dirs_exist_ok=True)
        healthy.restart(victim)
        workloads = workloads_for(bootstrap(healthy), amqp(healthy), partitions=4)
        workloads.wait_for_progress()
        disk.fill()
        workloads.fault("disk-full", bookie=victim.name)
        wait_for_read_only(healthy, victim.ready["id"])
        workloads.wait_for_progress()
        finish(workloads, "disk-full-bookie")
    finally:
        victim.stop()
        disk.free()
        shutil.rmtree(saved)
        shutil.copytree(data, saved)       # what the bookie wrote, back on the real disk
        disk.close()
        shutil.copytree(saved, data, dirs_exist_ok=True)
        healthy.restart(victim)


def test_a_wiped_bookie_is_refused_by_its_cookie(healthy) -> None:
    victim = healthy.bookies[-1]
    victim.kill()
    data = healthy.dir / victim.name
    shutil.rmtree(data)
    data.mkdir()
    with pytest.raises(RuntimeError, match="did not start"):
        healthy.restart(victim)
    log = victim.log_path.read_text()
    assert "directory wiped" in log
    # The operator's way back: the machine joins again as a new bookie id.
    victim.command[victim.command.index("--id") + 1] = f"{victim.name}-new"
    victim.start()
    assert victim.ready["id"] == f"{victim.name}-new"


def damage_sealed_segments(journal: Path) -> list[int]:
    """Offline media damage, as a disk gives it: one flipped bit in the payload of every tenth entry
    record of each sealed segment, and one torn (zeroed) 4 KiB page halfway through it. Returns the
    segments damaged (the last segment, the one written until the stop, is left alone)."""
    damaged = []
    for segment_id in list_segments(journal)[:-1]:
        path = journal / fmt.segment_name(segment_id)
        fd = os.open(path, os.O_RDONLY)
        try:
            records = [r for r in fmt.scan(fd, fmt.SEGMENT_HEADER.size, os.fstat(fd).st_size)
                       if isinstance(r, fmt.Record) and r.kind is fmt.RecordKind.ENTRY]
        finally:
            os.close(fd)
        if len(records) < 20:
            continue
        with open(path, "r+b") as segment:
            for record in records[5::10]:
                segment.seek(record.offset + record.size - 3)
                byte = segment.read(1)[0]
                segment.seek(record.offset + record.size - 3)
                segment.write(bytes([byte ^ 0x10]))
            middle = records[len(records) // 2].offset
            segment.seek(middle - middle % 4096)
            segment.write(bytes(4096))
        damaged.append(segment_id)
    return damaged


def test_bit_flips_and_a_torn_page_in_a_bookies_journal_are_never_served_and_lose_nothing(
        healthy, workloads_for) -> None:
    """A bookie holding data is restarted (its segment of acknowledged entries is sealed), stopped
    again, and its sealed segments are damaged on disk (flipped bits, a torn page); its index is
    removed, so its start scans them. It keeps and marks them, rejoins under load, and the checkers'
    bar holds: nothing lost, nothing read that was not sent. (Most reads here are served from the
    gateway's cache; reads that meet a damaged copy and go to another replica are
    tests/storage/test_ledger_replication.py's.)"""
    workloads = workloads_for(bootstrap(healthy), amqp(healthy))
    workloads.wait_for_progress(100)
    victim = bookie_holding_data(healthy)
    healthy.restart(victim)
    workloads.wait_for_progress(100)
    victim.stop()
    bookie_dir = healthy.dir / victim.name / "bookie"
    damaged = damage_sealed_segments(bookie_dir / "journal")
    assert damaged, "no sealed segment with acknowledged entries to damage"
    shutil.rmtree(bookie_dir / "index")
    workloads.fault("bitflip-bookie", bookie=victim.name, segments=damaged)
    healthy.restart(victim)
    assert sorted(p.name for p in (bookie_dir / "journal").glob("*.damaged")) == [
        f"{segment_id:016x}.damaged" for segment_id in damaged]
    workloads.wait_for_progress(100)
    finish(workloads, "bitflip-bookie")


SLOW_FSYNC_MS = 500


@pytest.mark.skipif(lazyfs.unavailable_reason() is not None, reason=f"slow disk: {lazyfs.unavailable_reason()}")
def test_a_bookie_on_a_slow_disk_does_not_hold_acknowledgements_back_and_says_so(healthy, workloads_for) -> None:
    """Bookie 0's directory on the lazy filesystem with every fsync 500 ms longer (a slow disk), the
    fourth bookie stopped so that every new ledger's ensemble of three includes it: with Qa = 2 of
    Qw = 3 the other two acknowledge, so half of the sends are acknowledged in less than one of its
    fsyncs; its journal logs the slow disk; the checkers' bar holds."""
    victim = healthy.bookies[0]
    directory = healthy.dir / victim.name
    backing = healthy.dir / f"{victim.name}.disk"
    victim.stop()
    directory.rename(backing)
    mount = LazyFsMount(backing, directory).start()
    try:
        mount.slow_fsync(SLOW_FSYNC_MS)
        healthy.restart(victim)
        healthy.bookies[3].stop()
        workloads = workloads_for(bootstrap(healthy), amqp(healthy), partitions=2)
        started = time.monotonic()
        workloads.wait_for_progress(200)
        latencies = ack_latencies(workloads.kafka_history, started, time.monotonic())
        finish(workloads, "slow-bookie")
        median = latencies[len(latencies) // 2]
        print(f"Kafka acknowledgements with one bookie's fsyncs {SLOW_FSYNC_MS} ms slower: "
              f"p50 {median * 1000:.0f} ms of {len(latencies)}")
        assert median < SLOW_FSYNC_MS / 1000, "acknowledgements waited for the slow bookie"
        assert "a slow disk" in victim.log_path.read_text(errors="replace"), "the slow bookie never said so"
    finally:
        victim.stop()
        mount.close()
        directory.rmdir()
        backing.rename(directory)

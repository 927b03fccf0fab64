"""Load shedding in a real two-broker cluster (`gateway cluster up` as a library, shedding every 2 s):
a confluent-kafka producer loads only bundles broker 0 owns; the leader moves one of them to
broker 1, the producer follows the new leader with every message acknowledged, and the moved bundle
is not sent back while the load goes on. Then an operator's move through the admin API and
`gateway admin`: the partition goes to the broker named and stays there, under load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import httpx

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.faults.harness.bundles import partition_holders
from gateway.cluster.launcher import ClusterSpec, LocalCluster

SHED_INTERVAL_MS = 2000
PARTITIONS = 16
DEADLINE_S = 90.0
VALUE = b"x" * (16 << 10)        # 16 KiB: a few MB/s without much client CPU
ADMIN = ("root", "root-secret")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(data_dir=tmp_path_factory.mktemp("shedding"), bookies=1, brokers=2, ensemble=1,
                       write_quorum=1, ack_quorum=1,
                       broker_args=("--load-shed-interval-ms", str(SHED_INTERVAL_MS)),
                       extra_config=f'[[users]]\nname = "{ADMIN[0]}"\npassword = "{ADMIN[1]}"\ntags = ["administrator"]\n')
    local = LocalCluster(spec)
    local.start()
    yield local
    local.stop()


def holders(cluster, topic: str) -> dict[int, tuple[str, int | None]]:
    return partition_holders(cluster, topic, range(PARTITIONS))     # the last test splits a bundle


def test_the_leader_moves_a_loaded_bundle_off_the_busy_broker_and_not_back(cluster) -> None:
    bootstrap = cluster.brokers[0].ready["kafka"]
    topic = f"shed-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    deadline = time.monotonic() + DEADLINE_S
    while True:   # both brokers up and holding bundles of this namespace
        found = holders(cluster, topic)
        owners = {broker for _, broker in found.values()}
        if owners == {0, 1}:
            break
        assert time.monotonic() < deadline, f"bundles never spread over both brokers: {found}"
        time.sleep(0.2)
    loaded_bundles = sorted({bundle for bundle, broker in found.values() if broker == 0})
    assert len(loaded_bundles) >= 2, f"broker 0 holds too few bundles of {topic} to shed one: {found}"
    loaded = [p for p, (bundle, _) in found.items() if bundle in loaded_bundles[:3]]

    acked, failed = [], []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True})

    def delivered(error, message) -> None:
        (failed if error is not None else acked).append(message.partition())

    moved: dict[str, int] = {}
    sent = 0
    try:
        while not moved or time.monotonic() < moved_at + 3 * SHED_INTERVAL_MS / 1000:
            assert time.monotonic() < deadline, "no bundle was shed off the busy broker"
            for partition in loaded:
                producer.produce(topic, VALUE, partition=partition, on_delivery=delivered)
                sent += 1
            producer.poll(0.02)
            now = holders(cluster, topic) if sent % (10 * len(loaded)) == 0 else None
            if now is not None:
                for bundle in loaded_bundles[:3]:
                    broker = next(b for bn, b in now.values() if bn == bundle)
                    if not moved and broker == 1:
                        moved[bundle], moved_at = broker, time.monotonic()
                    elif bundle in moved:
                        assert broker == 1, f"bundle {bundle} was sent back to broker {broker}"
    finally:
        assert producer.flush(60) == 0
    assert not failed and len(acked) == sent
    assert len(moved) == 1


def gateway_admin(cluster, *args: str) -> dict:
    """`gateway admin --json ...` against broker 0's admin port."""
    env = dict(os.environ, GATEWAY_ADMIN_URL=f"http://{cluster.brokers[0].ready['admin']}",
               GATEWAY_ADMIN_USER=ADMIN[0], GATEWAY_ADMIN_PASSWORD=ADMIN[1])
    done = subprocess.run([sys.executable, "-m", "gateway", "admin", "--json", *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_an_operator_moves_a_partition_through_the_admin_api_and_it_stays(cluster) -> None:
    bootstrap = cluster.brokers[0].ready["kafka"]
    topic = f"moved-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        found = holders(cluster, topic)
        if None not in {broker for _, broker in found.values()}:
            break
        assert time.monotonic() < deadline, f"bundles never all held: {found}"
        time.sleep(0.2)
    bundle, source = found[0]
    target = 1 - source
    base = f"http://{cluster.brokers[1].ready['admin']}/api/v1"
    owner = f"{base}/tenants/public/namespaces/default/topics/{topic}/partitions/0/owner"
    assert httpx.put(owner, json={"broker": target}).status_code == 401
    assert httpx.put(owner, json={"broker": 7}, auth=ADMIN).status_code == 400      # no such broker
    brokers = gateway_admin(cluster, "cluster", "brokers")
    assert sorted(b["id"] for b in brokers["brokers"]) == [0, 1] and brokers["leader"] in (0, 1)

    acked, failed = [], []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True})

    def delivered(error, message) -> None:
        (failed if error is not None else acked).append(message.offset())

    for _ in range(50):
        producer.produce(topic, b"before", partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    moved = gateway_admin(cluster, "cluster", "move", "public", "default", topic, "0", str(target))
    assert moved == {"bundle": bundle, "broker": target}
    while holders(cluster, topic)[0][1] != target:
        assert time.monotonic() < deadline, "the partition never moved"
        producer.produce(topic, b"during", partition=0, on_delivery=delivered)
        producer.poll(0.05)
    while httpx.get(f"{base}/cluster", auth=ADMIN).json()["moves"]:
        assert time.monotonic() < deadline, "the move is still listed after it completed"
        time.sleep(0.2)
    for _ in range(50):
        producer.produce(topic, b"after", partition=0, on_delivery=delivered)
    assert producer.flush(60) == 0
    assert not failed and sorted(acked) == list(range(len(acked)))      # dense offsets across the move
    time.sleep(2 * SHED_INTERVAL_MS / 1000)                               # a shedding round or two later ...
    assert holders(cluster, topic)[0] == (bundle, target)                  # ... it is still where it was put


def listed_bundles(cluster) -> list[dict]:
    return gateway_admin(cluster, "cluster", "bundles", "public", "default")["bundles"]


def within(listed: list[dict], lower: int, upper: int) -> list[dict]:
    return [entry for entry in listed if lower <= int(entry["lower"], 16) and int(entry["upper"], 16) <= upper]


def test_an_operator_splits_a_placed_bundle_through_gateway_admin_and_both_halves_stay_put(cluster) -> None:
    """`gateway admin cluster split` (Pulsar's split-bundle): the owner cuts the bundle in two where
    its traffic divides, both halves keep the broker an operator placed it on, and a producer
    goes on with dense offsets. Last in the module: the split stays in the cluster's layout."""
    bootstrap = cluster.brokers[0].ready["kafka"]
    topic = f"split-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    deadline = time.monotonic() + DEADLINE_S
    found = holders(cluster, topic)
    while None in {broker for _, broker in found.values()}:
        assert time.monotonic() < deadline, f"bundles never all held: {found}"
        time.sleep(0.2)
        found = holders(cluster, topic)
    path, source = found[0]
    target = 1 - source
    gateway_admin(cluster, "cluster", "move", "public", "default", topic, "0", str(target))
    while holders(cluster, topic)[0][1] != target:
        assert time.monotonic() < deadline, "the partition never moved"
        time.sleep(0.2)

    acked, failed = [], []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True})

    def delivered(error, message) -> None:
        (failed if error is not None else acked).append((message.partition(), message.offset()))

    in_bundle = [p for p, (bundle, _) in found.items() if bundle == path]
    for _ in range(20):
        for partition in in_bundle:
            producer.produce(topic, b"before", partition=partition, on_delivery=delivered)
    assert producer.flush(30) == 0

    base = f"http://{cluster.brokers[1].ready['admin']}/api/v1/tenants/public/namespaces/default/bundles"
    hashes = path.rsplit("/", 1)[1]
    lower, upper = (int(bound, 16) for bound in hashes.split("_"))
    assert httpx.put(f"{base}/{hashes}/split", json={}).status_code == 401
    assert httpx.put(f"{base}/0x00000001_0x00000002/split", json={}, auth=ADMIN).status_code == 404
    assert httpx.put(f"{base}/{hashes}/split", json={"at": upper}, auth=ADMIN).status_code == 400
    assert {"bundle": path, "lower": f"0x{lower:08x}", "upper": f"0x{upper:08x}", "broker": target} in listed_bundles(cluster)
    assert gateway_admin(cluster, "cluster", "split", "public", "default", hashes) == {"bundle": path, "at": None}
    while any(entry["bundle"] == path for entry in listed_bundles(cluster)):
        assert time.monotonic() < deadline, "the bundle was never split"
        producer.produce(topic, b"during", partition=in_bundle[0], on_delivery=delivered)
        producer.poll(0.05)
    assert len(within(listed_bundles(cluster), lower, upper)) == 2 and len(listed_bundles(cluster)) == 17
    while {entry["broker"] for entry in within(listed_bundles(cluster), lower, upper)} != {target}:
        assert time.monotonic() < deadline, f"the halves did not stay on broker {target}"
        time.sleep(0.2)
    for _ in range(20):
        for partition in in_bundle:
            producer.produce(topic, b"after", partition=partition, on_delivery=delivered)
    assert producer.flush(60) == 0
    assert not failed
    for partition in in_bundle:      # dense offsets across the split
        offsets = sorted(offset for p, offset in acked if p == partition)
        assert offsets == list(range(len(offsets)))
    time.sleep(2 * SHED_INTERVAL_MS / 1000)           # a shedding round or two later, both still there
    assert {entry["broker"] for entry in within(listed_bundles(cluster), lower, upper)} == {target}

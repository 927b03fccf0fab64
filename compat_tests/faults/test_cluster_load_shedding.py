"""Load shedding in a real two-broker cluster (`gateway cluster up` as a library, shedding every 2 s):
a confluent-kafka producer loads only bundles broker 0 owns; the leader moves one of them to
broker 1, the producer follows the new leader with every message acknowledged, and the moved bundle
is not sent back while the load goes on."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from core.cluster.bundles import partition_bundle
from gateway.cluster.launcher import ClusterSpec, LocalCluster
from storage.metadata.zookeeper import ZooKeeperMetadataStore

SHED_INTERVAL_MS = 2000
PARTITIONS = 16
DEADLINE_S = 90.0
VALUE = b"x" * (16 << 10)        # 16 KiB: a few MB/s without much client CPU


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(data_dir=tmp_path_factory.mktemp("shedding"), bookies=1, brokers=2, ensemble=1,
                       write_quorum=1, ack_quorum=1,
                       broker_args=("--load-shed-interval-ms", str(SHED_INTERVAL_MS)))
    local = LocalCluster(spec)
    local.start()
    yield local
    local.stop()


async def _holders(cluster, topic: str) -> dict[int, tuple[str, int | None]]:
    """Partition -> (its bundle, the broker holding the bundle's lease)."""
    store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
    try:
        found = {}
        for index in range(PARTITIONS):
            bundle = partition_bundle("public", "default", topic, index).path
            node = await store.get(f"/cluster/leases/{bundle}")
            found[index] = (bundle, None if node is None else json.loads(node.value)["broker"])
        return found
    finally:
        await store.close()


def holders(cluster, topic: str) -> dict[int, tuple[str, int | None]]:
    return asyncio.run(_holders(cluster, topic))


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

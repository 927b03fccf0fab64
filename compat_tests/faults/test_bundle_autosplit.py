"""A hot bundle in a real two-broker cluster (`gateway cluster up` as a library, splits above 300
msg/s, shedding every 2 s): an idempotent confluent-kafka producer loads two partitions that hash
into one bundle of broker 0. Before splits, shedding could not help (the bundle was all the load);
now the owner splits it between the two partitions, the leader sheds one half to broker 1, and the
producer follows with every message acknowledged once, offsets dense."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.faults.harness.bundles import partition_holders
from gateway.cluster.launcher import ClusterSpec, LocalCluster

PARTITIONS = 16
DEADLINE_S = 90.0
VALUE = b"x" * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(data_dir=tmp_path_factory.mktemp("autosplit"), bookies=1, brokers=2, ensemble=1,
                       write_quorum=1, ack_quorum=1,
                       broker_args=("--load-shed-interval-ms", "2000", "--bundle-split-messages-per-s", "300"))
    local = LocalCluster(spec)
    local.start()
    yield local
    local.stop()


def holders(cluster, topic: str, partitions: list[int]) -> dict[int, tuple[str, int | None]]:
    return partition_holders(cluster, topic, partitions)


def test_a_bundle_hot_with_two_partitions_is_split_and_half_of_it_shed(cluster) -> None:
    bootstrap = cluster.brokers[0].ready["kafka"]
    topic = f"hot-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    deadline = time.monotonic() + DEADLINE_S
    found = holders(cluster, topic, list(range(PARTITIONS)))
    while None in {broker for _, broker in found.values()}:
        assert time.monotonic() < deadline, f"bundles never all held: {found}"
        time.sleep(0.2)
        found = holders(cluster, topic, list(range(PARTITIONS)))
    by_bundle: dict[str, list[int]] = {}
    for index, (bundle, broker) in found.items():
        if broker == 0:
            by_bundle.setdefault(bundle, []).append(index)
    hot = next(indexes[:2] for indexes in by_bundle.values() if len(indexes) >= 2)

    acked, failed = [], []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True})

    def delivered(error, message) -> None:
        (failed if error is not None else acked).append((message.partition(), message.offset()))

    started, split_at, now = time.monotonic(), None, {}
    try:
        while True:       # about 2,000 msg/s of 1 KiB over the two partitions
            assert time.monotonic() < deadline, f"the hot bundle was never split and shed: {now}"
            for _ in range(20):
                for index in hot:
                    producer.produce(topic, VALUE, partition=index, on_delivery=delivered)
            producer.poll(0.02)
            now = holders(cluster, topic, hot)
            if split_at is None and now[hot[0]][0] != now[hot[1]][0]:
                split_at = time.monotonic()
            if split_at is not None and {broker for _, broker in now.values()} == {0, 1}:
                break
        shed_at = time.monotonic()
        for _ in range(100):
            for index in hot:
                producer.produce(topic, VALUE, partition=index, on_delivery=delivered)
    finally:
        assert producer.flush(60) == 0
    assert not failed
    for index in hot:      # every message acknowledged once, offsets dense through the split and the move
        offsets = sorted(offset for partition, offset in acked if partition == index)
        assert offsets == list(range(len(offsets)))
    print(f"partitions {hot} of one bundle: split {split_at - started:.1f}s after the load began, "
          f"one half on broker 1 {shed_at - split_at:.1f}s later; {len(acked)} messages acknowledged")

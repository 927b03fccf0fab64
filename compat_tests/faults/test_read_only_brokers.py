"""Read-only brokers (`gateway serve --role read-only`) in a real cluster (`gateway cluster up` as a
library): one serving broker, one read-only broker in a rack of its own, one bookie. The owner of
a partition sends a consumer whose client.rack is that rack to the read-only broker (KIP-392's
preferred read replica); there confluent-kafka reads everything the producer wrote, its last record
too once the producer stops (the writer's explicit LAC), read_committed readers see exactly the
committed transactions, and the read-only broker refuses writes. Under a kill -9 and restart of the
owner, consumers reading through the read-only broker miss nothing and see nothing twice."""

from __future__ import annotations

import re
import time
import uuid

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.memory_records import MemoryRecordsBuilder

from compat_tests.faults.harness.scenarios import settle
from compat_tests.kafka.wire_call import raw_request
from gateway.cluster.launcher import ClusterSpec, LocalCluster
from protocols.kafka.schema.fetch import FETCH
from protocols.kafka.schema.produce import PRODUCE

READERS_RACK = "/rack-readers"
NOT_LEADER_OR_FOLLOWER = 6
DEADLINE_S = 60.0
OWNER, READER = 0, 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(data_dir=tmp_path_factory.mktemp("readers"), bookies=1, brokers=1, read_only_brokers=1,
                       read_only_rack=READERS_RACK, ensemble=1, write_quorum=1, ack_quorum=1,
                       extra_storage={"zookeeper_session_timeout_ms": 3000})
    local = LocalCluster(spec)
    local.start()
    try:
        # Both brokers registered and seen by the owner (it finds new brokers by polling).
        admin = AdminClient({"bootstrap.servers": local.brokers[OWNER].ready["kafka"]})
        until(lambda: len(admin.list_topics(timeout=10).brokers) == 2, "the owner never saw the read-only broker")
        yield local
    finally:
        local.stop()


def address(cluster, index: int) -> tuple[str, int]:
    host, _, port = cluster.brokers[index].ready["kafka"].rpartition(":")
    return host, int(port)


def bootstrap(cluster, index: int = OWNER) -> str:
    return cluster.brokers[index].ready["kafka"]


def new_topic(cluster) -> str:
    topic = f"readers-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    return topic


def produce(cluster, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def fetch(cluster, index: int, topic: str, *, rack: str = "", committed: bool = False):
    """One Fetch v11 of partition 0 from offset 0: the partition's answer."""
    response = raw_request(address(cluster, index), FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 1 if committed else 0, "session_id": 0, "session_epoch": -1, "rack_id": rack,
        "forgotten_topics_data": [], "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20}]}]})
    return response.responses[0].partitions[0]


def dispatched_bytes(cluster, index: int) -> int:
    """What the broker read for consumers of the default namespace (its Prometheus counter)."""
    text = httpx.get(f"http://{cluster.brokers[index].ready['admin']}/metrics", timeout=10).text
    found = re.search(r'^gateway_namespace_dispatched_bytes_total\{namespace="default",tenant="public"\} (\S+)$',
                      text, re.M)
    return int(float(found.group(1))) if found else 0


def until(predicate, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while not (value := predicate()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return value


def test_the_owner_sends_a_consumer_of_the_readers_rack_to_the_read_only_broker(cluster) -> None:
    topic = new_topic(cluster)
    produce(cluster, topic, [b"a", b"b", b"c"])
    sent = fetch(cluster, OWNER, topic, rack=READERS_RACK)
    assert (sent.error_code, sent.preferred_read_replica, sent.high_watermark) == (0, READER, 3)
    assert not sent.records
    own_rack = fetch(cluster, OWNER, topic, rack="/rack-0")        # the owner is in that rack itself
    assert own_rack.preferred_read_replica == -1 and own_rack.records
    assert fetch(cluster, OWNER, topic, rack=READERS_RACK, committed=True).preferred_read_replica == READER

    served = until(lambda: (answer := fetch(cluster, READER, topic)).high_watermark == 3 and answer,
                   "the read-only broker never caught up with the owner")
    assert (served.error_code, served.preferred_read_replica) == (0, -1) and served.records == sent_records(cluster, topic)
    committed = fetch(cluster, READER, topic, committed=True)
    assert (committed.error_code, committed.last_stable_offset, bytes(committed.records)) == (0, 3, served.records)


def sent_records(cluster, topic: str) -> bytes:
    return bytes(fetch(cluster, OWNER, topic).records)


def test_a_read_only_broker_refuses_writes(cluster) -> None:
    topic = new_topic(cluster)
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=None, value=b"refused", headers=[])
    builder.close()
    response = raw_request(address(cluster, READER), PRODUCE, 3, {
        "transactional_id": None, "acks": -1, "timeout_ms": 10_000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": bytes(builder.buffer())}]}]})
    assert response.responses[0].partition_responses[0].error_code == NOT_LEADER_OR_FOLLOWER
    assert fetch(cluster, OWNER, topic).high_watermark == 0


def test_a_consumer_with_client_rack_reads_everything_from_the_read_only_broker(cluster) -> None:
    topic = new_topic(cluster)
    values = [b"m%04d" % n for n in range(300)]
    produce(cluster, topic, values[:299])
    owner_before, reader_before = dispatched_bytes(cluster, OWNER), dispatched_bytes(cluster, READER)
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "client.rack": READERS_RACK, "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 299:
            assert time.monotonic() < deadline, f"read {len(got)} of 299"
            got += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
        produce(cluster, topic, values[299:])        # the tail: one record, then the producer is idle
        while len(got) < 300:
            assert time.monotonic() < deadline, "the last record never reached the consumer"
            got += [m.value() for m in consumer.consume(10, 0.5) if m.error() is None]
    finally:
        consumer.close()
    assert got == values
    served_by_reader = dispatched_bytes(cluster, READER) - reader_before
    served_by_owner = dispatched_bytes(cluster, OWNER) - owner_before
    assert served_by_reader >= sum(map(len, values)), (served_by_reader, served_by_owner)
    assert served_by_owner < served_by_reader


def test_read_committed_consumers_on_the_read_only_broker_see_only_committed_transactions(cluster) -> None:
    topic = new_topic(cluster)
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    for values, commit in (([b"c1", b"c2"], True), ([b"aborted"], False), ([b"c3"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value, partition=0)
        assert producer.flush(30) == 0       # stored, so that an abort leaves it in the log
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    reader_before = dispatched_bytes(cluster, READER)
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "client.rack": READERS_RACK, "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 3:      # c3 comes after the aborted record: once it is there, that one was skipped
            assert time.monotonic() < deadline, f"read {got}"
            got += [m.value() for m in consumer.consume(10, 0.5) if m.error() is None]
        assert consumer.position([TopicPartition(topic, 0)])[0].offset == 7       # past the last marker
    finally:
        consumer.close()
    assert got == [b"c1", b"c2", b"c3"]
    assert dispatched_bytes(cluster, READER) > reader_before


def test_consumers_of_the_read_only_broker_read_on_through_a_kill9_of_the_owner(cluster, workloads_for) -> None:
    """Idempotent producers and rack-aware consumers throughout; the final drain reads through the
    read-only broker too. The checker's verdict: nothing acknowledged lost, no offset with two
    values, no reordering, no skipped or repeated offset for any reader."""
    workloads = workloads_for([bootstrap(cluster)], None, partitions=3, consumer_config={"client.rack": READERS_RACK})
    workloads.wait_for_progress(200)
    reader_before = dispatched_bytes(cluster, READER)
    owner = cluster.brokers[OWNER]
    owner.kill()
    workloads.fault("kill9-owner", broker=owner.name)
    cluster.restart(owner)
    workloads.fault("restart", broker=owner.name)
    workloads.wait_for_progress(200)
    workloads.stop()
    workloads.drain()
    settle(workloads.verdicts("readers-kill9-owner"), 200)
    assert dispatched_bytes(cluster, READER) > reader_before

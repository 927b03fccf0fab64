"""Three brokers on three bookies (`gateway cluster up` as a library), the partitions spread over the
brokers by bundle ownership, and the faults that move ownership: kill -9 of the owner of busy
partitions, the owner paused past its ZooKeeper session (its late writes must fail: fenced), the
death of a consumer group's coordinator, and a coordinator paused past its session (its late
offset commit must not overwrite the one made through the next coordinator). Kafka clients bootstrap from one broker and follow the
leaders Metadata names. Each fault test ends with the checkers' verdict (nothing acknowledged lost,
no offset holding two values, no reordering, no duplicate from the idempotent producer) and prints
the failover time of every partition (last acknowledgement before the fault -> first one after).
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import struct
import time
import uuid
from collections import Counter

import pika
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import NoReassignmentInProgressError
from kafka.record.memory_records import MemoryRecordsBuilder

from compat_tests.faults.harness import cgroup
from compat_tests.faults.harness.balance import wait_until_balanced
from compat_tests.faults.harness.bundles import follow_layouts
from compat_tests.faults.harness.failover import ack_latencies, describe, failover_times
from compat_tests.faults.harness.history import INVOKE, OK
from compat_tests.faults.harness.scenarios import settle
from compat_tests.kafka.epoch_readers import READERS, AiokafkaReader, produce
from core.cluster.bundles import group_bundle, partition_bundle, transaction_bundle
from core.cluster.splits import SPLITS, request_split
from core.groups.naming import storage_name
from compat_tests.faults.harness.proxy import TcpProxy
from gateway.cluster.launcher import ZK_ROOT, ClusterSpec, LocalCluster
from storage.metadata.zookeeper import ZooKeeperMetadataStore

SESSION_TIMEOUT_MS = 3000
MIN_ACKED = 200
DEADLINE_S = 90.0
NOT_LEADER_OR_FOLLOWER = 6
ERROR_NONE = 0
BOOKIE_CUT_S = 8.0      # several bookie timeouts (bookie_timeout_ms below), well under the message timeout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(data_dir=tmp_path_factory.mktemp("brokers"), bookies=3, brokers=3, ensemble=3,
                       write_quorum=3, ack_quorum=2,
                       extra_storage={"zookeeper_session_timeout_ms": SESSION_TIMEOUT_MS, "bookie_timeout_ms": 1500})
    local = LocalCluster(spec)
    local.start()
    yield local
    local.stop()


def kafka_address(broker) -> str:
    return broker.ready["kafka"]


def others(cluster, victim) -> list[str]:
    return [kafka_address(b) for b in cluster.brokers if b is not victim]


def create_topic(bootstrap: str, partitions: int) -> str:
    topic = f"spread-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic


# --- ownership as stored in ZooKeeper -------------------------------------------------------------


async def _bundle_holders(cluster, bundles) -> list[int | None]:
    """The broker id holding each bundle's lease (None: nobody); `bundles` may be a function giving
    them, called once the cluster's current layouts are followed."""
    store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
    try:
        await follow_layouts(store)
        holders = []
        for bundle in (bundles() if callable(bundles) else bundles):
            node = await store.get(f"/cluster/leases/{bundle.path}")
            holders.append(None if node is None else json.loads(node.value)["broker"])
        return holders
    finally:
        await store.close()


def lease_holders(cluster, topic: str, partitions: int) -> dict[int, int | None]:
    """Partition -> the broker id holding its bundle's lease (None: nobody)."""
    return dict(enumerate(asyncio.run(_bundle_holders(
        cluster, lambda: [partition_bundle("public", "default", topic, index) for index in range(partitions)]))))


def wait_for_holders(cluster, topic: str, partitions: int, accept) -> dict[int, int | None]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        holders = lease_holders(cluster, topic, partitions)
        if accept(holders):
            return holders
        assert time.monotonic() < deadline, f"ownership never settled: {holders}"
        time.sleep(0.2)


def busiest_owner(cluster, topic: str, partitions: int):
    """The broker process holding the most partitions of `topic`, and those partitions."""
    wait_until_balanced(cluster)
    holders = wait_for_holders(cluster, topic, partitions, lambda h: None not in h.values())
    broker_id, _ = Counter(holders.values()).most_common(1)[0]
    return cluster.brokers[broker_id], [p for p, b in holders.items() if b == broker_id]


# --- a raw Produce v3, to send to a chosen broker -------------------------------------------------


def produce_v3(topic: str, partition: int, value: bytes, correlation_id: int) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=None, value=value, headers=[])
    builder.close()
    records = bytes(builder.buffer())
    client = b"zombie-test"
    header = struct.pack(">hhih", 0, 3, correlation_id, len(client)) + client
    name = topic.encode()
    body = (struct.pack(">hhi", -1, -1, 30_000) + struct.pack(">ih", 1, len(name)) + name
            + struct.pack(">ii", 1, partition) + struct.pack(">i", len(records)) + records)
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def read_produce_v3_error(sock: socket.socket) -> int:
    """The error code of the single partition of a Produce v3 response."""
    size = struct.unpack(">i", _recv(sock, 4))[0]
    payload = _recv(sock, size)
    at = 4 + 4                                            # correlation id, topic count
    name_length = struct.unpack_from(">h", payload, at)[0]
    at += 2 + name_length + 4 + 4                         # name, partition count, partition index
    return struct.unpack_from(">h", payload, at)[0]


def offset_commit_v2(group: str, topic: str, partition: int, offset: int, correlation_id: int) -> bytes:
    """A standalone OffsetCommit v2 (generation -1, no member), as an admin tool sends one."""
    def string(text: str) -> bytes:
        return struct.pack(">h", len(text.encode())) + text.encode()
    header = struct.pack(">hhi", 8, 2, correlation_id) + string("zombie-test")
    body = (string(group) + struct.pack(">i", -1) + string("") + struct.pack(">q", -1)
            + struct.pack(">i", 1) + string(topic) + struct.pack(">iiq", 1, partition, offset) + string(""))
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def read_offset_commit_v2_error(sock: socket.socket) -> int:
    """The error code of the single partition of an OffsetCommit v2 response."""
    payload = _recv(sock, struct.unpack(">i", _recv(sock, 4))[0])
    at = 4 + 4                                            # correlation id, topic count
    at += 2 + struct.unpack_from(">h", payload, at)[0] + 4 + 4   # name, partition count, partition index
    return struct.unpack_from(">h", payload, at)[0]


def _recv(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("connection closed")
        data += chunk
    return bytes(data)


# --- tests ----------------------------------------------------------------------------------------


def test_every_broker_registers_and_leads_a_share_of_the_partitions(healthy) -> None:
    bootstrap = kafka_address(healthy.brokers[0])
    topic = create_topic(bootstrap, 12)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + DEADLINE_S
    while True:   # membership is polled each second: a broker that just started may not be listed yet
        holders = lease_holders(healthy, topic, 12)
        metadata = admin.list_topics(topic, timeout=20)
        leaders = {p.id: p.leader for p in metadata.topics[topic].partitions.values()}
        if sorted(metadata.brokers) == [0, 1, 2] and leaders == holders:
            break
        assert time.monotonic() < deadline, f"brokers {sorted(metadata.brokers)}, leaders {leaders} vs {holders}"
        time.sleep(0.2)
    for index, broker in enumerate(healthy.brokers):
        host, _, port = kafka_address(broker).rpartition(":")
        assert (metadata.brokers[index].host, metadata.brokers[index].port) == (host, int(port))
    assert len(set(leaders.values())) >= 2, f"one broker leads everything: {leaders}"


def test_a_broker_refuses_partitions_it_does_not_own(healthy) -> None:
    bootstrap = kafka_address(healthy.brokers[0])
    topic = create_topic(bootstrap, 6)
    holders = wait_for_holders(healthy, topic, 6, lambda h: None not in h.values())
    partition, owner = next(iter(holders.items()))
    stranger = next(b for i, b in enumerate(healthy.brokers) if i != owner)
    host, _, port = kafka_address(stranger).rpartition(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(produce_v3(topic, partition, b"astray", 1))
        assert read_produce_v3_error(sock) == NOT_LEADER_OR_FOLLOWER


def test_confluent_and_kafka_python_follow_the_leaders(healthy) -> None:
    bootstrap = kafka_address(healthy.brokers[1])
    topic = create_topic(bootstrap, 6)
    wait_for_holders(healthy, topic, 6, lambda h: None not in h.values())
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    failed = []
    for i in range(300):
        producer.produce(topic, f"ck-{i}".encode(), partition=i % 6,
                         on_delivery=lambda e, m: failed.append(e) if e else None)
    assert producer.flush(60) == 0 and not failed, failed[:3]
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(300):
        kp.send(topic, f"kp-{i}".encode(), partition=i % 6)
    kp.flush(60)
    kp.close()

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: dict[int, list[str]] = {}
    deadline = time.monotonic() + DEADLINE_S
    while sum(map(len, seen.values())) < 600:
        assert time.monotonic() < deadline, f"consumed {sum(map(len, seen.values()))} of 600"
        for message in consumer.consume(200, 0.5):
            if message.error() is None:
                seen.setdefault(message.partition(), []).append(message.value().decode())
    consumer.close()
    for partition, values in seen.items():   # per partition: each producer's values in send order
        for prefix in ("ck-", "kp-"):
            numbers = [int(v[3:]) for v in values if v.startswith(prefix)]
            assert numbers == sorted(numbers) and len(numbers) == 50, (partition, prefix, numbers)

    reader = KafkaConsumer(topic, bootstrap_servers=kafka_address(healthy.brokers[2]), group_id=f"kp-{topic}",
                           auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    count = 0
    for _ in reader:
        count += 1
        if count == 600:
            break
    reader.close()
    assert count == 600


def test_consumers_read_on_through_a_failover_that_begins_a_new_leader_epoch(healthy) -> None:
    """kill -9 of a partition's owner: the new owner fences the ledger and begins a new leader epoch
    where the log ends. librdkafka and kafka-python see the epoch rise and validate their position
    with OffsetForLeaderEpoch; they and aiokafka read on: no offset reset, nothing twice, nothing missed."""
    wait_until_balanced(healthy)
    topic = create_topic(kafka_address(healthy.brokers[0]), 1)
    owner = wait_for_holders(healthy, topic, 1, lambda h: h[0] is not None)[0]
    victim = healthy.brokers[owner]
    bootstrap = ",".join(others(healthy, victim) + [kafka_address(victim)])
    produce(bootstrap, topic, range(10))
    readers = [reader(bootstrap, topic) for reader in READERS]
    try:
        epochs_before = set()
        for reader in readers:
            got = reader.read(10)
            assert [(o, v) for o, v, _ in got] == [(i, b"%d" % i) for i in range(10)], type(reader).__name__
            epochs_before |= {e for _, _, e in got if not isinstance(reader, AiokafkaReader)}
        victim.kill()
        wait_for_holders(healthy, topic, 1, lambda h: h[0] not in (None, owner))
        produce(bootstrap, topic, range(10, 20))
        for reader in readers:
            got = reader.read(10) + reader.read(1, timeout_s=2.0)
            assert [(o, v) for o, v, _ in got] == [(i, b"%d" % i) for i in range(10, 20)], type(reader).__name__
            if not isinstance(reader, AiokafkaReader):
                assert len(epochs_before) == 1 and {e for _, _, e in got} == {max(epochs_before) + 1}
    finally:
        for reader in readers:
            reader.close()


def wait_for_acks(history, key: str, since: float, count: int) -> None:
    """Until `count` sends to `key` were acknowledged after the monotonic time `since`."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        events = history.events
        ops = {e["op"] for e in events if e["type"] == INVOKE and e["key"] == key}
        acked = sum(1 for e in events if e["type"] == OK and e["op"] in ops and e["t"] > since)
        if acked >= count:
            return
        assert time.monotonic() < deadline, f"{key}: {acked} of {count} acknowledgements"
        time.sleep(0.2)


def acknowledged_on_all(workloads, partitions: int) -> None:
    for partition in range(partitions):
        wait_for_acks(workloads.kafka_history, workloads.kafka.key(partition), 0.0, 20)


def finish(workloads, name: str) -> None:
    workloads.stop()
    workloads.drain()
    settle(workloads.verdicts(name), MIN_ACKED)


def test_kill9_of_the_owner_of_busy_partitions_loses_nothing(healthy, workloads_for) -> None:
    workloads = workloads_for([kafka_address(healthy.brokers[0])], None, partitions=6)
    topic = workloads.kafka.topic
    victim, owned = busiest_owner(healthy, topic, 6)
    workloads.wait_for_progress(200)
    acknowledged_on_all(workloads, 6)       # so every partition's failover can be measured
    victim.kill()
    workloads.fault("kill9-owner", broker=victim.name, partitions=owned)
    wait_for_holders(healthy, topic, 6, lambda h: all(h[p] not in (None, healthy.brokers.index(victim))
                                                      for p in owned))
    workloads.wait_for_progress(200)
    workloads.fault("restart", broker=victim.name)
    healthy.restart(victim)
    workloads.wait_for_progress(100)
    finish(workloads, "kill9-owner")
    times = failover_times(workloads.kafka_history, "kill9-owner")
    print("failover after kill -9 of", victim.name, "owning", owned, "->", describe(times))
    for partition in owned:
        assert times[workloads.kafka.key(partition)] is not None


def test_a_reassignment_under_traffic_moves_the_partition_and_loses_nothing(healthy, workloads_for) -> None:
    """A logical-queue move through Kafka's own admin API (kafka-python's AlterPartitionReassignments,
    sent to the controller): the partition's bundle goes to the broker named, whose new ledger
    continues the offsets; ListPartitionReassignments shows the move until it is done; producers and
    consumers follow the new leader with nothing lost, duplicated or reordered, and the partition
    stays where it was put."""
    workloads = workloads_for([kafka_address(healthy.brokers[0])], None, partitions=6)
    topic = workloads.kafka.topic
    wait_until_balanced(healthy)
    source = wait_for_holders(healthy, topic, 6, lambda h: None not in h.values())[0]
    target = (source + 1) % len(healthy.brokers)
    workloads.wait_for_progress(200)
    acknowledged_on_all(workloads, 6)
    admin = KafkaAdminClient(bootstrap_servers=[kafka_address(b) for b in healthy.brokers])
    moved = TopicPartition(topic, 0)
    try:
        started = time.monotonic()
        workloads.fault("reassign", partitions=[0], source=source, target=target)
        assert admin.alter_partition_reassignments({moved: [target]}) == {moved: None}
        listed = admin.list_partition_reassignments()     # the move, unless it is done already
        assert all(entry["adding_replicas"] == [target] and entry["removing_replicas"] in ([source], [])
                   for entry in listed.values()), listed
        wait_for_holders(healthy, topic, 6, lambda h: h[0] == target)
        deadline = time.monotonic() + DEADLINE_S
        while admin.list_partition_reassignments():
            assert time.monotonic() < deadline, "the reassignment never completed"
            time.sleep(0.2)
        wait_for_acks(workloads.kafka_history, workloads.kafka.key(0), time.monotonic(), 20)
        done = time.monotonic()
        assert admin.alter_partition_reassignments({moved: None}) == {moved: NoReassignmentInProgressError}
        workloads.wait_for_progress(100)
        assert lease_holders(healthy, topic, 6)[0] == target
    finally:
        admin.close()
    finish(workloads, "reassign")
    latencies = ack_latencies(workloads.kafka_history, started, done)
    p99 = latencies[int(0.99 * (len(latencies) - 1))] if latencies else None
    print(f"reassignment of partition 0 from broker {source} to {target}: moved in {done - started:.2f}s,",
          describe(failover_times(workloads.kafka_history, "reassign")),
          f"; produce p99 during the move {p99:.3f}s over {len(latencies)} sends" if p99 is not None else "")


async def _leader(cluster) -> int | None:
    store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
    try:
        node = await store.get("/cluster/leader")
        return None if node is None else json.loads(node.value)["broker"]
    finally:
        await store.close()


def test_kill9_of_the_leader_broker_elects_another_that_reassigns(healthy, workloads_for) -> None:
    wait_until_balanced(healthy)
    leader = asyncio.run(_leader(healthy))
    victim = healthy.brokers[leader]
    workloads = workloads_for(others(healthy, victim), None, partitions=6)
    topic = workloads.kafka.topic
    owned = [p for p, b in wait_for_holders(healthy, topic, 6, lambda h: None not in h.values()).items()
             if b == leader]
    workloads.wait_for_progress(200)
    acknowledged_on_all(workloads, 6)       # so every partition's failover can be measured
    victim.kill()
    workloads.fault("kill9-leader", broker=victim.name, partitions=owned)
    deadline = time.monotonic() + DEADLINE_S
    while asyncio.run(_leader(healthy)) in (None, leader):   # another broker is elected
        assert time.monotonic() < deadline, "no other broker became the leader"
        time.sleep(0.2)
    wait_for_holders(healthy, topic, 6, lambda h: all(b not in (None, leader) for b in h.values()))
    workloads.wait_for_progress(200)
    workloads.fault("restart", broker=victim.name)
    healthy.restart(victim)
    wait_until_balanced(healthy)      # the restarted broker is given its share again
    workloads.wait_for_progress(100)
    finish(workloads, "kill9-leader")
    print("failover after kill -9 of the leader", victim.name, "owning", owned, "->",
          describe(failover_times(workloads.kafka_history, "kill9-leader")))


def test_kill9_of_every_broker_one_after_another_loses_nothing(healthy, workloads_for) -> None:
    workloads = workloads_for([kafka_address(b) for b in healthy.brokers], amqp_addresses(healthy), partitions=6)
    topic = workloads.kafka.topic
    for index, victim in enumerate(healthy.brokers):
        wait_until_balanced(healthy)
        workloads.wait_for_progress(100)
        victim.kill()
        workloads.fault("kill9-broker", broker=victim.name)
        wait_for_holders(healthy, topic, 6, lambda h: all(b not in (None, index) for b in h.values()))
        workloads.wait_for_progress(100)
        healthy.restart(victim)
    workloads.wait_for_progress(100)
    finish(workloads, "kill9-every-broker")


def test_an_owner_paused_past_its_session_is_fenced_when_it_wakes(healthy, workloads_for) -> None:
    """The killer scenario: SIGSTOP the owner until another broker took its bundles and acknowledges
    writes; a Produce sent to the paused owner meanwhile must fail when it wakes, and what it
    holds must never be acknowledged or read."""
    workloads = workloads_for([kafka_address(healthy.brokers[0])], None, partitions=6)
    topic = workloads.kafka.topic
    victim, owned = busiest_owner(healthy, topic, 6)
    victim_id = healthy.brokers.index(victim)
    workloads.wait_for_progress(200)
    acknowledged_on_all(workloads, 6)
    host, _, port = kafka_address(victim).rpartition(":")
    zombie = socket.create_connection((host, int(port)), timeout=60)
    victim.signal(signal.SIGSTOP)
    try:
        workloads.fault("sigstop-owner", broker=victim.name, partitions=owned)
        wait_for_holders(healthy, topic, 6, lambda h: all(h[p] not in (None, victim_id) for p in owned))
        # The new owner of the partition acknowledges writes: it opened (fenced) the log.
        wait_for_acks(workloads.kafka_history, workloads.kafka.key(owned[0]), time.monotonic(), 20)
        zombie.sendall(produce_v3(topic, owned[0], b"zombie-write", 7))   # waits in the paused owner's socket
    finally:
        victim.signal(signal.SIGCONT)
    workloads.fault("sigcont-owner", broker=victim.name)
    with zombie:
        try:
            code = read_produce_v3_error(zombie)
        except (EOFError, ConnectionError, TimeoutError):
            code = None                         # closed without an answer: not acknowledged either
    assert code != ERROR_NONE, "the paused owner acknowledged a write after another broker took over"
    workloads.wait_for_progress(100)
    finish(workloads, "sigstop-owner")
    stored = [r for r in workloads.kafka_history.reads() if r.value == "zombie-write"]
    assert not stored, f"the zombie's write is in the log: {stored}"
    times = failover_times(workloads.kafka_history, "sigstop-owner")
    print("failover after SIGSTOP of", victim.name, "owning", owned, "->", describe(times),
          "; the zombie's produce got error", code)


async def _stored_offset(cluster, topic: str, group: str) -> int | None:
    store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
    try:
        node = await store.get(f"/cursors/public/default/{topic}/0/{storage_name(group)}")
        return None if node is None else json.loads(node.value)["committed"]
    finally:
        await store.close()


def commit_until_accepted(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "reconnect.backoff.max.ms": 500})
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                consumer.commit(offsets=[ConfluentPartition(topic, 0, offset)], asynchronous=False)
                return
            except KafkaException as exc:
                assert time.monotonic() < deadline, f"offset {offset} never committed: {exc}"
                time.sleep(0.3)
    finally:
        consumer.close()


def test_a_coordinator_paused_past_its_session_cannot_overwrite_the_next_ones_commit(healthy) -> None:
    """An OffsetCommit waits in the socket of the paused coordinator while the group moves and commits
    a newer offset through its new coordinator. When the old one wakes, its commit must be refused:
    a group's committed offset never goes back to a value a dead coordinator was asked to write."""
    wait_until_balanced(healthy)
    bootstrap = ",".join(kafka_address(b) for b in healthy.brokers)
    topic = create_topic(bootstrap, 1)
    group = f"late-{topic}"
    commit_until_accepted(bootstrap, group, topic, 10)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    coordinator = admin.describe_consumer_groups([group])[group].result(30).coordinator.id
    victim = healthy.brokers[coordinator]
    host, _, port = kafka_address(victim).rpartition(":")
    zombie = socket.create_connection((host, int(port)), timeout=60)
    lease = f"/cluster/leases/{group_bundle('public', 'default', group).path}"
    victim.signal(signal.SIGSTOP)
    try:
        zombie.sendall(offset_commit_v2(group, topic, 0, 5, 9))   # waits in the paused coordinator's socket

        async def moved() -> bool:
            store = await ZooKeeperMetadataStore.open(healthy.metadata_url)
            try:
                node = await store.get(lease)
                return node is not None and json.loads(node.value)["broker"] != coordinator
            finally:
                await store.close()
        deadline = time.monotonic() + DEADLINE_S
        while not asyncio.run(moved()):
            assert time.monotonic() < deadline, "the group's bundle never moved off the paused coordinator"
            time.sleep(0.2)
        commit_until_accepted(",".join(others(healthy, victim)), group, topic, 20)
        assert asyncio.run(_stored_offset(healthy, topic, group)) == 20
    finally:
        victim.signal(signal.SIGCONT)
    with zombie:
        try:
            code = read_offset_commit_v2_error(zombie)
        except (EOFError, ConnectionError, TimeoutError):
            code = None                         # closed without an answer: not committed either
    stored = asyncio.run(_stored_offset(healthy, topic, group))
    assert stored == 20, f"the paused coordinator's late commit landed: committed offset {stored}, error {code}"
    assert code != ERROR_NONE, "the paused coordinator answered its late commit as done"
    print("the paused coordinator's late OffsetCommit got error", code)


def workloads_with_partition_0_on_broker_0(healthy, workloads_for):
    """Workloads over 6 partitions, partition 0 placed on broker 0: (workloads, topic, broker 0's partitions)."""
    workloads = workloads_for([kafka_address(b) for b in healthy.brokers], None, partitions=6)
    topic = workloads.kafka.topic
    admin = KafkaAdminClient(bootstrap_servers=[kafka_address(b) for b in healthy.brokers])
    try:
        admin.alter_partition_reassignments({TopicPartition(topic, 0): [0]})
    finally:
        admin.close()
    holders = wait_for_holders(healthy, topic, 6, lambda h: h[0] == 0 and None not in h.values())
    return workloads, topic, [p for p, b in holders.items() if b == 0]


def test_an_owner_cut_off_from_zookeeper_but_not_from_clients_stops_serving_and_comes_back(
        healthy, workloads_for) -> None:
    """The owner of the busiest partitions reaches ZooKeeper through a proxy that then drops
    everything: its session is suspended (it stops serving at once: its clients get
    NOT_LEADER_OR_FOLLOWER while their connections stay up), then expires, and the other brokers
    take its bundles, fencing its ledgers. Healed, it joins in a new session and is given bundles
    again. The checker's bar as for a kill -9."""
    wait_until_balanced(healthy)
    victim = healthy.brokers[0]
    host, _, port = healthy.zookeeper.address.rpartition(":")
    with TcpProxy((host, int(port))) as proxy:
        try:
            victim.env = {"GATEWAY_STORAGE_METADATA": f"zk://{proxy.address[0]}:{proxy.address[1]}{ZK_ROOT}"}
            healthy.restart(victim)
            wait_until_balanced(healthy)
            workloads, topic, owned = workloads_with_partition_0_on_broker_0(healthy, workloads_for)
            workloads.wait_for_progress(200)
            proxy.drop()
            workloads.fault("zookeeper-partition", broker=victim.name, partitions=owned)
            wait_for_holders(healthy, topic, 6, lambda h: all(b not in (None, 0) for b in h.values()))
            workloads.wait_for_progress(200)
            assert victim.alive(), "cut off from ZooKeeper, the broker must keep running"
            proxy.heal()
            workloads.fault("zookeeper-healed", broker=victim.name)
            wait_until_balanced(healthy)         # back in a new session, with its share of bundles
            workloads.wait_for_progress(100)
            finish(workloads, "zookeeper-partition")
            print("failover after cutting", victim.name, "off from ZooKeeper, owning", owned, "->",
                  describe(failover_times(workloads.kafka_history, "zookeeper-partition")))
        finally:
            victim.env = None
            healthy.restart(victim)


def acks_after(history, keys: set[str], since: float) -> int:
    events = history.events
    ops = {e["op"] for e in events if e["type"] == INVOKE and e["key"] in keys}
    return sum(1 for e in events if e["type"] == OK and e["op"] in ops and e["t"] > since)


def test_an_owner_cut_off_from_every_bookie_acknowledges_nothing_and_goes_on_when_they_return(
        healthy, workloads_for) -> None:
    """The owner of some partitions keeps ZooKeeper and its clients but every packet it sends to a
    bookie is dropped: its appends time out, its logs fail appends while they retry their repair,
    and nothing more is acknowledged on its partitions (the producers retry). It keeps its bundles.
    When the bookies are reachable again the repair succeeds and it writes again, on a new ledger.
    The checker's bar as for a kill -9: the producers' retries across the cut must not lose,
    duplicate or reorder anything."""
    if (reason := cgroup.unavailable_reason()) is not None:
        pytest.skip(f"cannot cut one process off: {reason}")
    wait_until_balanced(healthy)
    victim = healthy.brokers[0]
    bookie_ports = [int(b.ready["address"].rpartition(":")[2]) for b in healthy.bookies]
    group = cgroup.Cgroup().create()
    command = victim.command
    try:
        victim.command = group.wrap(command)
        healthy.restart(victim)
        wait_until_balanced(healthy)
        workloads, topic, owned = workloads_with_partition_0_on_broker_0(healthy, workloads_for)
        keys = {workloads.kafka.key(p) for p in owned}
        workloads.wait_for_progress(200)
        group.cut(bookie_ports)
        cut_at = time.monotonic()
        workloads.fault("bookies-cut", broker=victim.name, partitions=owned)
        time.sleep(BOOKIE_CUT_S)                  # the fault's length, not a wait for a condition
        healed_at = time.monotonic()
        # What was in flight at the cut may still complete within the bookie timeout (1.5 s).
        late = acks_after(workloads.kafka_history, keys, cut_at + 3.0)
        group.heal()
        workloads.fault("bookies-healed", broker=victim.name)
        assert late == 0, f"{late} writes acknowledged without a bookie"
        wait_for_acks(workloads.kafka_history, workloads.kafka.key(owned[0]), time.monotonic(), 20)
        assert lease_holders(healthy, topic, 6)[owned[0]] == 0
        workloads.wait_for_progress(100)
        finish(workloads, "bookies-cut")
        print("cut", victim.name, "off from the bookies for", round(healed_at - cut_at, 1), "s, owning", owned,
              "->", describe(failover_times(workloads.kafka_history, "bookies-cut")))
    finally:
        group.heal()
        victim.command = command
        healthy.restart(victim)
        group.delete()


def read_from_start(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int) -> list[tuple]:
    """(partition, value) of every record, once `expected` came and a last poll found nothing more."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([ConfluentPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    found: list[tuple] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while True:
            batch = [m for m in consumer.consume(500, 1.0) if m.error() is None]
            found += [(m.partition(), m.value().decode()) for m in batch]
            if len(found) >= expected and not batch:
                return found
            assert time.monotonic() < deadline, f"{len(found)} of {expected} records read ({isolation})"
    finally:
        consumer.close()


def spread_transaction(healthy):
    """A 9-partition topic spread over the brokers and a transactional id for it: (bootstrap, topic,
    partition -> owner, transactional id, the broker coordinating that id)."""
    wait_until_balanced(healthy)
    bootstrap = ",".join(kafka_address(b) for b in healthy.brokers)
    topic = create_topic(bootstrap, 9)
    holders = wait_for_holders(healthy, topic, 9, lambda h: None not in h.values())
    transactional_id = f"txn-{topic}"
    coordinator, = asyncio.run(_bundle_holders(healthy, [transaction_bundle("public", "default", transactional_id)]))
    return bootstrap, topic, holders, transactional_id, coordinator


def test_a_transaction_over_partitions_and_a_group_of_other_brokers_commits_and_aborts_as_one(healthy) -> None:
    """The transaction's coordinator, its partitions' owners and its group's coordinator are
    different brokers: the markers and the committed offsets reach them through their mailboxes,
    and a read_committed reader sees exactly the committed records, on every partition."""
    bootstrap, topic, holders, transactional_id, coordinator = spread_transaction(healthy)
    assert set(holders.values()) - {coordinator}, f"every partition is on the coordinator: {holders}"
    groups = [f"sink-{topic}-{i}" for i in range(32)]
    group_holders = asyncio.run(_bundle_holders(healthy, [group_bundle("public", "default", g) for g in groups]))
    group = next(g for g, holder in zip(groups, group_holders) if holder not in (None, coordinator))
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 30000, "linger.ms": 5})
    producer.init_transactions(30)
    source = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})

    def transaction(prefix: str, end) -> None:
        producer.begin_transaction()
        for i in range(27):
            producer.produce(topic, f"{prefix}-{i}".encode(), partition=i % 9)
        producer.flush(30)
        end()

    transaction("kept", lambda: producer.commit_transaction(30))
    transaction("dropped", lambda: producer.abort_transaction(30))

    def commit_with_offsets() -> None:
        producer.send_offsets_to_transaction([ConfluentPartition(topic, p, 7) for p in range(9)],
                                             source.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
    transaction("with-offsets", commit_with_offsets)

    committed = read_from_start(bootstrap, topic, 9, "read_committed", 54)
    assert sorted(v for _, v in committed) == sorted([f"kept-{i}" for i in range(27)]
                                                      + [f"with-offsets-{i}" for i in range(27)])
    for partition in range(9):
        values = [v for p, v in committed if p == partition]
        assert values == [f"kept-{i}" for i in range(partition, 27, 9)] + \
            [f"with-offsets-{i}" for i in range(partition, 27, 9)], f"partition {partition}: {values}"
    everything = read_from_start(bootstrap, topic, 9, "read_uncommitted", 81)
    assert sum(1 for _, v in everything if v.startswith("dropped-")) == 27
    offsets = source.committed([ConfluentPartition(topic, p) for p in range(9)], timeout=30)
    assert [tp.offset for tp in offsets] == [7] * 9
    source.close()
    print("transaction coordinated by broker", coordinator, "over partitions of brokers",
          sorted(set(holders.values())), "with group", group, "on broker", group_holders[groups.index(group)])


def test_a_commit_whose_partition_owner_dies_completes_on_the_next_owner(healthy) -> None:
    """The owner of some of a transaction's partitions is killed after the records were
    acknowledged: the commit waits for the partitions' next owner, which finds the marker requests
    when it takes their bundles. Every committed record becomes readable, once."""
    bootstrap, topic, holders, transactional_id, coordinator = spread_transaction(healthy)
    victim_id = next((b for b in holders.values() if b != coordinator), None)
    assert victim_id is not None, f"every partition is on the coordinator: {holders}"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000, "linger.ms": 5})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(27):
        producer.produce(topic, f"kept-{i}".encode(), partition=i % 9)
    assert producer.flush(30) == 0
    healthy.brokers[victim_id].kill()
    producer.commit_transaction(90)       # waits for the markers on the victim's partitions
    values = read_from_start(",".join(others(healthy, healthy.brokers[victim_id])), topic, 9, "read_committed", 27)
    assert sorted(v for _, v in values) == sorted(f"kept-{i}" for i in range(27))
    print("commit with broker", victim_id, "owning", [p for p, b in holders.items() if b == victim_id],
          "killed: every record committed once")


def declare_and_publish_numbered(channel, queue: str, count: int) -> None:
    """Declare the durable queue and publish b"0" .. b"count-1" to it, persistent, each confirmed."""
    channel.confirm_delivery()
    channel.queue_declare(queue, durable=True)
    for i in range(count):
        channel.basic_publish("", queue, b"%d" % i, pika.BasicProperties(delivery_mode=2))


def amqp_addresses(cluster) -> list[tuple[str, int]]:
    found = []
    for broker in cluster.brokers:
        host, _, port = broker.ready["amqp"].rpartition(":")
        found.append((host, int(port)))
    return found


def test_amqp_clients_find_the_queue_owner_and_survive_its_kill9(healthy, workloads_for) -> None:
    """Publishers connected to any broker publish through it (forwarded to the queue's owner, held
    while the queue fails over); a consumer's connection to a broker that does not serve its queue is
    closed (CONNECTION_FORCED, naming the owner), so consumers cycle through the brokers' addresses
    until they reach the owner, and again when it dies."""
    wait_until_balanced(healthy)
    workloads = workloads_for(None, amqp_addresses(healthy))
    workloads.wait_for_progress(200)
    queue = workloads.amqp.queue
    owner = lease_holders(healthy, queue, 1)[0]
    victim = healthy.brokers[owner]
    victim.kill()
    workloads.fault("kill9-queue-owner", broker=victim.name)
    wait_for_holders(healthy, queue, 1, lambda h: h[0] not in (None, owner))
    workloads.wait_for_progress(200)
    workloads.fault("restart", broker=victim.name)
    healthy.restart(victim)
    workloads.wait_for_progress(100)
    finish(workloads, "kill9-queue-owner")
    print("AMQP failover after kill -9 of", victim.name, "->",
          describe(failover_times(workloads.amqp_history, "kill9-queue-owner")))


def test_kill9_of_the_broker_amqp_clients_go_through_loses_nothing(healthy, workloads_for) -> None:
    """The AMQP publishers and consumer reach their queue through a broker that does not serve it
    (everything forwarded over the peer links); that broker is killed with messages in flight: the
    clients reconnect to another broker and nothing confirmed is lost."""
    wait_until_balanced(healthy)
    queue, owner, through = served_queue(healthy, "faults-via")
    addresses = amqp_addresses(healthy)
    workloads = workloads_for(None, [addresses[through]] + [a for i, a in enumerate(addresses) if i != through],
                              amqp_queue=queue)
    workloads.wait_for_progress(200)
    victim = healthy.brokers[through]
    victim.kill()
    workloads.fault("kill9-forwarding-broker", broker=victim.name)
    workloads.wait_for_progress(200)
    workloads.fault("restart", broker=victim.name)
    healthy.restart(victim)
    workloads.wait_for_progress(100)
    finish(workloads, "kill9-forwarding-broker")
    print("clients through broker", through, "to the queue of broker", owner, "->",
          describe(failover_times(workloads.amqp_history, "kill9-forwarding-broker")))


def test_a_queue_owner_paused_past_its_session_hands_out_nothing_when_it_wakes(healthy) -> None:
    """The killer scenario for a queue: its owner is paused with ten messages in a consumer's hands
    and ninety read ahead; another broker takes the queue and delivers all hundred to a second
    consumer. The first consumer acknowledges its ten meanwhile (the acks wait in the paused
    owner's socket). Woken, the old owner must not fill the freed prefetch from what it had read
    ahead: those messages were delivered already, and would come again without the redelivered
    flag."""
    wait_until_balanced(healthy)
    queue, owner, _ = served_queue(healthy, "zombie-queue")
    addresses = amqp_addresses(healthy)
    victim = healthy.brokers[owner]

    def connect(broker: int) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.ConnectionParameters(*addresses[broker], heartbeat=600))

    def pump(connection: pika.BlockingConnection, done, what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            connection.process_data_events(time_limit=0.1)

    first = connect(owner)
    channel = first.channel()
    declare_and_publish_numbered(channel, queue, 100)
    channel.basic_qos(prefetch_count=10)
    held, cancelled = [], []
    channel.add_on_cancel_callback(lambda _frame: cancelled.append(True))
    channel.basic_consume(queue, lambda _ch, method, _props, body: held.append((method, body)))
    pump(first, lambda: len(held) == 10, "the first consumer's prefetch")
    victim.signal(signal.SIGSTOP)
    try:
        holders = wait_for_holders(healthy, queue, 1, lambda h: h[0] not in (None, owner))
        taken = set()

        def take(ch, method, _props, body) -> None:
            taken.add(body)
            ch.basic_ack(method.delivery_tag)
        deadline = time.monotonic() + DEADLINE_S
        while True:     # the lease is taken a moment before the queue is served: clients reconnect
            try:
                with connect(holders[0]) as second:
                    other = second.channel()
                    other.basic_qos(prefetch_count=200)
                    other.basic_consume(queue, take)
                    pump(second, lambda: len(taken) == 100, "the new owner's deliveries")
                break
            except pika.exceptions.ConnectionClosedByBroker:
                assert time.monotonic() < deadline, "the new owner never served the queue"
                time.sleep(0.2)
        for method, _ in held:      # waits in the paused owner's socket
            channel.basic_ack(method.delivery_tag)
    finally:
        victim.signal(signal.SIGCONT)
    woken_at = len(held)
    try:
        pump(first, lambda: cancelled or first.is_closed or not channel.is_open,
             "the woken owner to give the queue up")
    except (pika.exceptions.AMQPError, OSError):
        pass                        # the connection went: nothing more was handed out on it
    late = [(int(body), method.redelivered) for method, body in held[woken_at:]]
    assert not [number for number, flagged in late if not flagged], \
        f"the woken owner handed out messages the new owner had delivered, unflagged: {late}"
    if first.is_open:
        first.close()
    print("paused owner", owner, "woke to", len(late), "late deliveries", late[:5])


def test_a_message_dead_lettered_into_a_queue_of_another_broker_reaches_it(healthy) -> None:
    """pika declares the dead-letter queue through its owner and the source queue through another
    broker: a message the source pushes out (x-max-length 1) reaches the other broker's queue."""
    wait_until_balanced(healthy)
    tag = uuid.uuid4().hex[:8]
    names = [f"dlx-{tag}-{i}" for i in range(48)]
    holders = asyncio.run(_bundle_holders(healthy, [partition_bundle("public", "default", n, 0) for n in names]))
    source, source_owner = next((n, h) for n, h in zip(names, holders) if h is not None)
    target, target_owner = next((n, h) for n, h in zip(names, holders) if h not in (None, source_owner))
    addresses = amqp_addresses(healthy)

    def connect(owner: int) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.ConnectionParameters(*addresses[owner], connection_attempts=5,
                                                                 retry_delay=0.5))
    with connect(target_owner) as connection:
        connection.channel().queue_declare(target, durable=True)
    with connect(source_owner) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(source, durable=True, arguments={
            "x-max-length": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": target})
        for body in (b"pushed-out", b"kept"):
            channel.basic_publish("", source, body, pika.BasicProperties(delivery_mode=2))
    with connect(target_owner) as connection:
        channel = connection.channel()
        deadline = time.monotonic() + DEADLINE_S
        while (got := channel.basic_get(target, auto_ack=True))[0] is None:
            assert time.monotonic() < deadline, "the dead-lettered message never reached the other broker's queue"
            time.sleep(0.2)
    _, properties, body = got
    assert body == b"pushed-out" and properties.headers["x-death"][0]["queue"] == source
    print("dead-lettered from broker", source_owner, "to broker", target_owner)


def served_queue(cluster, prefix: str) -> tuple[str, int, int]:
    """A fresh queue name whose bundle a broker holds, that broker, and another broker."""
    tag = uuid.uuid4().hex[:8]
    names = [f"{prefix}-{tag}-{i}" for i in range(48)]
    holders = asyncio.run(_bundle_holders(cluster, [partition_bundle("public", "default", n, 0) for n in names]))
    name, owner = next((n, h) for n, h in zip(names, holders) if h is not None)
    return name, owner, next(b for b in range(len(cluster.brokers)) if b != owner)


def test_pika_publishes_through_any_broker_into_queues_other_brokers_serve(healthy) -> None:
    """A publisher connected to one broker declares a queue, an exchange and a binding whose queue
    another broker serves, and publishes with confirms: each confirm comes once the message is
    durable at the owner, and a consumer there gets every message once, in publish order."""
    wait_until_balanced(healthy)
    queue, owner, elsewhere = served_queue(healthy, "orders")
    exchange = f"payments-{queue}"
    addresses = amqp_addresses(healthy)
    with pika.BlockingConnection(pika.ConnectionParameters(*addresses[elsewhere])) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare(exchange, "direct", durable=True)
        declared = channel.queue_declare(queue, durable=True)
        assert declared.method.message_count == 0
        channel.queue_bind(queue, exchange, "settled")
        for i in range(300):    # BlockingChannel: each returns once confirmed (a nack raises)
            channel.basic_publish(exchange, "settled", b"%d" % i, pika.BasicProperties(delivery_mode=2),
                                  mandatory=True)
        assert channel.queue_declare(queue, passive=True).method.message_count == 300
    with pika.BlockingConnection(pika.ConnectionParameters(*addresses[owner])) as connection:
        channel = connection.channel()
        got = [channel.basic_get(queue, auto_ack=True)[2] for _ in range(301)]
    assert got == [b"%d" % i for i in range(300)] + [None]
    print("300 confirmed publishes through broker", elsewhere, "into a queue of broker", owner)


def test_pika_consumes_through_any_broker_from_queues_other_brokers_serve(healthy) -> None:
    """A consumer connected to a broker that does not serve its queue gets every message in order
    within its prefetch window; acks, a nack that requeues, basic.get, purge and delete through
    that broker act on the queue at its owner."""
    wait_until_balanced(healthy)
    queue, owner, elsewhere = served_queue(healthy, "work")
    with pika.BlockingConnection(pika.ConnectionParameters(*amqp_addresses(healthy)[elsewhere])) as connection:
        channel = connection.channel()
        declare_and_publish_numbered(channel, queue, 200)
        channel.basic_qos(prefetch_count=10)
        got, redelivered = [], []
        for method, properties, body in channel.consume(queue, inactivity_timeout=DEADLINE_S):
            assert method is not None, "deliveries stopped"
            if body == b"50" and not method.redelivered:
                channel.basic_nack(method.delivery_tag, requeue=True)     # comes again, flagged
                continue
            if method.redelivered:
                redelivered.append(body)
            got.append(body)
            channel.basic_ack(method.delivery_tag)
            if len(got) == 150:
                break
        channel.cancel()
        channel.close()     # what was still on its way to the cancelled consumer goes back
        assert sorted(got, key=int) == [b"%d" % i for i in range(150)] and redelivered == [b"50"]
        assert got[:50] == [b"%d" % i for i in range(50)]       # in order up to the requeued one
        channel = connection.channel()
        method, _, body = channel.basic_get(queue)
        assert int(body) >= 150 and method.message_count == 49
        channel.basic_ack(method.delivery_tag)
        assert channel.queue_purge(queue).method.message_count == 49
        assert channel.queue_delete(queue).method.message_count == 0
    print("150 consumed, 1 requeued, 49 purged through broker", elsewhere, "from a queue of broker", owner)


def test_an_rpc_reply_reaches_a_client_of_another_broker(healthy) -> None:
    """The RabbitMQ RPC pattern across brokers: the client's server-named exclusive reply queue is
    served by its own broker; the request is published through it into the server's queue on
    another broker, and the server's reply, published through that broker, comes back."""
    wait_until_balanced(healthy)
    requests, server_broker, client_broker = served_queue(healthy, "rpc")
    addresses = amqp_addresses(healthy)
    with pika.BlockingConnection(pika.ConnectionParameters(*addresses[server_broker])) as server, \
            pika.BlockingConnection(pika.ConnectionParameters(*addresses[client_broker])) as client:
        server_channel = server.channel()
        server_channel.queue_declare(requests, durable=True)
        client_channel = client.channel()
        reply_to = client_channel.queue_declare("", exclusive=True).method.queue
        for i in range(5):
            client_channel.basic_publish("", requests, b"ping-%d" % i, pika.BasicProperties(
                reply_to=reply_to, correlation_id=str(i)))
            deadline = time.monotonic() + DEADLINE_S
            while (request := server_channel.basic_get(requests, auto_ack=True))[0] is None:
                assert time.monotonic() < deadline, "the request never reached the server's broker"
                server.sleep(0.02)
            _, properties, body = request
            server_channel.basic_publish("", properties.reply_to, body.replace(b"ping", b"pong"),
                                         pika.BasicProperties(correlation_id=properties.correlation_id))
            while (reply := client_channel.basic_get(reply_to, auto_ack=True))[0] is None:
                assert time.monotonic() < deadline, "the reply never reached the client's broker"
                client.sleep(0.02)
            assert reply[2] == b"pong-%d" % i and reply[1].correlation_id == str(i)
    print("5 RPC round trips: client on broker", client_broker, "server on broker", server_broker)


def test_a_consumer_group_goes_on_when_its_coordinator_dies(healthy) -> None:
    bootstrap = ",".join(kafka_address(b) for b in healthy.brokers)
    topic = create_topic(bootstrap, 3)
    group = f"moving-{topic}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 10_000,
                         "reconnect.backoff.max.ms": 500})
    consumer.subscribe([topic])
    received: set[str] = set()

    def produce_and_read(first: int, count: int) -> None:
        for i in range(first, first + count):
            producer.produce(topic, f"m-{i}".encode(), partition=i % 3)
        assert producer.flush(60) == 0
        wanted = {f"m-{i}" for i in range(first, first + count)}
        deadline = time.monotonic() + DEADLINE_S
        while not wanted <= received:
            assert time.monotonic() < deadline, f"{len(wanted - received)} of {count} never consumed"
            for message in consumer.consume(100, 0.5):
                if message.error() is None:
                    received.add(message.value().decode())
            try:
                consumer.commit(asynchronous=False)
            except Exception:
                pass    # no offsets yet, or the coordinator is moving: committed again next round

    produce_and_read(0, 90)
    description = admin.describe_consumer_groups([group])[group].result(30)
    coordinator = description.coordinator.id
    victim = healthy.brokers[coordinator]
    victim.kill()
    produce_and_read(90, 90)
    # The group finds its new coordinator (rejoining there) and its offsets commit through it.
    deadline = time.monotonic() + DEADLINE_S
    while True:
        for message in consumer.consume(100, 0.5):
            if message.error() is None:
                received.add(message.value().decode())
        committed = []
        try:
            consumer.commit(asynchronous=False)
        except KafkaException:
            pass        # still moving, or nothing consumed since the last commit
        try:
            committed = consumer.committed(consumer.assignment(), timeout=10) if consumer.assignment() else []
        except KafkaException:
            pass        # the coordinator is moving: asked again
        if sum(max(tp.offset, 0) for tp in committed) == 180:
            break
        assert time.monotonic() < deadline, f"offsets never committed through another broker: {committed}"
    after = admin.describe_consumer_groups([group])[group].result(30)
    assert after.coordinator.id != coordinator
    consumer.close()
    healthy.restart(victim)


def test_kafka_delayed_records_on_partitions_of_every_broker_come_out_once_when_due(healthy) -> None:
    """A topic with delayed delivery spread over the brokers, while one of them serves the
    namespace's delayed store: each partition's owner has its records held there (over the peer
    link), and the store appends each to its partition's owner when due. Every record comes out
    once and none early; a transaction's held records only if it commits."""
    wait_until_balanced(healthy)
    bootstrap = ",".join(kafka_address(b) for b in healthy.brokers)
    topic = f"later-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 9, 1, config={"delayed.delivery.enable": "true"})])[topic].result(30)
    holders = wait_for_holders(healthy, topic, 9, lambda h: None not in h.values())
    store_holder, = asyncio.run(_bundle_holders(healthy, [partition_bundle("public", "default", "__delayed_messages", 0)]))
    assert set(holders.values()) - {store_holder}, f"every partition is with the delayed store: {holders}"
    delay_ms = 2000
    started_ms = time.time() * 1000
    later = [(("deliver-after-ms", str(delay_ms).encode()),)]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(27):
        producer.produce(topic, f"later-{i}".encode(), partition=i % 9, headers=list(later[0]))
    assert producer.flush(30) == 0
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"txn-{topic}", "linger.ms": 5})
    transactional.init_transactions(30)
    for prefix, end in (("kept", transactional.commit_transaction), ("dropped", transactional.abort_transaction)):
        transactional.begin_transaction()
        for i in range(9):
            transactional.produce(topic, f"{prefix}-{i}".encode(), partition=i, headers=list(later[0]))
        transactional.flush(30)
        end(30)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "enable.auto.commit": False})
    consumer.assign([ConfluentPartition(topic, p, OFFSET_BEGINNING) for p in range(9)])
    arrived: list[tuple[int, str, float]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while True:
            batch = [m for m in consumer.consume(500, 1.0) if m.error() is None]
            now_ms = time.time() * 1000
            arrived += [(m.partition(), m.value().decode(), now_ms) for m in batch]
            if len(arrived) >= 36 and not batch:
                break
            assert time.monotonic() < deadline, f"{len(arrived)} of 36 delayed records arrived"
    finally:
        consumer.close()
    values = Counter(value for _, value, _ in arrived)
    assert values == Counter([f"later-{i}" for i in range(27)] + [f"kept-{i}" for i in range(9)]), values
    assert all(partition == int(value.rpartition("-")[2]) % 9 for partition, value, _ in arrived)
    early = [value for _, value, at_ms in arrived if at_ms < started_ms + delay_ms]
    assert not early, f"visible before they were due: {early}"
    print("delayed store on broker", store_holder, "partitions on brokers", sorted(set(holders.values())))


def test_kill9_of_the_delayed_store_owner_mid_release_releases_every_record_once(healthy) -> None:
    """Delayed records for partitions of every broker come due over a few seconds; the broker
    serving the namespace's delayed store is killed while it releases them. The next owner resumes
    the schedule and completes the releases the dead one began (asking the partitions' owners
    which arrived): every record comes out once."""
    wait_until_balanced(healthy)
    bootstrap = ",".join(kafka_address(b) for b in healthy.brokers)
    topic = f"due-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 9, 1, config={"delayed.delivery.enable": "true"})])[topic].result(30)
    wait_for_holders(healthy, topic, 9, lambda h: None not in h.values())
    store_holder, = asyncio.run(_bundle_holders(healthy, [partition_bundle("public", "default", "__delayed_messages", 0)]))
    count, start_ms = 3000, int(time.time() * 1000) + 4000
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(count):          # due one every 2 ms, from 4 s on
        producer.produce(topic, f"due-{i}".encode(), partition=i % 9,
                         headers=[("deliver-at-ms", str(start_ms + 2 * i).encode())])
    assert producer.flush(60) == 0
    while time.time() * 1000 < start_ms + count:       # halfway through the releases
        time.sleep(0.05)
    healthy.brokers[store_holder].kill()
    survivors = ",".join(others(healthy, healthy.brokers[store_holder]))
    values = Counter(value for _, value in read_from_start(survivors, topic, 9, "read_uncommitted", count))
    duplicates = {value: n for value, n in values.items() if n > 1}
    missing = count - len(values)
    assert not duplicates and not missing, f"{missing} missing, duplicated: {list(duplicates)[:10]}"
    print("delayed store owner", store_holder, "killed mid-release:", count, "records released once each")


# --- bundle splits (last: the splits stay in the cluster's layout) ---------------------------------


async def _split_bundles(cluster, bundles) -> None:
    store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
    try:
        for bundle in bundles:
            await request_split(store, bundle, None)
    finally:
        await store.close()


async def _split_state(cluster, bundles) -> tuple[list, dict]:
    """Which of `bundles` are still in the layout, and the split requests not carried out yet."""
    store = await ZooKeeperMetadataStore.open(cluster.metadata_url)
    try:
        layouts = await follow_layouts(store)
        node = await store.get(SPLITS, latest=True)
        return ([b for b in bundles if b in layouts.bundles(b.tenant, b.namespace)],
                {} if node is None else json.loads(node.value))
    finally:
        await store.close()


def wait_for_splits(cluster, bundles) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        whole, pending = asyncio.run(_split_state(cluster, bundles))
        if not whole and not pending:
            return
        assert time.monotonic() < deadline, f"never split: {whole}, requests left: {pending}"
        time.sleep(0.2)


def test_bundles_split_under_traffic_and_through_a_kill9_of_their_owner_lose_nothing(healthy, workloads_for) -> None:
    """Kafka (idempotent confluent-kafka) and AMQP (pika, confirms) workloads run while the bundles of
    every partition of their topic and of their queue are split, asked as an operator asks (the
    owners carry it out: each bundle's partitions close, sealing their ledgers, and its halves are
    taken again). Then a split is asked of the owner of partition 0's bundle, which is killed -9 at
    once: whether or not it got to split, another broker serves the partition; and one of the owner
    of the queue's bundle, which is paused past its session instead and woken once another broker
    took over (it must then let the queue go and take part in the cluster again). The checkers' bar as for a kill -9: nothing acknowledged lost, no offset reused, no
    reordering, no duplicate."""
    wait_until_balanced(healthy)
    workloads = workloads_for([kafka_address(healthy.brokers[0])], amqp_addresses(healthy), partitions=6)
    topic, queue = workloads.kafka.topic, workloads.amqp.queue
    workloads.wait_for_progress(200)
    acknowledged_on_all(workloads, 6)
    bundles = sorted({partition_bundle("public", "default", name, index)
                      for name, index in [(topic, i) for i in range(6)] + [(queue, 0)]})
    started = time.monotonic()
    workloads.fault("split", bundles=[b.path for b in bundles])
    asyncio.run(_split_bundles(healthy, bundles))
    wait_for_splits(healthy, bundles)
    wait_until_balanced(healthy)
    for partition in range(6):
        wait_for_acks(workloads.kafka_history, workloads.kafka.key(partition), time.monotonic(), 10)
    done = time.monotonic()
    workloads.fault("splits-done")       # what failover_times("split") counts ends here
    workloads.wait_for_progress(200)

    halves = [partition_bundle("public", "default", topic, 0)]
    owner, = asyncio.run(_bundle_holders(healthy, halves))
    victim = healthy.brokers[owner]
    asyncio.run(_split_bundles(healthy, halves))
    victim.kill()
    workloads.fault("split-kill9-owner", broker=victim.name)
    wait_for_holders(healthy, topic, 6, lambda h: h[0] not in (None, owner))
    workloads.wait_for_progress(200)
    workloads.fault("restart", broker=victim.name)
    healthy.restart(victim)
    wait_for_splits(healthy, halves)        # asked again of the next owner if the victim did not get to it
    workloads.wait_for_progress(100)

    # The owner asked to split is paused past its session and woken once another took its bundle:
    # whatever it had done of the split, it writes nothing more (its term went with its session).
    halves = [partition_bundle("public", "default", queue, 0)]
    owner, = asyncio.run(_bundle_holders(healthy, halves))
    victim = healthy.brokers[owner]
    asyncio.run(_split_bundles(healthy, halves))
    victim.signal(signal.SIGSTOP)
    try:
        workloads.fault("split-sigstop-owner", broker=victim.name)
        wait_for_holders(healthy, queue, 1, lambda h: h[0] not in (None, owner))
        workloads.wait_for_progress(100)
    finally:
        victim.signal(signal.SIGCONT)
    workloads.fault("sigcont", broker=victim.name)
    wait_for_splits(healthy, halves)
    wait_until_balanced(healthy)
    workloads.wait_for_progress(100)
    finish(workloads, "split")
    latencies = ack_latencies(workloads.kafka_history, started, done)
    p99 = latencies[int(0.99 * (len(latencies) - 1))] if latencies else None
    print(f"split of {len(bundles)} bundles under load in {done - started:.2f}s:",
          describe(failover_times(workloads.kafka_history, "split")),
          f"; produce p99 during the splits {p99:.3f}s" if p99 is not None else "",
          "; AMQP:", describe(failover_times(workloads.amqp_history, "split")),
          "; then kill -9 of the owner asked to split:",
          describe(failover_times(workloads.kafka_history, "split-kill9-owner")),
          "; then SIGSTOP of the queue's owner asked to split:",
          describe(failover_times(workloads.amqp_history, "split-sigstop-owner")))

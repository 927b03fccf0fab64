"""Consumer groups and committed offsets against a real gateway process, with unmodified
kafka-python, aiokafka and confluent-kafka clients.

Every member polls in a thread of its own (the clients are not thread-safe), as an application
would. Session timeouts are 6 s and heartbeats 1 s, so rebalances settle in a few seconds.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

SESSION_MS = 6000
HEARTBEAT_MS = 1000
SETTLE_S = 30.0


def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = SETTLE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def create_topic(servers: str, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def produce(servers: str, topic: str, count: int, partitions: int) -> list[bytes]:
    """`count` values spread round-robin over the partitions; returns them in order."""
    producer = KafkaProducer(bootstrap_servers=servers)
    values = [f"{topic}-{i}".encode() for i in range(count)]
    try:
        for i, value in enumerate(values):
            producer.send(topic, value, partition=i % partitions)
        producer.flush()
    finally:
        producer.close()
    return values


class Member:
    """One group member polling in its own thread; `assigned` is its current partition set."""

    def __init__(self, name: str, make: Callable[[], object], poll: Callable[[object], list[bytes]],
                 assignment: Callable[[object], set[int]]) -> None:
        self.name = name
        self.values: list[bytes] = []
        self.assigned: frozenset[int] = frozenset()
        self.error: BaseException | None = None
        self._make, self._poll, self._assignment = make, poll, assignment
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer = self._make()
        try:
            while not self._stop.is_set():
                self.values.extend(self._poll(consumer))
                self.assigned = frozenset(self._assignment(consumer))
        except BaseException as exc:  # surfaced by the test through check()
            self.error = exc
        finally:
            consumer.close()

    def close(self) -> None:
        """Stop polling and close the consumer (which leaves the group)."""
        self._stop.set()
        self._thread.join(timeout=SETTLE_S)
        assert not self._thread.is_alive(), f"member {self.name} did not close"
        self.check()

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"member {self.name} failed: {self.error!r}") from self.error


def owned_exactly_once(members: list[Member], partitions: int) -> bool:
    for member in members:
        member.check()
    owned = [p for member in members for p in member.assigned]
    return sorted(owned) == list(range(partitions)) and all(member.assigned for member in members)


def kafka_python_member(name: str, servers: str, topic: str, group: str, **config) -> Member:
    def make() -> KafkaConsumer:
        return KafkaConsumer(topic, bootstrap_servers=servers, group_id=group, client_id=name,
                             auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                             heartbeat_interval_ms=HEARTBEAT_MS, **config)

    def poll(consumer: KafkaConsumer) -> list[bytes]:
        batches = consumer.poll(timeout_ms=1000)
        return [record.value for records in batches.values() for record in records]

    return Member(name, make, poll, lambda consumer: {tp.partition for tp in consumer.assignment()})


def confluent_member(name: str, servers: str, topic: str, group: str, events: list | None = None,
                     **config) -> Member:
    def make() -> ConfluentConsumer:
        consumer = ConfluentConsumer({"bootstrap.servers": servers, "group.id": group, "client.id": name,
                                      "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_MS,
                                      "heartbeat.interval.ms": HEARTBEAT_MS, **config})
        if events is None:
            consumer.subscribe([topic])
        else:
            consumer.subscribe([topic], on_assign=lambda c, ps: events.append(("assign", _parts(ps))),
                               on_revoke=lambda c, ps: events.append(("revoke", _parts(ps))))
        return consumer

    def poll(consumer: ConfluentConsumer) -> list[bytes]:
        message = consumer.poll(0.2)
        if message is None or message.error() is not None:
            return []
        return [message.value()]

    return Member(name, make, poll, lambda consumer: {tp.partition for tp in consumer.assignment()})


def describe(servers: str, group: str) -> dict:
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        return admin.describe_groups([group])[group]
    finally:
        admin.close()


def _parts(partitions: list[ConfluentTopicPartition]) -> set[int]:
    return {tp.partition for tp in partitions}


# --- (1) kafka-python, range/roundrobin -----------------------------------------------------------


def test_kafka_python_members_share_partitions_and_take_over_as_members_leave(gateway_process):
    servers = bootstrap(gateway_process)
    create_topic(servers, "kp-six", 6)
    produced = produce(servers, "kp-six", 60, 6)
    members = [kafka_python_member(f"kp-{i}", servers, "kp-six", "kp-group") for i in range(3)]
    try:
        wait_until(lambda: owned_exactly_once(members, 6), "three members owning two partitions each")
        assert sorted(len(m.assigned) for m in members) == [2, 2, 2]
        wait_until(lambda: sum(len(m.values) for m in members) >= 60, "every record consumed")
        assert sorted(v for m in members for v in m.values) == sorted(produced)
        while len(members) > 1:
            members.pop(0).close()
            wait_until(lambda: owned_exactly_once(members, 6),
                       f"{len(members)} remaining member(s) owning every partition once")
    finally:
        for member in members:
            member.close()


# --- (2) confluent-kafka, cooperative-sticky -------------------------------------------------------


def test_confluent_cooperative_sticky_members_share_partitions_and_take_over(gateway_process):
    servers = bootstrap(gateway_process)
    create_topic(servers, "ck-six", 6)
    produced = produce(servers, "ck-six", 30, 6)
    members = [confluent_member(f"ck-{i}", servers, "ck-six", "ck-group",
                                **{"partition.assignment.strategy": "cooperative-sticky"}) for i in range(3)]
    try:
        wait_until(lambda: owned_exactly_once(members, 6), "three members owning every partition once")
        assert describe(servers, "ck-group")["protocol_data"] == "cooperative-sticky"
        wait_until(lambda: sum(len(m.values) for m in members) >= 30, "every record consumed")
        assert sorted(v for m in members for v in m.values) == sorted(produced)
        while len(members) > 1:
            kept = {m.name: m.assigned for m in members[1:]}
            members.pop(0).close()
            wait_until(lambda: owned_exactly_once(members, 6),
                       f"{len(members)} remaining member(s) owning every partition once")
            # sticky: the members that stayed kept what they had
            assert all(kept[m.name] <= m.assigned for m in members)
    finally:
        for member in members:
            member.close()


# --- (3) aiokafka ----------------------------------------------------------------------------------


async def test_aiokafka_members_split_partitions_and_commit(gateway_process):
    servers = bootstrap(gateway_process)
    await asyncio.to_thread(create_topic, servers, "aio-four", 4)
    produced = await asyncio.to_thread(produce, servers, "aio-four", 40, 4)
    consumers = [AIOKafkaConsumer("aio-four", bootstrap_servers=servers, group_id="aio-group",
                                  client_id=f"aio-{i}", auto_offset_reset="earliest",
                                  session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
                 for i in range(2)]
    received: list[bytes] = []
    stop = asyncio.Event()

    async def consume(consumer: AIOKafkaConsumer) -> None:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            received.extend(record.value for records in batches.values() for record in records)

    for consumer in consumers:
        await consumer.start()
    tasks = [asyncio.create_task(consume(c)) for c in consumers]
    try:
        deadline = time.monotonic() + SETTLE_S
        while True:
            owned = [tp.partition for c in consumers for tp in c.assignment()]
            if sorted(owned) == [0, 1, 2, 3] and all(c.assignment() for c in consumers) and len(received) >= 40:
                break
            assert time.monotonic() < deadline, f"owned {owned}, received {len(received)}"
            await asyncio.sleep(0.05)
        assert sorted(received) == sorted(produced)
        stop.set()
        await asyncio.gather(*tasks)
        for consumer in consumers:
            await consumer.commit()
        committed = [await consumers[0].committed(TopicPartition("aio-four", p)) for p in range(4)]
        assert committed == [10, 10, 10, 10]
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        for consumer in consumers:
            await consumer.stop()


# --- (4) committed offsets: a new consumer continues where the group left off ----------------------


def consume_in_order(consumer: KafkaConsumer, count: int, *, commit_each: bool) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + SETTLE_S
    while len(values) < count:
        assert time.monotonic() < deadline, f"got {len(values)} of {count} records"
        for records in consumer.poll(timeout_ms=500, max_records=count - len(values)).values():
            for record in records:
                values.append(record.value)
                if commit_each:
                    consumer.commit({TopicPartition(record.topic, record.partition):
                                     OffsetAndMetadata(record.offset + 1, "", -1)})
    return values


def test_restarted_consumer_continues_after_the_committed_offset(gateway_process):
    servers = bootstrap(gateway_process)
    create_topic(servers, "resume", 1)
    produced = produce(servers, "resume", 20, 1)
    config = dict(bootstrap_servers=servers, group_id="resume-group", auto_offset_reset="earliest",
                  enable_auto_commit=False, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    first = KafkaConsumer("resume", **config)
    first_half = consume_in_order(first, 10, commit_each=True)
    first.close()
    second = KafkaConsumer("resume", **config)
    try:
        assert second.committed(TopicPartition("resume", 0)) == 10
        second_half = consume_in_order(second, 10, commit_each=False)
    finally:
        second.close()
    assert first_half + second_half == produced


def test_older_group_api_versions_join_commit_and_resume(gateway_process):
    # kafka-python pinned to old brokers speaks JoinGroup v0/v1, SyncGroup/LeaveGroup/FindCoordinator
    # v0, OffsetCommit v2 and OffsetFetch v1.
    servers = bootstrap(gateway_process)
    create_topic(servers, "old-apis", 1)
    produced = produce(servers, "old-apis", 10, 1)
    for api_version in [(0, 9), (0, 10, 1)]:
        config = dict(bootstrap_servers=servers, group_id=f"old-{api_version}", api_version=api_version,
                      auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                      heartbeat_interval_ms=HEARTBEAT_MS)
        first = KafkaConsumer("old-apis", **config)
        first_half = consume_in_order(first, 5, commit_each=True)
        first.close()
        second = KafkaConsumer("old-apis", **config)
        try:
            assert second.committed(TopicPartition("old-apis", 0)) == 5
            assert first_half + consume_in_order(second, 5, commit_each=False) == produced
        finally:
            second.close()


# --- (5) a gateway restart in the middle of a group's life ------------------------------------------


def test_committed_offsets_and_data_survive_a_gateway_restart(gateway_launcher, tmp_path: Path):
    data_dir = tmp_path / "data"
    gateway = gateway_launcher.start(data_dir=data_dir)
    servers = bootstrap(gateway)
    create_topic(servers, "durable", 3)
    produced = produce(servers, "durable", 30, 3)
    config = dict(group_id="durable-group", auto_offset_reset="earliest", enable_auto_commit=False,
                  session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    member = KafkaConsumer("durable", bootstrap_servers=servers, **config)
    before = consume_in_order(member, 15, commit_each=True)
    member.close()
    assert gateway.stop() == 0

    gateway = gateway_launcher.start(data_dir=data_dir)    # new ports: clients reconnect
    servers = bootstrap(gateway)
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        assert {g["group_id"] for g in admin.list_groups()} >= {"durable-group"}
        committed = admin.list_group_offsets({"durable-group": None})["durable-group"]
        assert sum(meta.offset for meta in committed.values()) == 15
    finally:
        admin.close()
    member = KafkaConsumer("durable", bootstrap_servers=servers, **config)
    try:
        after = consume_in_order(member, 15, commit_each=True)
    finally:
        member.close()
    assert sorted(before + after) == sorted(produced)      # nothing lost, nothing twice
    everything = KafkaConsumer("durable", bootstrap_servers=servers, group_id="fresh-reader",
                               auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        assert sorted(consume_in_order(everything, 30, commit_each=False)) == sorted(produced)
    finally:
        everything.close()


# --- (6) static membership ------------------------------------------------------------------------


def test_static_member_rejoining_within_its_session_keeps_its_partitions_without_rebalance(gateway_process):
    servers = bootstrap(gateway_process)
    create_topic(servers, "static-four", 4)
    static_config = {"group.instance.id": "static-1", "session.timeout.ms": 10000}
    dynamic_events: list = []
    static = confluent_member("static", servers, "static-four", "static-group", **static_config)
    dynamic = confluent_member("dynamic", servers, "static-four", "static-group", events=dynamic_events,
                               **{"session.timeout.ms": 10000})
    restarted = None
    try:
        wait_until(lambda: owned_exactly_once([static, dynamic], 4), "both members owning two partitions")
        static_partitions, dynamic_partitions = static.assigned, dynamic.assigned
        rebalances = _rebalances(gateway_process, "static-group")
        events_before = list(dynamic_events)

        static.close()     # a static member does not leave the group when it closes
        assert len(describe(servers, "static-group")["members"]) == 2
        restarted = confluent_member("static-again", servers, "static-four", "static-group", **static_config)
        wait_until(lambda: restarted.assigned == static_partitions, "the restarted member's old partitions")
        assert _rebalances(gateway_process, "static-group") == rebalances
        assert "static member static-1 rejoined" in gateway_process.stderr
        assert dynamic.assigned == dynamic_partitions and dynamic_events == events_before
    finally:
        for member in (restarted, dynamic):
            if member is not None:
                member.close()


def _rebalances(gateway, group: str) -> int:
    return len(re.findall(rf"group {group}: preparing to rebalance", gateway.stderr))


# --- (7) offset metadata, and groups through the admin clients ----------------------------------------


def test_offset_metadata_round_trips_and_admin_clients_list_describe_and_delete_groups(gateway_process):
    servers = bootstrap(gateway_process)
    create_topic(servers, "admin-topic", 2)
    produce(servers, "admin-topic", 4, 2)
    tp = TopicPartition("admin-topic", 1)
    manual = KafkaConsumer(bootstrap_servers=servers, group_id="meta-group", enable_auto_commit=False)
    try:
        manual.assign([tp])
        manual.commit({tp: OffsetAndMetadata(2, "checkpoint: batch 7", -1)})
        assert manual.committed(tp) == 2
    finally:
        manual.close()

    live = kafka_python_member("live", servers, "admin-topic", "live-group")
    admin = KafkaAdminClient(bootstrap_servers=servers)
    confluent = AdminClient({"bootstrap.servers": servers})
    try:
        wait_until(lambda: len(live.assigned) == 2, "the live group's member owning both partitions")
        offsets = admin.list_group_offsets({"meta-group": None})["meta-group"]
        assert (offsets[tp].offset, offsets[tp].metadata) == (2, "checkpoint: batch 7")

        groups = {g["group_id"]: g for g in admin.list_groups()}
        assert groups["meta-group"]["protocol_type"] == "" and groups["live-group"]["protocol_type"] == "consumer"
        stable = admin.list_groups(states_filter=["Stable"])
        assert [g["group_id"] for g in stable] == ["live-group"]
        described = admin.describe_groups(["live-group", "meta-group"])
        assert described["live-group"]["group_state"] == "Stable"
        assert described["live-group"]["protocol_data"] in ("range", "roundrobin")
        assert [m["client_id"] for m in described["live-group"]["members"]] == ["live"]
        assert [m["client_host"] for m in described["live-group"]["members"]] == ["/127.0.0.1"]
        assert described["meta-group"]["group_state"] == "Empty"

        listed = confluent.list_consumer_groups().result()
        assert {g.group_id for g in listed.valid} >= {"meta-group", "live-group"}
        description = confluent.describe_consumer_groups(["live-group"])["live-group"].result()
        assert description.state.name == "STABLE" and len(description.members) == 1
        assert {tp.partition for tp in description.members[0].assignment.topic_partitions} == {0, 1}

        assert admin.delete_groups(["live-group"]) == {"live-group": "NonEmptyGroupError"}
        confluent.delete_consumer_groups(["meta-group"])["meta-group"].result()
        assert admin.delete_groups(["meta-group"]) == {"meta-group": "GroupIdNotFoundError"}
        assert admin.list_group_offsets({"meta-group": None})["meta-group"] == {}
    finally:
        live.close()
        admin.close()

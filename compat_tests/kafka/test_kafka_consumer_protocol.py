"""Kafka's consumer group protocol (KIP-848: the broker assigns) against a real gateway process,
with unmodified confluent-kafka (librdkafka) consumers using `group.protocol=consumer`.

The gateway runs with a 6 s consumer session timeout and 500 ms heartbeats, so a member that dies
without leaving is fenced within seconds. Members poll in threads of their own; the one that is
killed (SIGKILL, no leave) is a child process. Every member records a value before committing it,
so a record may be seen twice only if its consumer died in between: any other duplicate would
mean two members owned one partition at once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.kafka.wire_call import raw_request
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.consumer_group_describe import CONSUMER_GROUP_DESCRIBE
from protocols.kafka.schema.consumer_group_heartbeat import CONSUMER_GROUP_HEARTBEAT
from protocols.kafka.schema.join_group import JOIN_GROUP

ENV = {"GATEWAY_KAFKA_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "6000",
       "GATEWAY_KAFKA_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "500"}
SETTLE_S = 45.0

# The killed member: prints what it owns and each value (before committing it), one line each.
CHILD = """
import json, sys
from confluent_kafka import Consumer
config, topic = json.loads(sys.argv[1]), sys.argv[2]
consumer = Consumer(config)
consumer.subscribe([topic])
while True:
    message = consumer.poll(0.2)
    print("A", json.dumps(sorted(tp.partition for tp in consumer.assignment())), flush=True)
    if message is not None and message.error() is None:
        print("V", message.value().decode(), flush=True)
        consumer.commit(message, asynchronous=False)
"""


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = SETTLE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def gateway(gateway_launcher):
    return gateway_launcher.start(env=ENV)


def servers_of(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


def create_topic(servers: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=15)


def produce(servers: str, topic: str, start: int, count: int, partitions: int) -> list[str]:
    producer = Producer({"bootstrap.servers": servers})
    values = [f"{topic}-{i}" for i in range(start, start + count)]
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=(start + i) % partitions)
    assert producer.flush(15) == 0
    return values


def member_config(servers: str, group: str, name: str, **extra) -> dict:
    return {"bootstrap.servers": servers, "group.id": group, "client.id": name, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra}


class Member:
    """A consumer polling in its own thread: `assigned` is what it owns, `seen` what it consumed."""

    def __init__(self, name: str, config: dict, topic: str, seen: list[tuple[str, str]]) -> None:
        self.name = name
        self.assigned: frozenset[int] = frozenset()
        self.topic_partitions: frozenset[tuple[str, int]] = frozenset()
        self.error: BaseException | None = None
        self._seen = seen
        self._stop = threading.Event()
        self._consumer = Consumer(config)
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                message = self._consumer.poll(0.2)
                assignment = self._consumer.assignment()
                self.topic_partitions = frozenset((tp.topic, tp.partition) for tp in assignment)
                self.assigned = frozenset(tp.partition for tp in assignment)
                if message is None:
                    continue
                if message.error() is not None:
                    if message.error().fatal():
                        raise RuntimeError(str(message.error()))
                    continue
                self._seen.append((self.name, message.value().decode()))
                self._consumer.commit(message, asynchronous=False)
        except BaseException as exc:   # surfaced through check()
            self.error = exc
        finally:
            self._consumer.close()     # leaves the group (epoch -1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=SETTLE_S)
        assert not self._thread.is_alive(), f"member {self.name} did not close"
        self.check()

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"member {self.name} failed: {self.error!r}") from self.error


class ChildMember:
    """A consumer in a child process, to be killed without leaving the group."""

    def __init__(self, name: str, config: dict, topic: str, seen: list[tuple[str, str]]) -> None:
        self.name = name
        self.assigned: frozenset[int] = frozenset()
        self._seen = seen
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(config), topic],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "A":
                self.assigned = frozenset(json.loads(rest))
            elif kind == "V":
                self._seen.append((self.name, rest))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        self.assigned = frozenset()


def owned_exactly_once(members, partitions: int) -> bool:
    for member in members:
        if isinstance(member, Member):
            member.check()
    owned = [p for member in members for p in member.assigned]
    return sorted(owned) == list(range(partitions)) and all(member.assigned for member in members)


def committed_total(servers: str, group: str, topic: str, partitions: int) -> int:
    reader = Consumer(member_config(servers, group, "offset-reader"))
    try:
        found = reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        reader.close()
    return sum(max(tp.offset, 0) for tp in found)


def describe(gateway, group: str) -> dict:
    response = raw_request(gateway.kafka, CONSUMER_GROUP_DESCRIBE, 0,
                           {"group_ids": [group], "include_authorized_operations": False})
    return response.groups[0]


def described_owners(group: dict) -> Counter:
    return Counter(index for member in group.members for topic in member.assignment.topic_partitions
                   for index in topic.partitions)


def test_members_share_partitions_through_joins_leaves_and_a_kill(gateway):
    servers = servers_of(gateway)
    topic, group, partitions = "kip-churn", "kip-churn-group", 6
    create_topic(servers, topic, partitions)
    produced = produce(servers, topic, 0, 120, partitions)
    seen: list[tuple[str, str]] = []
    a = Member("a", member_config(servers, group, "a"), topic, seen)
    b = Member("b", member_config(servers, group, "b"), topic, seen)
    c = ChildMember("c", member_config(servers, group, "c"), topic, seen)
    d = None
    try:
        wait_until(lambda: owned_exactly_once([a, b, c], partitions), "a, b and c to share the partitions")
        produced += produce(servers, topic, 120, 120, partitions)
        wait_until(lambda: len({v for _, v in seen}) >= 150, "the members to consume")
        c.kill()                     # no leave: its session must expire
        b.close()                    # leaves
        d = Member("d", member_config(servers, group, "d"), topic, seen)
        produced += produce(servers, topic, 240, 120, partitions)
        wait_until(lambda: owned_exactly_once([a, d], partitions), "a and d to own every partition")
        wait_until(lambda: {v for _, v in seen} >= set(produced), "every record to be consumed")
        wait_until(lambda: committed_total(servers, group, topic, partitions) == len(produced),
                   "every record to be committed", timeout_s=15)
        described = describe(gateway, group)
        assert described.error_code == ErrorCode.NONE
        assert described.group_state == "Stable" and described.assignor_name == "uniform"
        assert sorted(m.client_id for m in described.members) == ["a", "d"]
        assert described_owners(described) == Counter(range(partitions))
    finally:
        for member in (a, b, d):
            if member is not None:
                member.close()
        if c.proc.poll() is None:
            c.kill()
    by_value: dict[str, set[str]] = {}
    for name, value in seen:
        by_value.setdefault(value, set()).add(name)
    assert set(by_value) == set(produced)                  # nothing lost
    twice = {value: names for value, names in by_value.items() if len(names) > 1 or
             sum(1 for n, v in seen if v == value) > 1}
    assert all("c" in names for names in twice.values()), f"consumed twice without a crash: {twice}"


@pytest.mark.parametrize("assignor", ["range", "circle"])
def test_the_server_assignor_is_the_one_members_ask_for(gateway, assignor):
    servers = servers_of(gateway)
    topic, group, partitions = f"kip-{assignor}", f"kip-{assignor}-group", 4
    create_topic(servers, topic, partitions)
    seen: list[tuple[str, str]] = []
    members = [Member(name, member_config(servers, group, name, **{"group.remote.assignor": assignor}), topic,
                      seen) for name in ("x", "y")]
    try:
        wait_until(lambda: owned_exactly_once(members, partitions), "both members to own partitions")
        described = describe(gateway, group)
        assert described.assignor_name == assignor
        blocks = sorted(sorted(m.assigned) for m in members)
        # range: contiguous halves; circle: every other partition
        assert blocks == ([[0, 1], [2, 3]] if assignor == "range" else [[0, 2], [1, 3]])
    finally:
        for member in members:
            member.close()


def test_a_regex_subscription_takes_new_matching_topics(gateway):
    servers = servers_of(gateway)
    for name, partitions in (("kip-rx-a", 2), ("kip-rx-b", 1), ("kip-other", 1)):
        create_topic(servers, name, partitions)
    seen: list[tuple[str, str]] = []
    member = Member("rx", member_config(servers, "kip-rx-group", "rx"), "^kip-rx-.*", seen)
    try:
        wait_until(lambda: member.topic_partitions == {("kip-rx-a", 0), ("kip-rx-a", 1), ("kip-rx-b", 0)},
                   "the matching topics to be assigned")
        create_topic(servers, "kip-rx-c", 1)
        wait_until(lambda: ("kip-rx-c", 0) in member.topic_partitions, "a new matching topic to be assigned")
        produce(servers, "kip-rx-c", 0, 5, 1)
        wait_until(lambda: len(seen) == 5, "its records to be consumed")
        described = describe(gateway, "kip-rx-group")
        assert described.members[0].subscribed_topic_regex == "(^kip-rx-.*)"
    finally:
        member.close()


def test_machine_room_prefers_consumers_in_the_partitions_rack(gateway_launcher):
    gateway = gateway_launcher.start("--rack", "east", env=ENV)     # this broker leads every partition
    servers = servers_of(gateway)
    topic, group = "kip-rooms", "kip-rooms-group"
    create_topic(servers, topic, 4)
    seen: list[tuple[str, str]] = []
    rooms = {"group.remote.assignor": "machine-room"}
    near = Member("near", member_config(servers, group, "near", **rooms, **{"client.rack": "east"}), topic, seen)
    far = Member("far", member_config(servers, group, "far", **rooms, **{"client.rack": "west"}), topic, seen)
    try:
        wait_until(lambda: near.assigned == {0, 1, 2, 3} and far.assigned == frozenset()
                   and describe(gateway, group).group_state == "Stable",
                   "the consumer in the broker's rack to own everything, the other nothing")
        assert sorted(m.rack_id for m in describe(gateway, group).members) == ["east", "west"]
        near.close()
        wait_until(lambda: far.assigned == {0, 1, 2, 3}, "the other room to take over when none is near")
    finally:
        near.close()
        far.close()


def test_a_static_member_restarting_gets_its_partitions_back_without_a_new_epoch(gateway):
    servers = servers_of(gateway)
    topic, group, partitions = "kip-static", "kip-static-group", 4
    create_topic(servers, topic, partitions)
    seen: list[tuple[str, str]] = []
    one = Member("one", member_config(servers, group, "one", **{"group.instance.id": "i-1"}), topic, seen)
    two = Member("two", member_config(servers, group, "two", **{"group.instance.id": "i-2"}), topic, seen)
    again = None
    try:
        wait_until(lambda: owned_exactly_once([one, two], partitions)
                   and describe(gateway, group).group_state == "Stable", "both static members to settle")
        epoch, owned = describe(gateway, group).group_epoch, two.assigned
        two.close()                  # a static member leaves "for now" (epoch -2): its partitions wait
        assert describe(gateway, group).group_epoch == epoch
        assert one.assigned != set(range(partitions))
        again = Member("again", member_config(servers, group, "again", **{"group.instance.id": "i-2"}), topic, seen)
        wait_until(lambda: again.assigned == owned, "the restarted instance to get its partitions back")
        assert describe(gateway, group).group_epoch == epoch
    finally:
        for member in (one, two, again):
            if member is not None:
                member.close()


def heartbeat(gateway, group: str, member_id: str, epoch: int, **fields):
    body = {"group_id": group, "member_id": member_id, "member_epoch": epoch, "rebalance_timeout_ms": 30_000,
            "subscribed_topic_names": ["kip-mixed"], "topic_partitions": []} | fields
    return raw_request(gateway.kafka, CONSUMER_GROUP_HEARTBEAT, 1, body)


def test_one_group_id_serves_one_protocol_at_a_time(gateway):
    servers = servers_of(gateway)
    create_topic(servers, "kip-mixed", 2)
    joined = heartbeat(gateway, "mixed", "m1", 0)
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.NONE, 1)
    assert heartbeat(gateway, "mixed", "m1", 7, subscribed_topic_names=None).error_code == \
        ErrorCode.FENCED_MEMBER_EPOCH
    assert heartbeat(gateway, "mixed", "nobody", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert heartbeat(gateway, "mixed", "m2", 0, server_assignor="no-such").error_code == \
        ErrorCode.UNSUPPORTED_ASSIGNOR
    classic = {"group_id": "mixed", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
               "member_id": "", "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    assert raw_request(gateway.kafka, JOIN_GROUP, 5, classic).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert heartbeat(gateway, "mixed", "m1", -1).error_code == ErrorCode.NONE     # leaves: Empty
    left = describe(gateway, "mixed")
    assert (left.group_state, left.members) == ("Empty", [])
    # An empty consumer group becomes classic for a classic member; then the other way round fails.
    classic_member = Consumer({"bootstrap.servers": servers, "group.id": "mixed", "auto.offset.reset": "earliest",
                               "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    classic_member.subscribe(["kip-mixed"])
    try:
        wait_until(lambda: classic_member.poll(0.1) is None and len(classic_member.assignment()) == 2,
                   "the classic member to own both partitions")
        assert heartbeat(gateway, "mixed", "m3", 0).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert describe(gateway, "mixed").error_code == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        classic_member.close()


def test_offsets_and_the_group_epoch_survive_a_restart(gateway_launcher, tmp_path: Path):
    data_dir = tmp_path / "data"
    gateway = gateway_launcher.start(data_dir=data_dir, env=ENV)
    servers = servers_of(gateway)
    topic, group = "kip-durable", "kip-durable-group"
    create_topic(servers, topic, 2)
    produced = produce(servers, topic, 0, 40, 2)
    seen: list[tuple[str, str]] = []
    member = Member("first", member_config(servers, group, "first"), topic, seen)
    try:
        wait_until(lambda: len(seen) == 40, "the first member to consume everything")
    finally:
        member.close()
    epoch = describe(gateway, group).group_epoch
    assert gateway.stop() == 0

    gateway = gateway_launcher.start(data_dir=data_dir, env=ENV)
    servers = servers_of(gateway)
    after = describe(gateway, group)
    assert (after.error_code, after.group_state, after.group_epoch) == (ErrorCode.NONE, "Empty", epoch)
    produced += produce(servers, topic, 40, 10, 2)
    member = Member("second", member_config(servers, group, "second"), topic, seen)
    try:
        wait_until(lambda: len(seen) == 50, "the second member to consume what is new")
        assert describe(gateway, group).group_epoch == epoch + 1
    finally:
        member.close()
    assert sorted(v for _, v in seen) == sorted(produced)     # from the committed offsets: none twice

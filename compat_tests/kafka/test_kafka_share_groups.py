"""Kafka share groups (KIP-932, queues for Kafka) against a real gateway process, with the
unmodified confluent-kafka `ShareConsumer` (librdkafka's preview share consumer).

The gateway runs with share.auto.offset.reset=earliest (so records produced before a group's first
fetch count) and a 2 s record lock, so an unacknowledged record is redelivered within seconds.
Consumers acknowledge explicitly: each value is recorded when it is accepted, so every record must
be recorded exactly once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.kafka.wire_call import raw_request
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.join_group import JOIN_GROUP
from protocols.kafka.schema.share_acknowledge import SHARE_ACKNOWLEDGE
from protocols.kafka.schema.share_fetch import SHARE_FETCH
from protocols.kafka.schema.share_group_heartbeat import SHARE_GROUP_HEARTBEAT

ENV = {"GATEWAY_KAFKA_SHARE_AUTO_OFFSET_RESET": "earliest",
       "GATEWAY_KAFKA_GROUP_SHARE_RECORD_LOCK_DURATION_MS": "2000"}
DEADLINE_S = 30.0


@pytest.fixture
def gateway(gateway_launcher):
    return gateway_launcher.start(env=ENV)


def servers_of(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


def create_topic(servers: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=15)


def produce(servers: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value=value.encode())
        producer.poll(0)
    assert producer.flush(15) == 0


def share_consumer(servers: str, group: str, topic: str, **config) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": servers, "group.id": group,
                              "share.acknowledgement.mode": "explicit", **config})
    consumer.subscribe([topic])
    return consumer


def poll_until(consumer: ShareConsumer, done: Callable[[], bool], on_message: Callable, what: str,
               timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        for message in consumer.poll(0.2):
            assert message.error() is None, message.error()
            on_message(message)


def test_two_members_share_one_partition_and_every_record_is_accepted_once(gateway):
    servers, topic = servers_of(gateway), "share-two"
    create_topic(servers, topic)
    values = [f"v{i}" for i in range(200)]
    accepted: dict[str, Counter] = {"a": Counter(), "b": Counter()}
    polled = {"a": threading.Event(), "b": threading.Event()}
    stop = threading.Event()
    errors: list[BaseException] = []

    def member(name: str) -> None:
        # "a" acknowledges each record; "b" lets the client accept a poll's records implicitly
        mode = "explicit" if name == "a" else "implicit"
        consumer = share_consumer(servers, "workers", topic, **{"max.poll.records": 10,
                                                                "share.acknowledgement.mode": mode})
        try:
            while not stop.is_set():
                messages = consumer.poll(0.2)
                polled[name].set()
                for message in messages:
                    assert message.error() is None, message.error()
                    time.sleep(0.002)                # some work, so that both members get some
                    if mode == "explicit":
                        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                if messages:
                    consumer.commit_sync()
                    accepted[name].update(m.value().decode() for m in messages)
        except BaseException as exc:  # noqa: BLE001  (surfaced by the test thread)
            errors.append(exc)
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, args=(name,)) for name in accepted]
    for thread in threads:
        thread.start()
    try:
        assert all(event.wait(DEADLINE_S) for event in polled.values()), "a share consumer never polled"
        produce(servers, topic, values)
        deadline = time.monotonic() + DEADLINE_S
        while sum((accepted["a"] + accepted["b"]).values()) < len(values) and not errors:
            assert time.monotonic() < deadline, f"accepted {sum((accepted['a'] + accepted['b']).values())}"
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
    assert not errors, errors
    both = accepted["a"] + accepted["b"]
    assert set(both) == set(values) and max(both.values()) == 1   # none lost, none twice
    assert accepted["a"] and accepted["b"]                          # more members than partitions: both work


def test_acknowledgements_survive_a_restart(gateway_launcher):
    gateway = gateway_launcher.start(env=ENV)
    servers, topic = servers_of(gateway), "share-restart"
    create_topic(servers, topic)
    produce(servers, topic, ["old-0", "old-1", "old-2"])
    consumer = share_consumer(servers, "durable", topic)
    seen: list[str] = []

    def accept(message) -> None:
        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        seen.append(message.value().decode())
    poll_until(consumer, lambda: len(seen) == 3, accept, "the first three records")
    consumer.commit_sync()
    consumer.close()
    gateway.stop()

    gateway = gateway_launcher.start(env=ENV)
    servers = servers_of(gateway)
    produce(servers, topic, ["new-0"])
    consumer = share_consumer(servers, "durable", topic)
    later: list[str] = []

    def accept_later(message) -> None:
        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        later.append(message.value().decode())
    poll_until(consumer, lambda: bool(later), accept_later, "the new record")
    consumer.commit_sync()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:          # and nothing acknowledged before the restart
        later.extend(m.value().decode() for m in consumer.poll(0.2))
    consumer.close()
    assert later == ["new-0"]


def test_records_a_member_did_not_acknowledge_go_to_another_with_a_higher_delivery_count(gateway):
    servers, topic = servers_of(gateway), "share-redeliver"
    create_topic(servers, topic)
    produce(servers, topic, ["r0", "r1", "r2"])

    # Closed without acknowledging: the records are released at once.
    quitter = share_consumer(servers, "redeliver", topic)
    taken: list[str] = []
    poll_until(quitter, lambda: len(taken) == 3, lambda m: taken.append(m.value().decode()), "the records")
    quitter.close()

    # Polled and then silent (alive, heartbeating): released when the 2 s lock runs out.
    sleeper = share_consumer(servers, "redeliver", topic)
    counts: dict[str, int] = {}
    poll_until(sleeper, lambda: len(counts) == 3,
               lambda m: counts.setdefault(m.value().decode(), m.delivery_count()), "the redelivered records")
    assert counts == {"r0": 2, "r1": 2, "r2": 2}

    worker = share_consumer(servers, "redeliver", topic)
    final: dict[str, int] = {}

    def accept(message) -> None:
        worker.acknowledge(message, AcknowledgeType.ACCEPT)
        final[message.value().decode()] = message.delivery_count()
    started = time.monotonic()
    poll_until(worker, lambda: len(final) == 3, accept, "the records after the lock ran out")
    assert time.monotonic() - started < DEADLINE_S
    assert final == {"r0": 3, "r1": 3, "r2": 3}
    worker.commit_sync()
    worker.close()
    sleeper.close()


def test_a_rejected_record_is_never_delivered_again(gateway):
    servers, topic = servers_of(gateway), "share-reject"
    create_topic(servers, topic)
    produce(servers, topic, ["bad", "good"])
    first = share_consumer(servers, "rejecting", topic)
    outcome: dict[str, AcknowledgeType] = {}

    def judge(message) -> None:
        kind = AcknowledgeType.REJECT if message.value() == b"bad" else AcknowledgeType.RELEASE
        first.acknowledge(message, kind)
        outcome[message.value().decode()] = kind
    poll_until(first, lambda: len(outcome) == 2, judge, "both records")
    first.commit_sync()
    first.close()

    second = share_consumer(servers, "rejecting", topic)
    seen: list[tuple[str, int]] = []

    def accept(message) -> None:
        second.acknowledge(message, AcknowledgeType.ACCEPT)
        seen.append((message.value().decode(), message.delivery_count()))
    poll_until(second, lambda: bool(seen), accept, "the released record")
    second.commit_sync()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:          # nothing else comes: "bad" is done for good
        for message in second.poll(0.2):
            seen.append((message.value().decode(), message.delivery_count()))
    second.close()
    assert seen == [("good", 2)]


def test_a_share_group_cannot_take_a_consumer_groups_id(gateway):
    servers, topic = servers_of(gateway), "share-ids"
    create_topic(servers, topic)
    produce(servers, topic, ["x"])
    classic = Consumer({"bootstrap.servers": servers, "group.id": "taken", "enable.auto.commit": False})
    classic.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    classic.close()
    body = {"group_id": "taken", "member_id": "m-1", "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": [topic]}
    assert raw_request(gateway.kafka, SHARE_GROUP_HEARTBEAT, 1, body).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    fresh = raw_request(gateway.kafka, SHARE_GROUP_HEARTBEAT, 1, {**body, "group_id": "free"})
    assert fresh.error_code == ErrorCode.NONE and fresh.member_epoch > 0
    assert [p for t in fresh.assignment.topic_partitions for p in t.partitions] == [0]
    join = {"group_id": "free", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
            "member_id": "", "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    assert raw_request(gateway.kafka, JOIN_GROUP, 5, join).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    stale = raw_request(gateway.kafka, SHARE_GROUP_HEARTBEAT, 1, {**body, "group_id": "free", "member_epoch": 99})
    assert stale.error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_share_sessions_and_acknowledgements_refuse_what_does_not_fit(gateway):
    servers, topic = servers_of(gateway), "share-sessions"
    create_topic(servers, topic)
    produce(servers, topic, ["s0", "s1"])
    joined = raw_request(gateway.kafka, SHARE_GROUP_HEARTBEAT, 1, {
        "group_id": "raw", "member_id": "m", "member_epoch": 0, "rack_id": None, "subscribed_topic_names": [topic]})
    topic_id = joined.assignment.topic_partitions[0].topic_id

    def fetch(epoch: int, acks=(), partitions=True):
        parts = [{"partition_index": 0, "acknowledgement_batches": list(acks)}] if partitions else []
        return raw_request(gateway.kafka, SHARE_FETCH, 1, {
            "group_id": "raw", "member_id": "m", "share_session_epoch": epoch, "max_wait_ms": 100,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 1, "batch_size": 1,
            "topics": [{"topic_id": topic_id, "partitions": parts}] if parts else [],
            "forgotten_topics_data": []})

    def acknowledge(epoch: int, first: int, last: int, kind: int):
        return raw_request(gateway.kafka, SHARE_ACKNOWLEDGE, 1, {
            "group_id": "raw", "member_id": "m", "share_session_epoch": epoch,
            "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": first, "last_offset": last, "acknowledge_types": [kind]}]}]}]})

    assert fetch(3).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    opened = fetch(0)
    assert opened.error_code == ErrorCode.NONE and opened.acquisition_lock_timeout_ms == 2000
    assert [(r.first_offset, r.last_offset, r.delivery_count)
            for r in opened.responses[0].partitions[0].acquired_records] == [(0, 0, 1)]   # max_records 1
    assert fetch(5, partitions=False).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert acknowledge(0, 0, 0, 1).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    refused = acknowledge(1, 1, 1, 1)                    # offset 1 was never acquired
    assert refused.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    accepted = acknowledge(2, 0, 0, 1)
    assert accepted.error_code == ErrorCode.NONE and accepted.responses[0].partitions[0].error_code == ErrorCode.NONE
    piggybacked = fetch(3, acks=[])
    assert [(r.first_offset, r.last_offset) for r in piggybacked.responses[0].partitions[0].acquired_records] \
        == [(1, 1)]
    closed = fetch(-1, acks=[{"first_offset": 1, "last_offset": 1, "acknowledge_types": [1]}])
    assert closed.error_code == ErrorCode.NONE
    assert closed.responses[0].partitions[0].acknowledge_error_code == ErrorCode.NONE
    assert fetch(4).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND

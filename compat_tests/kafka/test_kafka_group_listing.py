"""Groups of every kind seen through the admin clients, against a real gateway process: a classic
group, a consumer-protocol group (KIP-848, confluent-kafka with `group.protocol=consumer`) and a
share group (KIP-932, confluent-kafka's `ShareConsumer`), listed with ListGroups v5's type and
state filters, described, and their committed offsets fetched, several groups in one OffsetFetch
v8 (kafka-python batches them when the broker serves v8; confluent-kafka takes one group a call).

confluent-kafka 2.16 has no describe_share_groups (librdkafka sends no ShareGroupDescribe) and
its list_consumer_groups leaves share groups out (protocol type "share"): share groups are listed
with kafka-python, and ShareGroupDescribe is checked over the wire here and in
tests/protocols/kafka/test_group_handlers.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType, Producer,
                             ShareConsumer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaTopicPartition

from compat_tests.kafka.wire_call import raw_request
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.api_versions import API_VERSIONS
from protocols.kafka.schema.share_group_describe import SHARE_GROUP_DESCRIBE

ENV = {"GATEWAY_KAFKA_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "6000",
       "GATEWAY_KAFKA_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "500",
       "GATEWAY_KAFKA_SHARE_AUTO_OFFSET_RESET": "earliest"}
TOPIC, DEADLINE_S = "kinds", 45.0


@pytest.fixture
def gateway(gateway_launcher):
    return gateway_launcher.start(env=ENV)


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def consume(consumer: Consumer, count: int) -> list:
    messages: list = []
    deadline = time.monotonic() + DEADLINE_S
    while len(messages) < count:
        assert time.monotonic() < deadline, f"consumed {len(messages)} of {count}"
        message = consumer.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            messages.append(message)
    return messages


def test_every_kind_of_group_is_listed_described_and_its_offsets_fetched(gateway, monkeypatch):
    host, port = gateway.kafka
    servers = f"{host}:{port}"
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(timeout=15)
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0})
    for i in range(6):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(15) == 0
    served = {k.api_key: k.max_version for k in raw_request(gateway.kafka, API_VERSIONS, 2, {}).api_keys}
    assert (served[9], served[16], served[69], served[77]) == (9, 5, 1, 1)

    # a classic group: a consumer committing what it read
    classic = Consumer({"bootstrap.servers": servers, "group.id": "classic", "auto.offset.reset": "earliest",
                        "enable.auto.commit": False})
    classic.assign([TopicPartition(TOPIC, 0)])
    consume(classic, 3)
    classic.commit(offsets=[TopicPartition(TOPIC, 0, 2)], asynchronous=False)
    classic.close()

    # a consumer-protocol group: commits, then reads its committed offsets back (OffsetFetch v9)
    modern = Consumer({"bootstrap.servers": servers, "group.id": "modern", "group.protocol": "consumer",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    modern.subscribe([TOPIC])
    share = ShareConsumer({"bootstrap.servers": servers, "group.id": "queue", "client.id": "worker-1"})
    share.subscribe([TOPIC])
    try:
        for message in consume(modern, 6):
            modern.commit(message, asynchronous=False)
        committed = modern.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], timeout=15)
        assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [(0, 3, None), (1, 3, None)]
        wait_until(lambda: bool(share.poll(0.2)), "the share consumer receiving records")

        # ListGroups v5: each kind with its type, filtered by type and state
        listed = admin.list_consumer_groups().result()
        kinds = {g.group_id: (g.type, g.state) for g in listed.valid}
        assert kinds["classic"] == (ConsumerGroupType.CLASSIC, ConsumerGroupState.EMPTY)
        assert kinds["modern"] == (ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE)
        assert "queue" not in kinds     # librdkafka keeps groups of protocol type "consumer" or "" only
        only_modern = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result()
        assert [g.group_id for g in only_modern.valid] == ["modern"]
        only_classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC},
                                                  states={ConsumerGroupState.EMPTY}).result()
        assert [g.group_id for g in only_classic.valid] == ["classic"]
        python_admin = KafkaAdminClient(bootstrap_servers=servers)
        try:
            shares = python_admin.list_groups(types_filter=["share"])
            assert [(g["group_id"], g["group_type"], g["group_state"]) for g in shares] == \
                [("queue", "share", "Stable")]

            # several groups in one OffsetFetch v8 (kafka-python), one group a call (confluent-kafka)
            sent, send = [], python_admin._manager.send
            monkeypatch.setattr(python_admin._manager, "send", lambda request, *a, **kw: sent.append(request) or
                                send(request, *a, **kw))
            fetched = python_admin.list_group_offsets({"classic": None, "modern": None, "nobody": None})
            assert [len(r.groups) for r in sent if type(r).__name__ == "OffsetFetchRequest"] == [3]
            assert {tp.partition: o.offset for tp, o in fetched["classic"].items()} == {0: 2}
            assert {tp.partition: o.offset for tp, o in fetched["modern"].items()} == {0: 3, 1: 3}
            assert fetched["nobody"] == {}
            named = python_admin.list_group_offsets({"modern": [KafkaTopicPartition(TOPIC, 1)],
                                                     "classic": [KafkaTopicPartition(TOPIC, 1)]})
            assert named["modern"][KafkaTopicPartition(TOPIC, 1)].offset == 3
            assert named["classic"][KafkaTopicPartition(TOPIC, 1)].offset == -1
        finally:
            python_admin.close()
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("modern")])["modern"].result()
        assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 3), (1, 3)]

        # ConsumerGroupDescribe for the consumer-protocol group, DescribeGroups for the classic one
        described = admin.describe_consumer_groups(["modern", "classic"])
        modern_view, classic_view = described["modern"].result(), described["classic"].result()
        assert (modern_view.type, modern_view.state) == (ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE)
        assert len(modern_view.members) == 1
        assert {tp.partition for tp in modern_view.members[0].assignment.topic_partitions} == {0, 1}
        assert classic_view.state == ConsumerGroupState.EMPTY

        # the share group as ShareGroupDescribe shows it
        response = raw_request(gateway.kafka, SHARE_GROUP_DESCRIBE, 1,
                               {"group_ids": ["queue", "modern"], "include_authorized_operations": False})
        queue, not_share = response.groups
        assert (queue.error_code, queue.group_state, len(queue.members)) == (ErrorCode.NONE, "Stable", 1)
        assert (queue.members[0].client_id, queue.members[0].subscribed_topic_names) == ("worker-1", [TOPIC])
        assert [(t.topic_name, t.partitions) for t in queue.members[0].assignment.topic_partitions] == \
            [(TOPIC, [0, 1])]
        assert not_share.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        share.close()
        modern.close()

    # a new member of the consumer-protocol group starts after what was committed
    resumed = Consumer({"bootstrap.servers": servers, "group.id": "modern", "group.protocol": "consumer",
                        "auto.offset.reset": "earliest", "enable.auto.commit": False})
    resumed.subscribe([TOPIC])
    try:
        producer.produce(TOPIC, value=b"after", partition=1)
        assert producer.flush(15) == 0
        assert [m.value() for m in consume(resumed, 1)] == [b"after"]
    finally:
        resumed.close()

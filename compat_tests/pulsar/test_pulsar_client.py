"""pulsar-client (the official Python client over the C++ library) unchanged, against `gateway serve`:
producing with and without batching under each compression, the four subscription types, acks,
negative acks, cumulative acks, initial positions, de-duplication by sequence id, readers'
last message id, unsubscribing, and a Kafka topic of three partitions as a partitioned topic."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from datetime import timedelta

import pulsar
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.pulsar.clients import TIMEOUT_MS, client, nothing_more, receive_all, unique




@pytest.fixture
def pc(gateway):
    c = client(gateway)
    yield c
    c.close()


@pytest.mark.parametrize("compression", [pulsar.CompressionType.NONE, pulsar.CompressionType.LZ4,
                                         pulsar.CompressionType.ZLib, pulsar.CompressionType.ZSTD,
                                         pulsar.CompressionType.SNAPPY])
def test_batched_compressed_sends_arrive_in_order_with_keys_and_properties(pc, compression):
    topic = unique("batch")
    consumer = pc.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = pc.create_producer(topic, batching_enabled=True, batching_max_messages=50,
                                  batching_max_publish_delay_ms=20, compression_type=compression)
    receipts = []
    for i in range(120):
        producer.send_async(f"value-{i}".encode() * 3, lambda result, mid: receipts.append((result, mid)),
                            properties={"n": str(i)}, partition_key=f"key-{i % 7}", event_timestamp=1000 + i)
    producer.flush()
    got = receive_all(consumer, 120)
    assert [m.data() for m in got] == [f"value-{i}".encode() * 3 for i in range(120)]
    assert [m.properties() for m in got] == [{"n": str(i)} for i in range(120)]
    assert [m.partition_key() for m in got] == [f"key-{i % 7}" for i in range(120)]
    assert [m.event_timestamp() for m in got] == [1000 + i for i in range(120)]
    assert all(result == pulsar.Result.Ok for result, _ in receipts) and len(receipts) == 120
    assert nothing_more(consumer)


def test_sync_sends_return_ids_that_name_what_the_consumer_gets(pc):
    topic = unique("ids")
    consumer = pc.subscribe(topic, "s")
    producer = pc.create_producer(topic)
    sent = [producer.send(f"m{i}".encode()) for i in range(3)]
    got = receive_all(consumer, 3)
    assert [str(m.message_id()) for m in got] == [str(mid) for mid in sent]


def test_a_topic_is_created_on_first_use_only_in_a_namespace_that_exists(pc):
    pc.create_producer(unique("auto")).send(b"x")
    with pytest.raises(pulsar.TopicNotFound):
        pc.create_producer(f"persistent://no-such-tenant/ns/{unique('t')}")


def test_an_exclusive_subscription_refuses_a_second_consumer(pc):
    topic = unique("exclusive")
    pc.subscribe(topic, "only", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        pc.subscribe(topic, "only", consumer_type=pulsar.ConsumerType.Exclusive)


def test_a_failover_subscription_delivers_to_one_consumer_then_the_next(pc):
    topic = unique("failover")
    first = pc.subscribe(topic, "f", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    second = pc.subscribe(topic, "f", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    producer = pc.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    got = receive_all(first, 10)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(10)]
    assert nothing_more(second)
    first.close()
    for i in range(10, 15):
        producer.send(f"m{i}".encode())
    assert [m.data() for m in receive_all(second, 5)] == [f"m{i}".encode() for i in range(10, 15)]


def test_shared_consumers_split_the_messages_and_see_each_once(pc):
    topic = unique("shared")
    consumers = [pc.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5)
                 for _ in range(2)]
    producer = pc.create_producer(topic, batching_enabled=True)
    for i in range(200):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    seen: dict[int, list[bytes]] = {0: [], 1: []}

    def drain(index: int) -> None:
        while True:
            try:
                message = consumers[index].receive(1500)
            except pulsar.Timeout:
                return
            seen[index].append(message.data())
            consumers[index].acknowledge(message)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(int(v) for v in seen[0] + seen[1]) == list(range(200))
    assert seen[0] and seen[1]


def test_key_shared_keeps_each_keys_order_across_consumers(pc):
    topic = unique("keyshared")
    consumers = [pc.subscribe(topic, "k", consumer_type=pulsar.ConsumerType.KeyShared) for _ in range(2)]
    producer = pc.create_producer(topic)
    for i in range(60):
        producer.send_async(f"{i % 4}:{i}".encode(), None, partition_key=f"key-{i % 4}")
    producer.flush()
    per_key: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def drain(consumer) -> None:
        while True:
            try:
                message = consumer.receive(1500)
            except pulsar.Timeout:
                return
            key, n = message.data().decode().split(":")
            with lock:
                per_key[key].append(int(n))
            consumer.acknowledge(message)

    threads = [threading.Thread(target=drain, args=(c,)) for c in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {k: v for k, v in per_key.items()} == {str(k): list(range(k, 60, 4)) for k in range(4)}


def test_a_negative_ack_redelivers_with_a_count(pc):
    topic = unique("nack")
    consumer = pc.subscribe(topic, "n", consumer_type=pulsar.ConsumerType.Shared,
                            negative_ack_redelivery_delay_ms=100)
    pc.create_producer(topic).send(b"again")
    first = consumer.receive(TIMEOUT_MS)
    assert first.redelivery_count() == 0
    consumer.negative_acknowledge(first)
    second = consumer.receive(TIMEOUT_MS)
    assert (second.data(), second.redelivery_count()) == (b"again", 1)
    consumer.acknowledge(second)
    assert nothing_more(consumer)


def test_a_message_sent_with_a_delay_arrives_after_it(pc):
    topic = unique("delayed")
    consumer = pc.subscribe(topic, "d", consumer_type=pulsar.ConsumerType.Shared)
    producer = pc.create_producer(topic)
    sent_at = time.monotonic()
    producer.send(b"later", deliver_after=timedelta(milliseconds=1500))
    producer.send(b"now")
    assert consumer.receive(TIMEOUT_MS).data() == b"now"
    assert consumer.receive(TIMEOUT_MS).data() == b"later"
    assert time.monotonic() - sent_at >= 1.4


def test_what_was_acknowledged_is_not_delivered_again_and_the_rest_is(pc):
    topic = unique("acks")
    consumer = pc.subscribe(topic, "a", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = pc.create_producer(topic)
    for i in range(10):
        producer.send(str(i).encode())
    got = receive_all(consumer, 10, ack=False)
    consumer.acknowledge_cumulative(got[4])     # 0..4
    consumer.acknowledge(got[7])
    consumer.close()
    again = pc.subscribe(topic, "a", consumer_type=pulsar.ConsumerType.Exclusive)
    redelivered = receive_all(again, 4)
    assert [m.data() for m in redelivered] == [b"5", b"6", b"8", b"9"]
    assert all(m.redelivery_count() >= 1 for m in redelivered)
    assert nothing_more(again)


def test_initial_positions_earliest_and_latest(pc):
    topic = unique("position")
    producer = pc.create_producer(topic)
    producer.send(b"before")
    earliest = pc.subscribe(topic, "e", initial_position=pulsar.InitialPosition.Earliest)
    latest = pc.subscribe(topic, "l", initial_position=pulsar.InitialPosition.Latest)
    producer.send(b"after")
    assert [m.data() for m in receive_all(earliest, 2)] == [b"before", b"after"]
    assert [m.data() for m in receive_all(latest, 1)] == [b"after"]


def test_a_resent_sequence_id_is_acknowledged_and_stored_once(pc):
    topic = unique("dedup")
    producer = pc.create_producer(topic, producer_name="dedup-producer")
    for sequence_id in (0, 1, 2, 1, 2, 3):
        producer.send(f"s{sequence_id}".encode(), sequence_id=sequence_id)
    producer.close()
    again = pc.create_producer(topic, producer_name="dedup-producer")
    assert again.last_sequence_id() == 3
    consumer = pc.subscribe(topic, "d", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in receive_all(consumer, 4)] == [b"s0", b"s1", b"s2", b"s3"]
    assert nothing_more(consumer)


def test_last_message_id_and_unsubscribe(pc):
    topic = unique("last")
    producer = pc.create_producer(topic)
    sent = [producer.send(str(i).encode()) for i in range(3)]
    consumer = pc.subscribe(topic, "u", initial_position=pulsar.InitialPosition.Earliest)
    assert str(consumer.get_last_message_id()) == str(sent[-1])
    receive_all(consumer, 1)
    consumer.unsubscribe()
    fresh = pc.subscribe(topic, "u", initial_position=pulsar.InitialPosition.Latest)
    producer.send(b"new")
    assert [m.data() for m in receive_all(fresh, 1)] == [b"new"]


def test_seeking_by_message_id_and_by_time_reads_again_from_there(pc):
    topic = unique("seek")
    consumer = pc.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = pc.create_producer(topic)
    ids = [producer.send(str(i).encode()) for i in range(5)]
    time.sleep(0.05)
    producer.send(b"5")
    got = receive_all(consumer, 6)
    # the subscription restarts at the id; the client itself skips that message (not inclusive)
    consumer.seek(ids[2])
    assert [m.data() for m in receive_all(consumer, 3)] == [b"3", b"4", b"5"]
    consumer.seek(got[5].publish_timestamp())
    assert [m.data() for m in receive_all(consumer, 1)] == [b"5"]
    assert nothing_more(consumer)


def test_a_reader_reads_from_the_start(pc):
    topic = unique("reader")
    producer = pc.create_producer(topic)
    for i in range(5):
        producer.send(str(i).encode())
    reader = pc.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(TIMEOUT_MS).data() for _ in range(5)] == [str(i).encode() for i in range(5)]


def test_a_kafka_topic_of_three_partitions_is_a_partitioned_topic(gateway, pc):
    topic = unique("partitioned")
    host, port = gateway.kafka
    admin = AdminClient({"bootstrap.servers": f"{host}:{port}"})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(20)
    assert sorted(pc.get_topic_partitions(topic)) == [f"persistent://public/default/{topic}-partition-{i}"
                                                       for i in range(3)]
    consumer = pc.subscribe(topic, "p", initial_position=pulsar.InitialPosition.Earliest)
    producer = pc.create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send(str(i).encode(), partition_key=f"k{i}")
    got = receive_all(consumer, 30)
    assert sorted(int(m.data()) for m in got) == list(range(30))
    assert len({str(m.topic_name()) for m in got}) > 1

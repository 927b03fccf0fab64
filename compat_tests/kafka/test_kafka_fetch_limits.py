"""Fetch byte limits as Kafka applies them, against a real `gateway serve`: a partition's answer and
the whole response stop before the batch that would cross partition_max_bytes / max_bytes; only
the response's first batch may exceed them (KIP-74). Checked byte-exactly over a raw socket, and
through aiokafka, whose getmany hands out what one fetch returned. Also: a waiting fetch is
answered with what woke it."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioPartition
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests.kafka.wire_call import raw_request
from protocols.kafka.schema.fetch import FETCH

BATCHES = 6
VALUE = b"v" * 1000


def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


@pytest.fixture
def topic(gateway_process) -> str:
    """Two partitions, each holding BATCHES one-record batches of about 1 KiB."""
    name = f"limits-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(gateway_process))
    admin.create_topics([NewTopic(name, 2, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap(gateway_process), linger_ms=0)
    for partition in (0, 1):
        for _ in range(BATCHES):
            producer.send(name, VALUE, partition=partition)
            producer.flush()   # one batch per record
    producer.close()
    return name


def fetch(gateway, topic: str, partitions: list[int], partition_max_bytes: int, max_bytes: int,
          version: int = 11) -> dict[int, bytes]:
    response = raw_request(gateway.kafka, FETCH, version, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": topic, "partitions": [
            {"partition": p, "fetch_offset": 0, "log_start_offset": -1, "partition_max_bytes": partition_max_bytes}
            for p in partitions]}]})
    return {part.partition_index: bytes(part.records or b"") for part in response.responses[0].partitions}


def batch_sizes(records: bytes) -> list[int]:
    """Sizes of the whole RecordBatches in `records` (base offset, then batch length)."""
    sizes, at = [], 0
    while at + 12 <= len(records):
        size = 12 + struct.unpack_from(">i", records, at + 8)[0]
        assert at + size <= len(records), "a partial batch"
        sizes.append(size)
        at += size
    assert at == len(records)
    return sizes


def test_a_partition_stops_before_the_batch_that_would_cross_its_limit(gateway_process, topic):
    sizes = batch_sizes(fetch(gateway_process, topic, [0], 1 << 20, 1 << 20)[0])
    assert len(sizes) == BATCHES
    for whole in range(1, BATCHES):
        exact = sum(sizes[:whole])
        for limit in (exact, exact + sizes[whole] - 1):
            assert batch_sizes(fetch(gateway_process, topic, [0], limit, 1 << 20)[0]) == sizes[:whole]


def test_only_the_first_batch_of_a_response_may_exceed_a_limit(gateway_process, topic):
    size = batch_sizes(fetch(gateway_process, topic, [0], 1 << 20, 1 << 20)[0])[0]
    # Both partitions allow less than one batch: the first gets its first batch, the second nothing.
    got = fetch(gateway_process, topic, [0, 1], 10, 1 << 20)
    assert (len(batch_sizes(got[0])), got[1]) == (1, b"")
    # The response limit is one and a half batches: the first partition fills it, the second gets none.
    got = fetch(gateway_process, topic, [0, 1], 1 << 20, size * 3 // 2)
    assert (len(batch_sizes(got[0])), got[1]) == (1, b"")
    # Room for three batches in the response: two from the first partition, one from the second.
    got = fetch(gateway_process, topic, [0, 1], 2 * size, 3 * size)
    assert (len(batch_sizes(got[0])), len(batch_sizes(got[1]))) == (2, 1)


def test_fetch_v2_has_hard_limits(gateway_process, topic):
    """Before v3 a batch larger than partition_max_bytes is not returned (Kafka sends a partial one,
    which the client cannot use either)."""
    assert batch_sizes(fetch(gateway_process, topic, [0], 10, 0, version=2)[0]) == []


def test_aiokafka_getmany_hands_out_what_fits_in_max_partition_fetch_bytes(gateway_process, topic):
    size = batch_sizes(fetch(gateway_process, topic, [0], 1 << 20, 1 << 20)[0])[0]

    async def first_handout() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap(gateway_process), enable_auto_commit=False,
                                    max_partition_fetch_bytes=size * 5 // 2)
        await consumer.start()
        try:
            partition = AioPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek(partition, 0)
            for _ in range(50):
                got = await consumer.getmany(partition, timeout_ms=500)
                if got:
                    return len(got[partition])
            raise AssertionError("nothing fetched")
        finally:
            await consumer.stop()

    assert asyncio.run(first_handout()) == 2


def test_a_waiting_fetch_answers_with_the_record_that_woke_it(gateway_process, topic):
    """A fetch at the end of both partitions waits (max_wait_ms) and is answered, in that one
    response, with the batch appended to either partition meanwhile."""
    ends = {p: BATCHES for p in (0, 1)}
    request = {"replica_id": -1, "max_wait_ms": 20_000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
               "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
               "topics": [{"topic": topic, "partitions": [
                   {"partition": p, "fetch_offset": ends[p], "log_start_offset": -1, "partition_max_bytes": 1 << 20}
                   for p in (0, 1)]}]}

    def produce_later() -> None:
        time.sleep(0.5)   # let the fetch start waiting first
        producer = KafkaProducer(bootstrap_servers=bootstrap(gateway_process), linger_ms=0)
        producer.send(topic, b"wake", partition=1)
        producer.flush()
        producer.close()

    writer = threading.Thread(target=produce_later)
    started = time.monotonic()
    writer.start()
    response = raw_request(gateway_process.kafka, FETCH, 11, request)
    writer.join()
    assert time.monotonic() - started < 15, "the fetch waited for its whole max_wait_ms"
    records = {part.partition_index: bytes(part.records or b"") for part in response.responses[0].partitions}
    assert records[0] == b"" and len(batch_sizes(records[1])) == 1 and b"wake" in records[1]

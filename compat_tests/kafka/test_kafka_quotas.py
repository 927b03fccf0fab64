"""Client quotas against a real gateway: AlterClientQuotas / DescribeClientQuotas on the wire, and
confluent-kafka (librdkafka) producers and consumers told to wait by throttle_time_ms.

No client library in scope has an admin call for client quotas, so the quota requests are sent
as raw frames; the throttling is what the real clients observe (their throttle callbacks)."""

from __future__ import annotations

import socket
import struct
import uuid

from protocols.kafka.codec import types as t
from protocols.kafka.codec.compile import request_codec, response_codec
from protocols.kafka.schema.alter_client_quotas import ALTER_CLIENT_QUOTAS
from protocols.kafka.schema.describe_client_quotas import DESCRIBE_CLIENT_QUOTAS

QUOTA_BYTES_PER_S = 100_000
MESSAGE = b"q" * 2000
COUNT = 600          # 1.2 MB: 20% over what a 10 s window allows at the quota


def raw_call(gateway, api, body: dict):
    """One request at version 0 (non-flexible headers), its decoded response."""
    encoded = bytearray()
    request_codec(api, 0).write(encoded, body)
    client_id = b"quota-admin"
    payload = struct.pack(">hhih", api.key, 0, 7, len(client_id)) + client_id + bytes(encoded)
    with socket.create_connection(gateway.kafka, timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _read(sock, 4))[0]
        response = _read(sock, size)
    assert struct.unpack_from(">i", response)[0] == 7
    return response_codec(api, 0).read(t.Reader(response[4:]))


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def set_quota(gateway, client_id: str, key: str, value: float) -> None:
    response = raw_call(gateway, ALTER_CLIENT_QUOTAS, {"entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": client_id}],
        "ops": [{"key": key, "value": value, "remove": False}]}], "validate_only": False})
    assert [e.error_code for e in response.entries] == [0]


def produce_all(gateway, topic: str, client_id: str) -> list:
    from confluent_kafka import Producer
    throttles = []
    producer = Producer({"bootstrap.servers": "%s:%d" % gateway.kafka, "client.id": client_id,
                         "linger.ms": 20, "throttle_cb": throttles.append})
    delivered = []
    for _ in range(COUNT):
        producer.produce(topic, MESSAGE, on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert delivered == [None] * COUNT
    return [event.throttle_time for event in throttles]


def consume_all(gateway, topic: str, client_id: str) -> list:
    from confluent_kafka import Consumer, TopicPartition
    throttles = []
    consumer = Consumer({"bootstrap.servers": "%s:%d" % gateway.kafka, "client.id": client_id,
                         "group.id": f"g-{uuid.uuid4().hex[:6]}", "throttle_cb": throttles.append,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    received = 0
    while received < COUNT:
        for message in consumer.consume(500, timeout=30):
            assert message.error() is None
            received += 1
    consumer.poll(0.5)   # serve the last throttle callback
    consumer.close()
    return [event.throttle_time for event in throttles]


def test_quotas_are_described_and_throttle_only_the_clients_they_name(gateway_process) -> None:
    topic = f"quota-{uuid.uuid4().hex[:6]}"
    set_quota(gateway_process, "slow-producer", "producer_byte_rate", QUOTA_BYTES_PER_S)
    set_quota(gateway_process, "slow-reader", "consumer_byte_rate", QUOTA_BYTES_PER_S)
    described = raw_call(gateway_process, DESCRIBE_CLIENT_QUOTAS, {"components": [
        {"entity_type": "client-id", "match_type": 2, "match": None}], "strict": True})
    assert sorted((e.entity[0].entity_name, e["values"][0].key) for e in described.entries) == [
        ("slow-producer", "producer_byte_rate"), ("slow-reader", "consumer_byte_rate")]

    assert not any(produce_all(gateway_process, topic, "free-producer"))
    assert any(throttle > 0 for throttle in produce_all(gateway_process, topic, "slow-producer"))
    assert not any(consume_all(gateway_process, topic, "free-reader"))
    assert any(throttle > 0 for throttle in consume_all(gateway_process, topic, "slow-reader"))

"""The official Pulsar client (pulsar-client, the C++ library underneath) against a gateway."""

from __future__ import annotations

import uuid

import pulsar

TIMEOUT_MS = 20_000


def client(gateway) -> pulsar.Client:
    host, port = gateway.pulsar
    return pulsar.Client(f"pulsar://{host}:{port}", operation_timeout_seconds=20,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def receive_all(consumer, count: int, *, ack: bool = True) -> list:
    got = []
    for _ in range(count):
        message = consumer.receive(TIMEOUT_MS)
        if ack:
            consumer.acknowledge(message)
        got.append(message)
    return got


def nothing_more(consumer, wait_ms: int = 500) -> bool:
    try:
        consumer.receive(wait_ms)
    except pulsar.Timeout:
        return True
    return False

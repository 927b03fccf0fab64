"""Consumers of the three client libraries reading one partition by assignment (no group, so the
client's own position is what carries across a failover or restart), each record with the leader
epoch the client saw on it (aiokafka keeps none: None)."""

from __future__ import annotations

import asyncio
import time
import uuid

from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, TopicPartition

TIMEOUT_S = 60.0


def produce(address: str, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": address, "enable.idempotence": True})
    for i in values:
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0


class ConfluentReader:
    def __init__(self, address: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": address, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.assign([ConfluentPartition(topic, 0)])

    def read(self, count: int, timeout_s: float = TIMEOUT_S) -> list[tuple[int, bytes, int]]:
        got: list[tuple[int, bytes, int]] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            message = self.consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append((message.offset(), message.value(), message.leader_epoch()))
        return got

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonReader:
    def __init__(self, address: str, topic: str) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=address, group_id=f"g-{uuid.uuid4().hex[:8]}",
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        self.consumer.assign([TopicPartition(topic, 0)])

    def read(self, count: int, timeout_s: float = TIMEOUT_S) -> list[tuple[int, bytes, int]]:
        got: list[tuple[int, bytes, int]] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            for records in self.consumer.poll(500).values():
                got.extend((r.offset, r.value, r.leader_epoch) for r in records)
        return got

    def close(self) -> None:
        self.consumer.close()


class AiokafkaReader:
    """aiokafka keeps no leader epochs: it reads on as before (its records name no epoch: None)."""

    def __init__(self, address: str, topic: str) -> None:
        async def start() -> AIOKafkaConsumer:
            consumer = AIOKafkaConsumer(bootstrap_servers=address, auto_offset_reset="earliest",
                                        enable_auto_commit=False)
            consumer.assign([TopicPartition(topic, 0)])
            await consumer.start()
            return consumer
        self.loop = asyncio.new_event_loop()
        self.consumer = self.loop.run_until_complete(start())

    def read(self, count: int, timeout_s: float = TIMEOUT_S) -> list[tuple[int, bytes, int]]:
        async def read() -> list[tuple[int, bytes, int]]:
            got: list[tuple[int, bytes, int]] = []
            deadline = time.monotonic() + timeout_s
            while len(got) < count and time.monotonic() < deadline:
                for records in (await self.consumer.getmany(timeout_ms=500)).values():
                    got.extend((r.offset, r.value, None) for r in records)
            return got
        return self.loop.run_until_complete(read())

    def close(self) -> None:
        self.loop.run_until_complete(self.consumer.stop())
        self.loop.close()


READERS = [ConfluentReader, KafkaPythonReader, AiokafkaReader]
READER_IDS = ["confluent", "kafka-python", "aiokafka"]

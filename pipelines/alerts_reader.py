"""Reading `recon-alerts` back with kafka-python: every alert up to the current end of the topic."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from kafka import KafkaConsumer, TopicPartition


@dataclass(frozen=True, slots=True)
class KafkaAlert:
    alert: dict
    key: str
    timestamp_ms: int  # when Spark's sink produced it (CreateTime)
    partition: int
    offset: int


def read_alerts(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[KafkaAlert]:
    """All records of `topic` from the beginning to the end offsets taken at the call (none if the
    topic does not exist yet)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             client_id="gateway-recon-reader")
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            return []
        assigned = [TopicPartition(topic, partition) for partition in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        end = {tp: offset for tp, offset in consumer.end_offsets(assigned).items() if offset > 0}
        alerts: list[KafkaAlert] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < offset for tp, offset in end.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(alerts)} alerts of {topic}, end offsets {end} not reached")
            for tp, records in consumer.poll(timeout_ms=500).items():
                for record in records:
                    if record.offset < end.get(tp, 0):
                        alerts.append(KafkaAlert(json.loads(record.value), record.key.decode(),
                                                 record.timestamp, tp.partition, record.offset))
        return alerts
    finally:
        consumer.close()

"""The reconciliation generator's records round-trip through a real `gateway serve` process:
produced by pipelines.producer (kafka-python), read back with kafka-python's consumer, byte for
byte, with their keys, event-time timestamps and per-order partitioning."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from kafka import KafkaConsumer, TopicPartition

from pipelines.flows import FUND_TOPIC, TRADE_TOPIC
from pipelines.generator import GeneratorConfig, generate
from pipelines.ground_truth import GroundTruth
from pipelines.producer import produce
from pipelines.topics import ensure_topics

PARTITIONS = 3
READ_DEADLINE_S = 30.0


def read_topic(bootstrap: str, topic: str) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        assigned = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        end = consumer.end_offsets(assigned)
        records = []
        deadline = time.monotonic() + READ_DEADLINE_S
        while any(consumer.position(tp) < end[tp] for tp in assigned):
            assert time.monotonic() < deadline, f"{topic}: read {len(records)} records, end offsets {end}"
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


def test_generated_flows_round_trip_through_the_gateway_with_kafka_python(gateway_process, tmp_path):
    bootstrap = "%s:%d" % gateway_process.kafka
    flow = generate(GeneratorConfig(orders=60, rate=1000, seed=3, discrepancy_rate=0.25,
                                    start=datetime.now(UTC) - timedelta(minutes=5)))
    ensure_topics(bootstrap, {TRADE_TOPIC: PARTITIONS, FUND_TOPIC: PARTITIONS})
    result = produce(flow, bootstrap, paced=False)
    assert result.records == len(flow.emissions)

    for topic in (TRADE_TOPIC, FUND_TOPIC):
        records = read_topic(bootstrap, topic)
        sent = [e for e in flow.emissions if e.topic == topic]
        # Everything arrives once (duplicates are sent twice on purpose), with key and timestamp.
        assert sorted((r.key, r.value, r.timestamp) for r in records) == sorted(
            (e.key, e.value, e.timestamp_ms) for e in sent)
        partitions_of_order = defaultdict(set)
        for record in records:
            partitions_of_order[record.key].add(record.partition)
        assert all(len(partitions) == 1 for partitions in partitions_of_order.values())
        assert len({r.partition for r in records}) == PARTITIONS  # keys spread over all partitions
        # Within a partition, an order's records keep their send order.
        by_order = defaultdict(list)
        for record in sorted(records, key=lambda r: (r.partition, r.offset)):
            by_order[record.key].append(record.value)
        sent_by_order = defaultdict(list)
        for emission in sent:
            sent_by_order[emission.key].append(emission.value)
        assert by_order == sent_by_order

    # Every group's acknowledgement time is recorded for the latency measurement.
    truth = GroundTruth.of(flow, result.sent_at_ms)
    assert set(truth.sent_at_ms) == {group.group_key for group in flow.groups}
    truth.save(tmp_path / "truth.json")
    assert json.loads((tmp_path / "truth.json").read_text())["records"] == {
        TRADE_TOPIC: flow.records(TRADE_TOPIC), FUND_TOPIC: flow.records(FUND_TOPIC)}

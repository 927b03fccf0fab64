"""Producing a generated flow to the gateway with kafka-python.

Records are keyed by order id (so an order's records share a partition and stay in order) and
stamped with their event time as the Kafka timestamp (so Spark's startingTimestamp means event
time). Paced, each record is sent when its event time comes, i.e. at the configured rate; unpaced,
as fast as the producer goes. The flush order is never waited for. For every order group the time
its last record was acknowledged is kept: that is when its discrepancy "was produced", the start
of the alert latency.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from kafka import KafkaProducer

from pipelines.generator import GeneratedFlow

log = logging.getLogger("pipelines.producer")


@dataclass(frozen=True, slots=True)
class ProduceResult:
    records: int
    seconds: float
    sent_at_ms: dict[str, float]  # group key "order_id|kind" -> wall clock of its last acknowledgement


def produce(flow: GeneratedFlow, bootstrap: str, paced: bool = True, linger_ms: int = 5) -> ProduceResult:
    flush_orders = {group.order_id for group in flow.groups if group.flush}
    acknowledged: dict[str, float] = {}
    lock = threading.Lock()
    failures: list[BaseException] = []

    def on_ack(group_key: str):
        def record(_metadata) -> None:
            now_ms = time.time() * 1000
            with lock:
                acknowledged[group_key] = max(now_ms, acknowledged.get(group_key, 0.0))
        return record

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=linger_ms,
                             client_id="gateway-recon-generator")
    # Paced: record k goes out send_at_s after the first; a live flow starts now, so event time
    # and send time agree.
    started = time.monotonic()
    try:
        for emission in flow.emissions:
            if paced and emission.order_id not in flush_orders:
                delay = emission.send_at_s - (time.monotonic() - started)
                if delay > 0:
                    time.sleep(delay)  # pacing the producer, not waiting for a result
            future = producer.send(emission.topic, key=emission.key, value=emission.value,
                                   timestamp_ms=emission.timestamp_ms)
            future.add_callback(on_ack(f"{emission.order_id}|{emission.kind}"))
            future.add_errback(failures.append)
        producer.flush()
    finally:
        producer.close()
    if failures:
        raise RuntimeError(f"{len(failures)} records were not acknowledged, first: {failures[0]!r}")
    seconds = time.monotonic() - started
    log.info("produced %d records in %.2f s", len(flow.emissions), seconds)
    with lock:
        return ProduceResult(records=len(flow.emissions), seconds=seconds, sent_at_ms=dict(acknowledged))

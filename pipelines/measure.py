"""Measuring the pipeline against a running gateway: throughput and alert latency.

    python -m pipelines.measure --bootstrap 127.0.0.1:9092 [--backlog-orders 20000] [--rate 50]

1. Throughput, batch: a backlog of generated orders is produced, then reconciled over exactly its
   offset range by the batch job (read from the gateway, reconcile, alerts back to the gateway,
   Parquet): records per second of the whole job, Spark's start-up excluded (it runs once first
   on a small range to warm up).
2. Throughput, streaming catch-up: the streaming job started on that same backlog, no rate
   limit: records per second until the offsets of all of it are committed.
3. Latency: the streaming job kept running while a live flow is produced at --rate orders per
   second with discrepancies; for every alert, its Kafka timestamp in recon-alerts minus the time
   the gateway acknowledged the last record of its order group. p50/p99 over all of them.
Prints one JSON object. Spark runs in this process (local[2] unless --master says otherwise).
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from kafka import KafkaConsumer, TopicPartition

from pipelines.alerts_reader import read_alerts
from pipelines.batch_job import BatchSettings, run_batch
from pipelines.flows import ALERT_TOPIC, FUND_TOPIC, TRADE_TOPIC, AlertKey
from pipelines.generator import GeneratorConfig, generate
from pipelines.ground_truth import GroundTruth, expected_alerts
from pipelines.producer import produce
from pipelines.reconcile import ReconConfig
from pipelines.sink import Targets
from pipelines.spark_io import KafkaSource, connector_jars, spark_session
from pipelines.stream_job import StreamSettings, start_stream
from pipelines.topics import ensure_topics
from pipelines.verify import alert_latency, check_alerts

log = logging.getLogger("pipelines.measure")
PARTITIONS = 3


def end_offsets(bootstrap: str) -> dict[str, dict[str, int]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        partitions = [TopicPartition(topic, p) for topic in (TRADE_TOPIC, FUND_TOPIC) for p in range(PARTITIONS)]
        offsets: dict[str, dict[str, int]] = {TRADE_TOPIC: {}, FUND_TOPIC: {}}
        for tp, offset in consumer.end_offsets(partitions).items():
            offsets[tp.topic][str(tp.partition)] = offset
        return offsets
    finally:
        consumer.close()


def _range_sources(bootstrap: str, start: dict, end: dict | None) -> tuple[KafkaSource, KafkaSource]:
    def source(topic: str) -> KafkaSource:
        return KafkaSource(bootstrap, topic, starting_offsets=json.dumps({topic: start[topic]}),
                           ending_offsets=json.dumps({topic: end[topic]}) if end else "latest")
    return source(TRADE_TOPIC), source(FUND_TOPIC)


def measure_batch(spark, bootstrap: str, work: Path, backlog_orders: int, run: str) -> dict:
    warm = generate(GeneratorConfig(orders=200, prefix=f"{run}warm-", start=datetime.now(UTC) - timedelta(hours=3)))
    before_warm = end_offsets(bootstrap)
    produce(warm, bootstrap, paced=False)
    trades, funds = _range_sources(bootstrap, before_warm, end_offsets(bootstrap))
    run_batch(spark, BatchSettings(trades, funds, Targets(output_dir=str(work / "warm"))))

    backlog = generate(GeneratorConfig(orders=backlog_orders, rate=200, prefix=f"{run}backlog-", seed=2,
                                       start=datetime.now(UTC) - timedelta(hours=2)))
    start = end_offsets(bootstrap)
    produced = produce(backlog, bootstrap, paced=False)
    end = end_offsets(bootstrap)
    trades, funds = _range_sources(bootstrap, start, end)
    began = time.monotonic()
    result = run_batch(spark, BatchSettings(trades, funds, Targets(bootstrap, ALERT_TOPIC, str(work / "batch"))))
    seconds = time.monotonic() - began
    records = result.trade_records + result.fund_records
    check = check_alerts(GroundTruth.of(backlog), _alerts_of_prefix(bootstrap, f"{run}backlog-"))
    return {"records": records, "produce_records_per_s": round(produced.records / produced.seconds),
            "batch_seconds": round(seconds, 2), "batch_records_per_s": round(records / seconds),
            "alerts_exact": check.ok, "missing": len(check.missing), "unexpected": len(check.unexpected),
            "repeated": len(check.repeated), "start": start, "end": end}


def measure_stream_catch_up(spark, bootstrap: str, work: Path, start: dict, end: dict) -> dict:
    trades, funds = _range_sources(bootstrap, start, None)
    settings = StreamSettings(trades, funds, Targets(output_dir=str(work / "catch-up")),
                              checkpoint_dir=str(work / "catch-up-checkpoint"), trigger_s=0.5)
    records = sum(end[t][p] - start[t][p] for t in end for p in end[t])
    query = start_stream(spark, settings)
    try:
        _wait_for_progress(query, lambda progress: _covers(progress, end))
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        began = datetime.fromisoformat(query.recentProgress[0]["timestamp"].replace("Z", "+00:00"))
        seconds = time.time() - began.timestamp()
        # The first micro-batch also plans and compiles the query: reported apart.
        first_ms = progress[0]["durationMs"]["triggerExecution"]
        rest_ms = sum(p["durationMs"]["triggerExecution"] for p in progress[1:])
        rest_records = sum(p["numInputRows"] for p in progress[1:])
    finally:
        query.stop()
    return {"records": records, "seconds": round(seconds, 2), "records_per_s": round(records / seconds),
            "micro_batches": len(progress), "first_batch_ms": first_ms,
            "after_first_records_per_s": round(rest_records / (rest_ms / 1000)) if rest_ms else None}


def measure_latency(spark, bootstrap: str, work: Path, rate: float, seconds: float, trigger_s: float,
                    run: str) -> dict:
    ensure_topics(bootstrap, {ALERT_TOPIC: 1})
    alerts_before = len(read_alerts(bootstrap, ALERT_TOPIC))
    trades, funds = (KafkaSource(bootstrap, topic, starting_offsets="latest") for topic in (TRADE_TOPIC, FUND_TOPIC))
    settings = StreamSettings(trades, funds, Targets(bootstrap, ALERT_TOPIC, str(work / "live")),
                              checkpoint_dir=str(work / "live-checkpoint"), trigger_s=trigger_s)
    query = start_stream(spark, settings)
    try:
        _wait_for_progress(query, lambda progress: progress["batchId"] >= 1)  # started and warm
        flow = generate(GeneratorConfig(orders=round(rate * seconds), rate=rate, prefix=f"{run}live-", seed=3,
                                        discrepancy_rate=0.05, flush_after_s=30.0, start=datetime.now(UTC)))
        produced = produce(flow, bootstrap, paced=True)
        truth = GroundTruth.of(flow, produced.sent_at_ms)
        expected = expected_alerts(flow.groups)
        deadline = time.monotonic() + 300
        while True:
            live = [a for a in read_alerts(bootstrap, ALERT_TOPIC)[alerts_before:]
                    if a.alert["order_id"].startswith(f"{run}live-")]
            if {AlertKey.of(a.alert) for a in live} >= expected or time.monotonic() > deadline:
                break
            time.sleep(1.0)  # waiting for another component's output, with a deadline
        durations = [p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    latency = alert_latency(truth, live)
    check = check_alerts(truth, [a.alert for a in live])
    return {"orders_per_s": rate, "records": produced.records,
            "records_per_s": round(produced.records / produced.seconds),
            "alerts": len(live), "alerts_exact": check.ok, "missing": len(check.missing),
            "unexpected": len(check.unexpected), "repeated": len(check.repeated),
            "latency_p50_ms": latency.p50_ms if latency else None,
            "latency_p99_ms": latency.p99_ms if latency else None,
            "latency_max_ms": latency.max_ms if latency else None,
            "micro_batch_ms_median": sorted(durations)[len(durations) // 2] if durations else None}


def _alerts_of_prefix(bootstrap: str, prefix: str) -> list[dict]:
    return [a.alert for a in read_alerts(bootstrap, ALERT_TOPIC) if a.alert["order_id"].startswith(prefix)]


def _covers(progress: dict, end: dict) -> bool:
    reached: dict[str, dict[str, int]] = {}
    for source in progress["sources"]:
        offsets = source["endOffset"]
        for topic, partitions in (json.loads(offsets) if isinstance(offsets, str) else offsets).items():
            reached.setdefault(topic, {}).update(partitions)
    return all(reached.get(t, {}).get(p, 0) >= o for t in end for p, o in end[t].items())


def _wait_for_progress(query, condition, deadline_s: float = 600.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not any(condition(progress) for progress in query.recentProgress):
        if query.exception() is not None:
            raise RuntimeError(f"streaming query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError("streaming query made no such progress in time")
        time.sleep(0.2)  # polling the query's progress, with a deadline


def main(
    bootstrap: Annotated[str, typer.Option(help="The gateway's Kafka address, HOST:PORT.")],
    backlog_orders: Annotated[int, typer.Option(help="Orders in the backlog for the throughput runs.")] = 20_000,
    rate: Annotated[float, typer.Option(help="Orders per second of the live flow (latency).")] = 50.0,
    live_seconds: Annotated[float, typer.Option(help="How long the live flow runs.")] = 60.0,
    trigger: Annotated[float, typer.Option(help="Micro-batch interval of the live stream, seconds.")] = 0.5,
    jars: Annotated[Path | None, typer.Option(help="Spark's Kafka connector jars.")] = None,
    master: Annotated[str, typer.Option()] = "local[2]",
) -> None:
    logging.basicConfig(level=logging.WARNING)
    ensure_topics(bootstrap, {TRADE_TOPIC: PARTITIONS, FUND_TOPIC: PARTITIONS, ALERT_TOPIC: 1})
    spark = spark_session(app_name="gateway-recon-measure", master=master, jars=connector_jars(jars))
    with tempfile.TemporaryDirectory(prefix="recon-measure-") as directory:
        work = Path(directory)
        run = f"r{int(time.time())}-"  # ids unique to this run: the topics may hold earlier runs
        batch = measure_batch(spark, bootstrap, work, backlog_orders, run)
        catch_up = measure_stream_catch_up(spark, bootstrap, work, batch.pop("start"), batch.pop("end"))
        latency = measure_latency(spark, bootstrap, work, rate, live_seconds, trigger, run)
    spark.stop()
    typer.echo(json.dumps({"master": master, "batch": batch, "stream_catch_up": catch_up, "live": latency,
                           "recon": ReconConfig().__repr__()}, indent=1))


if __name__ == "__main__":
    typer.run(main)

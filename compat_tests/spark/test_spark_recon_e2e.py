"""End to end: `gateway-recon` with Spark's real Kafka source and sink against a real `gateway
serve` process, compared exactly with the generator's ground truth.

Spark's Kafka connector jars are not in the PySpark wheel and Maven Central is out of reach here,
so these tests take them from the directory in SPARK_KAFKA_JARS, else from ../shared/spark-jars/jars
beside the checkout (as CI has it), and are skipped, saying so, when neither is there. Spark runs in `gateway-recon` subprocesses, exactly as
a user runs it: the streaming job is stopped with SIGTERM and restarted on the same checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from pipelines.alerts_reader import read_alerts
from pipelines.flows import ALERT_TOPIC, FUND_TOPIC, TRADE_TOPIC, AlertKey
from pipelines.generator import GeneratedFlow, GeneratorConfig, generate
from pipelines.ground_truth import GroundTruth, expected_alerts, expected_totals
from pipelines.producer import produce
from pipelines.reconcile import ReconConfig
from pipelines.spark_io import default_jars_directory
from pipelines.topics import ensure_topics

JARS = default_jars_directory() or ""
SKIP_REASON = ("SPARK_KAFKA_JARS is unset and ../shared/spark-jars/jars is absent: Spark's Kafka connector jars "
               "are needed for the end-to-end tests (assemble them with ../shared/spark-jars/get_jars.sh)")
PARTITIONS = 3
MAX_OFFSETS_PER_TRIGGER = 150
# Only an upper bound: on a quiet machine each step takes seconds, but Spark's start and first plan
# alone took over two minutes on a CI machine shared by many jobs.
SETTLE_DEADLINE_S = 420.0
STOP_DEADLINE_S = 60.0
RECON = ReconConfig()
# Spark's start and its first stateful micro-batch take minutes on a machine shared by many jobs
# (185 s for batch 0 was seen); the suite's 300 s per test is too short for these.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(autouse=True)
def connector_jars_present():
    if not JARS:
        warnings.warn(SKIP_REASON, stacklevel=1)
        pytest.skip(SKIP_REASON)


def bootstrap_of(gateway) -> str:
    return "%s:%d" % gateway.kafka


def flow_of(prefix: str, start: datetime, orders: int = 60, rate: float = 40, **options) -> GeneratedFlow:
    return generate(GeneratorConfig(orders=orders, rate=rate, seed=zlib.crc32(prefix.encode()), discrepancy_rate=0.25,
                                    prefix=prefix, start=start, **options))


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


def recon(*args: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "SPARK_KAFKA_JARS": JARS}
    with log.open("a") as sink:
        return subprocess.Popen([sys.executable, "-m", "pipelines", *args], stdout=sink, stderr=subprocess.STDOUT,
                                env=env, cwd=log.parent)


def stop(process: subprocess.Popen, log: Path) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_DEADLINE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"gateway-recon did not stop on SIGTERM:\n{log.read_text()[-5000:]}")


def offset_log(checkpoint: Path) -> list[dict[str, dict[str, int]]]:
    """Spark's offset log of committed micro-batches, in batch order: per batch, the end offsets of
    every topic (lines 3+ of offsets/<batch> are the sources' offsets, as JSON)."""
    query = checkpoint / "query"
    committed = sorted(int(p.name) for p in (query / "commits").glob("[0-9]*")) if (query / "commits").is_dir() else []
    log = []
    for batch in committed:
        offsets: dict[str, dict[str, int]] = {}
        for line in (query / "offsets" / str(batch)).read_text().splitlines()[2:]:
            for topic, partitions in json.loads(line).items():
                offsets.setdefault(topic, {}).update(partitions)
        log.append(offsets)
    return log


def poll(condition, what: str, process: subprocess.Popen, log: Path, deadline_s: float = SETTLE_DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while True:
        result = condition()
        if result:
            return result
        assert process.poll() is None, f"gateway-recon exited with {process.returncode}:\n{log.read_text()[-5000:]}"
        assert time.monotonic() < deadline, f"{what} not within {deadline_s} s:\n{log.read_text()[-5000:]}"
        time.sleep(0.5)  # polling another process's progress, with a deadline


def covers(reached: dict[str, dict[str, int]], target: dict[str, dict[str, int]]) -> bool:
    return all(reached.get(topic, {}).get(p, 0) >= offset
               for topic, partitions in target.items() for p, offset in partitions.items())


def parquet_outputs(output: Path):
    """Alerts and totals of the Parquet tables, or None while a batch is being (re)written."""
    from pipelines.spark_io import spark_session
    from pipelines.verify import read_parquet_outputs

    try:
        return read_parquet_outputs(spark_session(master="local[1]"), str(output))
    except Exception:  # noqa: BLE001 - a concurrent overwrite: read again on the next poll
        return None


def test_stream_with_kafka_source_and_sink_restarted_from_checkpoint_is_exact(gateway_process, tmp_path):
    bootstrap = bootstrap_of(gateway_process)
    ensure_topics(bootstrap, {TRADE_TOPIC: PARTITIONS, FUND_TOPIC: PARTITIONS})
    now = datetime.now(UTC).replace(microsecond=0)
    # Older traffic, full of discrepancies, that startingTimestamp must skip.
    produce(flow_of("old-", now - timedelta(hours=2), orders=20, flush_after_s=0), bootstrap, paced=False)
    # 30 s of event time: the first half moves the watermark far enough for some alerts to be
    # final before the restart, and leaves others in the state.
    flow = flow_of("", now, orders=120, rate=4)
    half = len(flow.emissions) // 2
    first, second = (GeneratedFlow(flow.config, flow.start, part, flow.groups)
                     for part in (flow.emissions[:half], flow.emissions[half:]))
    sent_first = produce(first, bootstrap, paced=False)
    part_one_end = end_offsets(bootstrap)

    checkpoint, output, log = tmp_path / "checkpoint", tmp_path / "out", tmp_path / "recon-stream.log"
    command = ["stream", "--bootstrap", bootstrap, "--checkpoint", str(checkpoint), "--output", str(output),
               "--pattern", "--trade-topic", "trade-flo[w]", "--fund-topic", "fund-flo[w]",
               "--starting-timestamp", str(int(flow.start.timestamp() * 1000)),
               "--max-offsets-per-trigger", str(MAX_OFFSETS_PER_TRIGGER), "--min-partitions", "4",
               "--fail-on-data-loss", "--trigger", "0.5"]
    job = recon(*command, log=log)
    try:
        # Committed, and then one more (no-data) batch, which emits what the new watermark closed.
        poll(lambda: len(offset_log(checkpoint)) > 1 and covers(offset_log(checkpoint)[-2], part_one_end),
             "first half committed", job, log)
    finally:
        stop(job, log)
    alerts_before_restart = read_alerts(bootstrap, ALERT_TOPIC)
    assert alerts_before_restart, "nothing was final before the restart: the test would not see repeats"
    assert {AlertKey.of(a.alert) for a in alerts_before_restart} < expected_alerts(flow.groups)

    sent_second = produce(second, bootstrap, paced=False)
    expected = expected_alerts(flow.groups)
    totals_expected = expected_totals(flow.groups, RECON.session_gap_s, RECON.totals_window_s, include_flush=False)
    job = recon(*command, log=log)
    try:
        poll(lambda: len(read_alerts(bootstrap, ALERT_TOPIC)) >= len(expected), "every alert in recon-alerts", job, log)
        parquet = poll(lambda: (lambda out: out if out and len(out[1]) >= len(totals_expected) else None)(
            parquet_outputs(output)), "every window total in Parquet", job, log)
    finally:
        stop(job, log)

    kafka_alerts = read_alerts(bootstrap, ALERT_TOPIC)
    assert sorted(AlertKey.of(a.alert) for a in kafka_alerts) == sorted(expected)  # once each, nothing else
    assert all(a.key == a.alert["alert_id"] for a in kafka_alerts)
    parquet_alerts, totals = parquet_outputs(output) or parquet
    assert sorted(AlertKey.of(a) for a in parquet_alerts) == sorted(expected)
    assert totals == totals_expected
    # maxOffsetsPerTrigger held: no micro-batch read more than that per topic.
    batches = offset_log(checkpoint)
    for before, after in zip(batches, batches[1:]):
        for topic in (TRADE_TOPIC, FUND_TOPIC):
            read = sum(after[topic][p] - before.get(topic, {}).get(p, 0) for p in after.get(topic, {}))
            assert read <= MAX_OFFSETS_PER_TRIGGER, (topic, before, after)
    GroundTruth.of(flow, {**sent_first.sent_at_ms, **sent_second.sent_at_ms}).save(tmp_path / "truth.json")


def test_batch_over_explicit_offset_ranges_reconciles_exactly_that_range(gateway_process, tmp_path):
    bootstrap = bootstrap_of(gateway_process)
    ensure_topics(bootstrap, {TRADE_TOPIC: PARTITIONS, FUND_TOPIC: PARTITIONS})
    now = datetime.now(UTC).replace(microsecond=0)
    produce(flow_of("a-", now - timedelta(minutes=10), orders=30), bootstrap, paced=False)
    start = end_offsets(bootstrap)
    flow = flow_of("b-", now - timedelta(minutes=5))
    result = produce(flow, bootstrap, paced=False)
    end = end_offsets(bootstrap)
    produce(flow_of("c-", now, orders=30), bootstrap, paced=False)
    truth_path = tmp_path / "truth.json"
    GroundTruth.of(flow, result.sent_at_ms).save(truth_path)

    output, log = tmp_path / "eod", tmp_path / "recon-batch.log"
    job = recon("batch", "--bootstrap", bootstrap, "--output", str(output), "--min-partitions", "4",
                "--starting-offsets", json.dumps(start), "--ending-offsets", json.dumps(end), log=log)
    assert job.wait(timeout=SETTLE_DEADLINE_S) == 0, log.read_text()[-5000:]
    summary = json.loads(log.read_text().strip().splitlines()[-1])
    assert summary["trade_records"] + summary["fund_records"] == len(flow.emissions)

    expected = expected_alerts(flow.groups)
    kafka_alerts = read_alerts(bootstrap, ALERT_TOPIC)
    assert sorted(AlertKey.of(a.alert) for a in kafka_alerts) == sorted(expected)
    parquet_alerts, totals = parquet_outputs(output)
    assert sorted(AlertKey.of(a) for a in parquet_alerts) == sorted(expected)
    assert totals == expected_totals(flow.groups, RECON.session_gap_s, RECON.totals_window_s, include_flush=True)

    verify_log = tmp_path / "recon-verify.log"
    verify = recon("verify", "--bootstrap", bootstrap, "--ground-truth", str(truth_path), "--output", str(output),
                   "--mode", "batch", log=verify_log)
    assert verify.wait(timeout=SETTLE_DEADLINE_S) == 0, verify_log.read_text()[-5000:]
    assert "kafka alerts: ok" in verify_log.read_text()


def run_recon(*args: str, log: Path, timeout_s: float = SETTLE_DEADLINE_S) -> tuple[int, str]:
    """One `gateway-recon` command to its end: its exit code and what it printed."""
    start = log.stat().st_size if log.exists() else 0
    process = recon(*args, log=log)
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"gateway-recon {args[0]} did not finish in {timeout_s} s:\n{log.read_text()[-5000:]}")
    return code, log.read_text()[start:]


def test_the_readme_worked_example_runs_as_written(gateway_process, tmp_path):
    """README's order, on a fresh gateway: the stream starts before any topic exists (it creates
    them), the generator writes, verify checks the stream's outputs, then the end-of-day batch over
    the logs' ends, checked with --mode batch; a range past the end is one line, in seconds."""
    bootstrap = bootstrap_of(gateway_process)
    truth_path, checkpoint, output, eod = (tmp_path / name for name in ("gt.json", "ck", "out", "eod"))
    stream_log, log = tmp_path / "stream.log", tmp_path / "recon.log"

    job = recon("stream", "--bootstrap", bootstrap, "--checkpoint", str(checkpoint), "--output", str(output),
                log=stream_log)
    try:
        poll(lambda: "batch 0: records in" in stream_log.read_text(), "the stream's first progress line",
             job, stream_log)
        code, printed = run_recon("generate", "--bootstrap", bootstrap, "--orders", "60", "--rate", "40", "--burst",
                                  "--flush-after", "20", "--ground-truth", str(truth_path), log=log)
        assert code == 0, printed
        expected = expected_alerts(GroundTruth.load(truth_path).groups)
        poll(lambda: len(read_alerts(bootstrap, ALERT_TOPIC)) >= len(expected), "every alert", job, stream_log)
        poll(lambda: re.search(r"alerts out: [1-9]", stream_log.read_text()), "a progress line with alerts out",
             job, stream_log)
    finally:
        stop(job, stream_log)
    assert "watermark: 20" in stream_log.read_text()   # an event-time watermark was reported

    code, printed = run_recon("verify", "--bootstrap", bootstrap, "--ground-truth", str(truth_path), "--output",
                              str(output), log=log)
    assert code == 0 and "window totals: ok" in printed, printed

    code, printed = run_recon("offsets", "--bootstrap", bootstrap, log=log)
    assert code == 0 and json.loads(printed.strip().splitlines()[-1]) == end_offsets(bootstrap), printed

    past_the_end = json.dumps({TRADE_TOPIC: {str(p): 10**6 for p in range(PARTITIONS)},
                               FUND_TOPIC: {str(p): 10**6 for p in range(PARTITIONS)}})
    started = time.monotonic()
    code, printed = run_recon("batch", "--bootstrap", bootstrap, "--output", str(eod), "--no-send-alerts",
                              "--ending-offsets", past_the_end, log=log)
    assert code == 2 and printed.startswith("gateway-recon: --ending-offsets past the end"), printed
    assert len(printed.strip().splitlines()) == 1 and time.monotonic() - started < 60

    code, printed = run_recon("batch", "--bootstrap", bootstrap, "--output", str(eod), "--no-send-alerts",
                              "--starting-offsets", "earliest", "--ending-offsets", "latest", log=log)
    assert code == 0, printed
    code, printed = run_recon("verify", "--bootstrap", bootstrap, "--ground-truth", str(truth_path), "--output",
                              str(eod), "--mode", "batch", log=log)
    assert code == 0 and "window totals: ok" in printed, printed
    # The batch closes the flushing order's window too: checked as a stream, that one window differs,
    # and the difference is spelled out.
    code, printed = run_recon("verify", "--bootstrap", bootstrap, "--ground-truth", str(truth_path), "--output",
                              str(eod), log=log)
    assert code == 1 and "window totals: MISMATCH" in printed, printed
    assert "  1 window totals differ (got / expected):" in printed and " / none" in printed, printed

"""The reconciliation as a streaming query (watermarks, stream-stream joins, append output, the
idempotent per-batch writer), fed from files in the Kafka source's shape instead of Kafka, and
restarted from its checkpoint halfway: the Parquet outputs end up exactly the ground truth's."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from pipelines.flows import FUND_TOPIC, TRADE_TOPIC, AlertKey
from pipelines.generator import GeneratorConfig, generate
from pipelines.ground_truth import expected_alerts, expected_totals
from pipelines.reconcile import ReconConfig, reconcile
from pipelines.sink import BatchWriter, Targets
from pipelines.verify import read_parquet_outputs

START = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
FLOW = generate(GeneratorConfig(orders=40, rate=20, seed=5, discrepancy_rate=0.25, start=START))
RECON = ReconConfig()
KAFKA_SHAPE_DDL = "key STRING, value STRING, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP"
SETTLE_DEADLINE_S = 90.0


def write_part(root, name: str, rows: dict[str, list[dict]]) -> None:
    for topic, records in rows.items():
        directory = root / topic
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in records))


def start_query(spark, source_root, output_dir, checkpoint):
    def stream(topic: str):
        return (spark.readStream.schema(KAFKA_SHAPE_DDL).option("maxFilesPerTrigger", 1)
                .json(str(source_root / topic))
                .selectExpr("CAST(key AS BINARY) AS key", "CAST(value AS BINARY) AS value",
                            "topic", "partition", "offset", "timestamp"))
    writer = BatchWriter(spark, Targets(output_dir=str(output_dir)), marker_dir=str(checkpoint / "kafka-sink"))
    return (reconcile(stream(TRADE_TOPIC), stream(FUND_TOPIC), RECON).writeStream.outputMode("append")
            .foreachBatch(writer).option("checkpointLocation", str(checkpoint / "query"))
            .trigger(processingTime="100 milliseconds").start())


def test_stream_restarted_from_its_checkpoint_loses_and_repeats_nothing(spark, kafka_rows, tmp_path):
    source, output, checkpoint = tmp_path / "source", tmp_path / "out", tmp_path / "checkpoint"
    half = len(FLOW.emissions) // 2
    offsets: dict = {}
    write_part(source, "part-1", kafka_rows(FLOW.emissions[:half], partitions=2, first_offsets=offsets))

    query = start_query(spark, source, output, checkpoint)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    expected = expected_alerts(FLOW.groups)
    first_alerts, _ = read_parquet_outputs(spark, str(output))
    # The second half is needed to close the first half's last groups: they sit in the state.
    assert {AlertKey.of(a) for a in first_alerts} < expected

    write_part(source, "part-2", kafka_rows(FLOW.emissions[half:], partitions=2, first_offsets=offsets))
    query = start_query(spark, source, output, checkpoint)
    totals_expected = expected_totals(FLOW.groups, RECON.session_gap_s, RECON.totals_window_s, include_flush=False)
    deadline = time.monotonic() + SETTLE_DEADLINE_S
    try:
        while True:
            query.processAllAvailable()
            alerts, totals = read_parquet_outputs(spark, str(output))
            if len(alerts) >= len(expected) and len(totals) >= len(totals_expected):
                break
            assert time.monotonic() < deadline, f"{len(alerts)}/{len(expected)} alerts after {SETTLE_DEADLINE_S} s"
    finally:
        query.stop()

    assert sorted(AlertKey.of(a) for a in alerts) == sorted(expected)  # each once, nothing else
    assert totals == totals_expected

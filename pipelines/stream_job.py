"""The streaming job: both flows from the gateway through Spark's Kafka source, reconciled
continuously, alerts to `recon-alerts` through Spark's Kafka sink and both outputs to Parquet.

One streaming query, one checkpoint: the Kafka offsets of both sources, the state of the joins
and aggregations, and the commit log live under `<checkpoint>/query`; the Kafka sink's markers
under `<checkpoint>/kafka-sink` (see pipelines.sink). Restarted with the same checkpoint, the
query continues from the last committed micro-batch (re-running the one in flight, if any), so
alerts are neither lost nor repeated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipelines.reconcile import ReconConfig, reconcile
from pipelines.sink import BatchWriter, Targets
from pipelines.spark_io import KafkaSource

QUERY_NAME = "recon"


@dataclass(frozen=True, slots=True)
class StreamSettings:
    trades: KafkaSource
    funds: KafkaSource
    targets: Targets
    checkpoint_dir: str
    recon: ReconConfig = ReconConfig()
    trigger_s: float = 1.0


def batch_writer(spark: SparkSession, settings: StreamSettings) -> BatchWriter:
    return BatchWriter(spark, settings.targets, marker_dir=f"{settings.checkpoint_dir}/kafka-sink")


def start_stream(spark: SparkSession, settings: StreamSettings, writer: BatchWriter | None = None) -> StreamingQuery:
    output = reconcile(settings.trades.read_stream(spark), settings.funds.read_stream(spark), settings.recon)
    writer = writer or batch_writer(spark, settings)
    return (output.writeStream
            .queryName(QUERY_NAME)
            .outputMode("append")
            .foreachBatch(writer)
            .option("checkpointLocation", f"{settings.checkpoint_dir}/query")
            .trigger(processingTime=f"{round(settings.trigger_s * 1000)} milliseconds")
            .start())


def progress_line(progress: dict, alerts: int) -> str:
    """One micro-batch as Spark reports it (StreamingQueryProgress as a dict): records read per
    topic (from the batch's offsets: Spark's numInputRows counts a source once per branch of the
    plan that reads it), alerts written, the watermark."""
    sources = ", ".join(f"{topic} {count}" for source in progress.get("sources", [])
                        for topic, count in _records_read(source).items())
    watermark = progress.get("eventTime", {}).get("watermark", _NO_WATERMARK)
    return (f"batch {progress['batchId']}: records in: {sources or 'none'}; alerts out: {alerts}; watermark: "
            f"{'none yet' if watermark == _NO_WATERMARK else watermark}; "
            f"{progress.get('durationMs', {}).get('triggerExecution', 0)} ms")


_NO_WATERMARK = "1970-01-01T00:00:00.000Z"


def _records_read(source: dict) -> dict[str, int]:
    """Offsets consumed per topic by one Kafka source in one batch (0 before a partition's first)."""
    start, end = (json.loads(o) if isinstance(o, str) else (o or {})
                  for o in (source.get("startOffset"), source.get("endOffset")))
    return {topic: sum(offset - start.get(topic, {}).get(partition, 0) for partition, offset in partitions.items())
            for topic, partitions in end.items()}

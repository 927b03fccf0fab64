"""The streaming job: both flows from the gateway through Spark's Kafka source, reconciled
continuously, alerts to `recon-alerts` through Spark's Kafka sink and both outputs to Parquet.

One streaming query, one checkpoint: the Kafka offsets of both sources, the state of the joins
and aggregations, and the commit log live under `<checkpoint>/query`; the Kafka sink's markers
under `<checkpoint>/kafka-sink` (see pipelines.sink). Restarted with the same checkpoint, the
query continues from the last committed micro-batch (re-running the one in flight, if any), so
alerts are neither lost nor repeated.
"""

from __future__ import annotations

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


def start_stream(spark: SparkSession, settings: StreamSettings) -> StreamingQuery:
    output = reconcile(settings.trades.read_stream(spark), settings.funds.read_stream(spark), settings.recon)
    writer = BatchWriter(spark, settings.targets, marker_dir=f"{settings.checkpoint_dir}/kafka-sink")
    return (output.writeStream
            .queryName(QUERY_NAME)
            .outputMode("append")
            .foreachBatch(writer)
            .option("checkpointLocation", f"{settings.checkpoint_dir}/query")
            .trigger(processingTime=f"{round(settings.trigger_s * 1000)} milliseconds")
            .start())

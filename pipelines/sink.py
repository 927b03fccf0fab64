"""Writing one micro-batch of the reconciliation's output, so that a re-run writes nothing twice.

Spark's streaming contract: after a crash, the last micro-batch that was planned but not committed
is run again with the same batch id, the same offsets and the same state, so it computes the same
rows. This writer turns that into "no alert lost, none repeated":

- Parquet: each batch goes to its own directory `<output>/alerts/batch_id=N` (and
  `<output>/window_totals/batch_id=N`), written in overwrite mode, so a re-run replaces its own
  earlier, possibly partial, attempt and nothing else. Readers see one table partitioned by batch_id.
- Kafka (`recon-alerts`, through Spark's Kafka sink, format("kafka")): the batch's alerts are
  written, then a marker `<markers>/N` is created next to the checkpoint; a re-run of batch N
  whose marker exists skips the write. Only a crash after the write and before the marker repeats
  a batch's alerts, and then with the same Kafka keys: every alert is keyed by its deterministic
  alert_id, so consumers (and a compacted topic) keep one per key. Kafka transactions would close
  that window, but the gateway does not serve them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.reconcile import ALERT_COLUMNS, alerts_of, totals_of


@dataclass(frozen=True, slots=True)
class Targets:
    """Where the outputs go; a None target is not written."""

    bootstrap: str | None = None
    alert_topic: str | None = None
    output_dir: str | None = None  # Parquet root: alerts/ and window_totals/ under it
    kafka_options: dict[str, str] = field(default_factory=dict)


def alerts_as_kafka_records(alerts: DataFrame) -> DataFrame:
    """key = alert_id, value = the alert as JSON (timestamps in ISO 8601, UTC session)."""
    return alerts.select(F.col("alert_id").alias("key"),
                         F.to_json(F.struct(*ALERT_COLUMNS)).alias("value"))


def write_alerts_to_kafka(alerts: DataFrame, targets: Targets) -> None:
    (alerts_as_kafka_records(alerts).write.format("kafka")
     .option("kafka.bootstrap.servers", targets.bootstrap)
     .option("topic", targets.alert_topic)
     .options(**targets.kafka_options)
     .save())


class BatchWriter:
    """The foreachBatch function of the streaming query."""

    def __init__(self, spark: SparkSession, targets: Targets, marker_dir: str) -> None:
        self._spark = spark
        self._targets = targets
        self._markers = _Markers(spark, marker_dir)
        self.alerts_by_batch: dict[int, int] = {}   # batch id -> alerts it produced (progress lines)

    def __call__(self, output: DataFrame, batch_id: int) -> None:
        output = output.persist()
        try:
            alerts, totals = alerts_of(output), totals_of(output)
            count = self.alerts_by_batch[batch_id] = alerts.count()
            if self._targets.output_dir:
                partition = f"batch_id={batch_id}"
                _write_parquet(alerts, f"{self._targets.output_dir}/alerts/{partition}")
                _write_parquet(totals, f"{self._targets.output_dir}/window_totals/{partition}")
            if self._targets.alert_topic and not self._markers.done(batch_id):
                if count:
                    write_alerts_to_kafka(alerts, self._targets)
                self._markers.mark(batch_id)
        finally:
            output.unpersist()


def _write_parquet(frame: DataFrame, path: str) -> None:
    # An empty batch leaves no directory: a re-run of it has nothing to replace either.
    if not frame.isEmpty():
        frame.write.mode("overwrite").parquet(path)


class _Markers:
    """Empty files named by batch id, on whatever file system the checkpoint is (via Hadoop)."""

    def __init__(self, spark: SparkSession, directory: str) -> None:
        jvm = spark.sparkContext._jvm
        self._path_class = jvm.org.apache.hadoop.fs.Path
        self._directory = directory
        self._fs = self._path_class(directory).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def _path(self, batch_id: int):
        return self._path_class(f"{self._directory}/{batch_id}")

    def done(self, batch_id: int) -> bool:
        return bool(self._fs.exists(self._path(batch_id)))

    def mark(self, batch_id: int) -> None:
        self._fs.create(self._path(batch_id), True).close()

"""The SparkSession and the options of Spark's Kafka source and sink, in one place.

Spark's Kafka connector is not part of the PySpark wheel: its jars (spark-sql-kafka-0-10,
spark-token-provider-kafka-0-10, kafka-clients, commons-pool2) come from a directory, by default
the one named by the environment variable SPARK_KAFKA_JARS. Sessions are local (`local[N]`) unless
a master is given, in UTC, with few shuffle partitions (the state is small) and no UI.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

JARS_ENV = "SPARK_KAFKA_JARS"
FETCH_MAX_WAIT_MS = 20
CONNECTOR_JAR_PREFIXES = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")


class MissingConnectorJars(RuntimeError):
    """Spark's Kafka connector jars are not where they were looked for."""


def connector_jars(directory: str | Path | None = None) -> list[str]:
    """The four connector jars in `directory` (default: $SPARK_KAFKA_JARS), or MissingConnectorJars."""
    directory = directory or os.environ.get(JARS_ENV)
    if not directory:
        raise MissingConnectorJars(f"Spark's Kafka connector jars: set {JARS_ENV} to their directory or pass --jars")
    jars = sorted(str(path) for path in Path(directory).glob("*.jar"))
    missing = [prefix for prefix in CONNECTOR_JAR_PREFIXES
               if not any(Path(jar).name.startswith(prefix) for jar in jars)]
    if missing:
        raise MissingConnectorJars(f"no {', '.join(missing)} jar in {directory}")
    return jars


def spark_session(app_name: str = "gateway-recon", master: str = "local[2]", jars: list[str] | None = None,
                  shuffle_partitions: int = 2, extra: Mapping[str, str] | None = None) -> SparkSession:
    builder = (SparkSession.builder.appName(app_name).master(master)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               # Stateful streaming: a small state store per shuffle partition, kept on local disk.
               .config("spark.sql.streaming.stateStore.providerClass",
                       "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider")
               # Every state file is written then renamed; Hadoop's FileContext rename on a local
               # disk forks `readlink` per file when native Hadoop is absent (as in the PySpark
               # wheel). The FileSystem-based manager renames without forking.
               .config("spark.sql.streaming.checkpointFileManagerClass",
                       "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"))
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


@dataclass(frozen=True, slots=True)
class KafkaSource:
    """Where and how one flow is read: a topic (`subscribe`) or a regex (`subscribePattern`), and
    the options of Spark's Kafka source that the gateway serves."""

    bootstrap: str
    topic: str
    pattern: bool = False
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    starting_timestamp_ms: int | None = None  # streams: where a new query starts (else startingOffsets)
    starting_offsets: str = "earliest"  # "earliest", "latest" or the JSON per partition
    ending_offsets: str = "latest"  # batch only
    extra: Mapping[str, str] = field(default_factory=dict)  # further kafka.* or source options

    def options(self, streaming: bool) -> dict[str, str]:
        options = {
            "kafka.bootstrap.servers": self.bootstrap,
            "subscribePattern" if self.pattern else "subscribe": self.topic,
            "failOnDataLoss": str(self.fail_on_data_loss).lower(),
            "includeHeaders": "false",
            # After each poll the Java consumer sends the next fetch at once; at the end of the log
            # the broker holds it for fetch.max.wait.ms, and the ListOffsets Spark sends right
            # after every read queues behind it on the connection (a broker answers requests of
            # one connection in order; Kafka does the same). Kafka's default of 500 ms idles each
            # read task that long; a short wait keeps micro-batches short.
            "kafka.fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
        }
        if self.starting_timestamp_ms is not None:
            options["startingTimestamp"] = str(self.starting_timestamp_ms)
        else:
            options["startingOffsets"] = self.starting_offsets
        if self.min_partitions:
            options["minPartitions"] = str(self.min_partitions)
        if streaming and self.max_offsets_per_trigger:
            options["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        if not streaming:
            options["endingOffsets"] = self.ending_offsets
        options.update(self.extra)
        return options

    def read_stream(self, spark: SparkSession) -> DataFrame:
        return spark.readStream.format("kafka").options(**self.options(streaming=True)).load()

    def read_batch(self, spark: SparkSession) -> DataFrame:
        return spark.read.format("kafka").options(**self.options(streaming=False)).load()


def offsets_for_topic(offsets: str, topic: str) -> str:
    """From a startingOffsets/endingOffsets JSON naming several topics, the part for `topic` (Spark
    wants exactly the subscribed topics); "earliest"/"latest" pass through."""
    if offsets in ("earliest", "latest"):
        return offsets
    by_topic = json.loads(offsets)
    if topic not in by_topic:
        raise ValueError(f"offsets JSON names no partitions of {topic!r}: {offsets}")
    return json.dumps({topic: by_topic[topic]})

"""The SparkSession and the options of Spark's Kafka source and sink, in one place.

Spark's Kafka connector is not part of the PySpark wheel. Its jars (spark-sql-kafka-0-10,
spark-token-provider-kafka-0-10, kafka-clients, commons-pool2) come either from a directory (offline:
--jars, or the environment variable SPARK_KAFKA_JARS) or from Maven Central, which Spark downloads
itself with spark.jars.packages (on a connected machine: --packages). Sessions are local
(`local[N]`) unless a master is given, in UTC, with few shuffle partitions (the state is small) and
no UI.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from pipelines.problems import UsageProblem

JARS_ENV = "SPARK_KAFKA_JARS"
CONNECTOR_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.2"   # with its dependencies
FETCH_MAX_WAIT_MS = 20
# How long a batch read waits for records it was told exist (Spark's default: 120 s, then "Some
# data may have been lost"); the ranges are checked first (check_ranges), so this only bounds a stall.
BATCH_POLL_TIMEOUT_MS = 10_000
CONNECTOR_JAR_PREFIXES = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")


# Beside a checkout of this project, the shared directory holds the jars (../shared/spark-jars/jars):
# used when neither --jars nor SPARK_KAFKA_JARS names a directory.
SHARED_JARS = Path(__file__).resolve().parents[1].parent / "shared" / "spark-jars" / "jars"


def default_jars_directory() -> str | None:
    """$SPARK_KAFKA_JARS, else the shared jar directory beside the checkout when it exists."""
    return os.environ.get(JARS_ENV) or (str(SHARED_JARS) if SHARED_JARS.is_dir() else None)


class MissingConnectorJars(UsageProblem):
    """Spark's Kafka connector jars are not where they were looked for."""


def connector_jars(directory: str | Path | None = None) -> list[str]:
    """The four connector jars in `directory` (default: $SPARK_KAFKA_JARS, else ../shared/spark-jars/jars
    beside the checkout), or MissingConnectorJars."""
    directory = directory or default_jars_directory()
    if not directory:
        raise MissingConnectorJars(f"Spark's Kafka connector jars are needed: --jars DIR or {JARS_ENV}=DIR (a "
                                   f"directory holding them), or --packages (Spark downloads {CONNECTOR_PACKAGE})")
    if not Path(directory).is_dir():
        raise MissingConnectorJars(f"Spark's Kafka connector jars: {directory} is not a directory")
    jars = sorted(str(path) for path in Path(directory).glob("*.jar"))
    missing = [prefix for prefix in CONNECTOR_JAR_PREFIXES
               if not any(Path(jar).name.startswith(prefix) for jar in jars)]
    if missing:
        raise MissingConnectorJars(f"Spark's Kafka connector: no {', '.join(missing)} jar in {directory}")
    return jars


def connector_config(directory: str | Path | None = None, packages: bool = False) -> dict[str, str]:
    """The Spark settings that bring the connector: Maven coordinates, or the jars of a directory."""
    if packages:
        return {"spark.jars.packages": CONNECTOR_PACKAGE}
    return {"spark.jars": ",".join(connector_jars(directory))}


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
            options["kafkaConsumer.pollTimeoutMs"] = str(BATCH_POLL_TIMEOUT_MS)
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
    try:
        by_topic = json.loads(offsets)
    except json.JSONDecodeError as exc:
        raise UsageProblem(f"offsets are earliest, latest or JSON {{topic: {{partition: offset}}}}; "
                           f"{offsets!r}: {exc}") from None
    if topic not in by_topic:
        raise UsageProblem(f"offsets JSON names no partitions of {topic!r}: {offsets}")
    return json.dumps({topic: by_topic[topic]})

"""Fixtures of the pipeline tests: one local SparkSession for the whole test session (starting one
costs seconds), and generator output laid out the way Spark's Kafka source delivers it (the
helpers come as fixtures, test modules cannot import a conftest)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from datetime import datetime

import pytest

from pipelines.flows import FUND_TOPIC, TRADE_TOPIC
from pipelines.generator import Emission



@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None:
        pytest.skip("no java on PATH (`make test` installs openjdk-17-jre-headless)")
    from pipelines.spark_io import spark_session

    session = spark_session(app_name="pipelines-tests", master="local[2]", shuffle_partitions=2)
    yield session
    session.stop()


def _kafka_rows(emissions: Iterable[Emission], partitions: int = 3,
               first_offsets: dict[tuple[str, int], int] | None = None) -> dict[str, list[dict]]:
    """Emissions as Kafka source rows per topic: partition by key (a stable hash, as a producer's
    partitioner is), offsets consecutive per partition. `first_offsets` continues a layout."""
    next_offset = dict(first_offsets or {})
    rows: dict[str, list[dict]] = {TRADE_TOPIC: [], FUND_TOPIC: []}
    for emission in emissions:
        partition = sum(emission.key) % partitions
        offset = next_offset.get((emission.topic, partition), 0)
        next_offset[(emission.topic, partition)] = offset + 1
        rows[emission.topic].append({
            "key": emission.order_id, "value": emission.value.decode(), "topic": emission.topic,
            "partition": partition, "offset": offset, "timestamp": emission.event_time.isoformat(),
        })
    if first_offsets is not None:
        first_offsets.update(next_offset)
    return rows


KAFKA_SHAPE_DDL = "key STRING, value STRING, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP"


def _kafka_frames(spark, rows: dict[str, list[dict]]):
    """(trade rows, fund rows) as static DataFrames with the Kafka source's columns."""
    from pyspark.sql import functions as F

    def frame(topic: str):
        data = [(r["key"], r["value"], r["topic"], r["partition"], r["offset"],
                 datetime.fromisoformat(r["timestamp"])) for r in rows[topic]]
        return (spark.createDataFrame(data, KAFKA_SHAPE_DDL)
                .select(F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value"),
                        "topic", "partition", "offset", "timestamp"))
    return frame(TRADE_TOPIC), frame(FUND_TOPIC)


@pytest.fixture(scope="session")
def kafka_rows():
    return _kafka_rows


@pytest.fixture(scope="session")
def kafka_frames():
    return _kafka_frames

"""The official Java client, kafka-clients 3.9.1 (the version Spark's Kafka connector runs here),
against a real gateway: a small program (java/GatewayClientCheck.java) compiled with javac and run
with the jars it needs, kafka-clients from the connector jar set (../shared/spark-jars/jars, or
SPARK_KAFKA_JARS) and slf4j, lz4, snappy and zstd from the PySpark wheel. It checks AdminClient
create/list/describe, an idempotent acks=all producer with every codec, headers and timestamps,
assign/seek, consumer groups of both protocols (classic and KIP-848's consumer) committing their
offsets, and a transaction read with read_committed. Skipped, saying why, only without a JDK or
without those jars."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

SOURCE = Path(__file__).parent / "java" / "GatewayClientCheck.java"
PYSPARK_JARS = ("slf4j-api-", "lz4-java-", "snappy-java-", "zstd-jni-")
CHECKS = ("admin-create-describe", "idempotent-produce", "group-consume-commit", "consumer-protocol-group",
          "transaction-read-committed")
RUN_DEADLINE_S = 300


def classpath() -> list[str]:
    """kafka-clients and the jars it loads, or a skip saying which are missing."""
    from pipelines.spark_io import default_jars_directory
    directory = default_jars_directory()
    kafka = sorted(Path(directory).glob("kafka-clients-*.jar")) if directory else []
    if not kafka:
        pytest.skip("no kafka-clients jar: SPARK_KAFKA_JARS is unset and ../shared/spark-jars/jars is absent")
    try:
        import pyspark
    except ImportError:
        pytest.skip("PySpark is not installed: its jars (slf4j, lz4, snappy, zstd) are needed by kafka-clients")
    shipped = Path(pyspark.__file__).parent / "jars"
    others = [next(iter(sorted(shipped.glob(f"{prefix}*.jar"))), None) for prefix in PYSPARK_JARS]
    if None in others:
        pytest.skip(f"PySpark's jars in {shipped} lack one of {', '.join(PYSPARK_JARS)}")
    return [str(kafka[-1]), *map(str, others)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> list[str]:
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK (javac and java): `make java` installs Debian's openjdk-17-jdk-headless")
    jars = classpath()
    out = tmp_path_factory.mktemp("java-client")
    subprocess.run(["javac", "-cp", ":".join(jars), "-d", str(out), str(SOURCE)], check=True, timeout=180,
                   capture_output=True, text=True)
    return [str(out), *jars]


def test_the_java_client_produces_consumes_and_administers(compiled, gateway_process, tmp_path):
    bootstrap = "%s:%d" % gateway_process.kafka
    run = subprocess.run(["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", ":".join(compiled),
                          "GatewayClientCheck", bootstrap, f"java-{uuid.uuid4().hex[:6]}"],
                         capture_output=True, text=True, timeout=RUN_DEADLINE_S)
    (tmp_path / "java-client.log").write_text(run.stdout + run.stderr)
    results = {line.split()[1].rstrip(":"): line.split()[0] for line in run.stdout.splitlines()
               if line.startswith(("OK ", "FAIL "))}
    failures = [line for line in run.stdout.splitlines() if line.startswith("FAIL ")]
    assert results == {check: "OK" for check in CHECKS}, "\n".join(failures) or run.stdout[-4000:] + run.stderr[-4000:]
    assert run.returncode == 0

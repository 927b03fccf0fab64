"""The pieces around the Spark job that need no Spark: the CLI, how options become Spark's Kafka
options, the connector jar lookup, and the comparison with the ground truth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipelines import spark_io
from pipelines.alerts_reader import KafkaAlert
from pipelines.cli import cli
from pipelines.flows import AMOUNT_MISMATCH, AlertKey
from pipelines.generator import GeneratorConfig, generate
from pipelines.ground_truth import GroundTruth, Totals, TotalsKey, expected_alerts
from pipelines.recon_config import ReconConfig
from pipelines.spark_io import (CONNECTOR_PACKAGE, JARS_ENV, KafkaSource, MissingConnectorJars, connector_config,
                                connector_jars, offsets_for_topic)
from pipelines.stream_job import progress_line
from pipelines.verify import TotalsCheck, alert_latency, check_alerts

REPO = Path(__file__).resolve().parents[2]

FLOW = generate(GeneratorConfig(orders=40, discrepancy_rate=0.25, seed=4, start=datetime(2024, 5, 1, tzinfo=UTC)))


def alert_dict(key: AlertKey, alert_id: str) -> dict:
    return {"alert_id": alert_id, "alert_type": key.alert_type, "order_id": key.order_id, "kind": key.kind,
            "side": key.side, "record_id": key.record_id}


def test_cli_offers_generate_stream_batch_and_verify():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("generate", "stream", "batch", "verify", "offsets"):
        assert command in result.output


def test_stream_options_become_sparks_kafka_source_options():
    source = KafkaSource("127.0.0.1:9092", "trade-flo[w]", pattern=True, min_partitions=4,
                         max_offsets_per_trigger=150, starting_timestamp_ms=1714557600000)
    options = source.options(streaming=True)
    assert options["subscribePattern"] == "trade-flo[w]" and "subscribe" not in options
    assert options["startingTimestamp"] == "1714557600000" and "startingOffsets" not in options
    assert (options["minPartitions"], options["maxOffsetsPerTrigger"]) == ("4", "150")
    assert options["failOnDataLoss"] == "true"
    assert "endingOffsets" not in options


def test_batch_options_carry_the_offset_range_and_no_trigger_limit():
    source = KafkaSource("127.0.0.1:9092", "fund-flow", fail_on_data_loss=False, max_offsets_per_trigger=150,
                         starting_offsets='{"fund-flow":{"0":5}}', ending_offsets='{"fund-flow":{"0":9}}')
    options = source.options(streaming=False)
    assert options["subscribe"] == "fund-flow"
    assert (options["startingOffsets"], options["endingOffsets"]) == ('{"fund-flow":{"0":5}}', '{"fund-flow":{"0":9}}')
    assert options["failOnDataLoss"] == "false"
    assert "maxOffsetsPerTrigger" not in options
    assert int(options["kafkaConsumer.pollTimeoutMs"]) <= 10_000   # a stalled read fails in seconds, not 120 s


def test_an_offsets_json_naming_both_flows_is_narrowed_to_one_topic():
    both = json.dumps({"trade-flow": {"0": 3, "1": 4}, "fund-flow": {"0": 7}})
    assert json.loads(offsets_for_topic(both, "fund-flow")) == {"fund-flow": {"0": 7}}
    assert offsets_for_topic("earliest", "fund-flow") == "earliest"
    with pytest.raises(ValueError, match="names no partitions of 'recon-alerts'"):
        offsets_for_topic(both, "recon-alerts")


def test_connector_jars_are_looked_for_where_the_environment_says(monkeypatch, tmp_path):
    monkeypatch.delenv(JARS_ENV, raising=False)
    monkeypatch.setattr(spark_io, "SHARED_JARS", tmp_path / "no-shared-checkout")   # none beside this one
    with pytest.raises(MissingConnectorJars, match=JARS_ENV):
        connector_jars()
    shared = tmp_path / "shared-jars"
    shared.mkdir()
    monkeypatch.setattr(spark_io, "SHARED_JARS", shared)      # the shared directory beside a checkout
    with pytest.raises(MissingConnectorJars, match=f"no .* jar in {shared}"):
        connector_jars()
    for name in ("spark-sql-kafka-0-10_2.12-3.5.2.jar", "spark-token-provider-kafka-0-10_2.12-3.5.2.jar",
                 "kafka-clients-3.9.1.jar"):
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setenv(JARS_ENV, str(tmp_path))
    with pytest.raises(MissingConnectorJars, match="no commons-pool2 jar"):
        connector_jars()
    (tmp_path / "commons-pool2-2.11.1.jar").write_bytes(b"")
    assert len(connector_jars()) == 4
    assert connector_config(packages=True) == {"spark.jars.packages": CONNECTOR_PACKAGE}
    assert connector_config(tmp_path)["spark.jars"].count(".jar") == 4


def test_a_missing_connector_is_one_line_and_exit_code_2(monkeypatch, tmp_path):
    monkeypatch.delenv(JARS_ENV, raising=False)
    for args, env in ((["stream", "--bootstrap", "127.0.0.1:1", "--checkpoint", str(tmp_path / "ck")],
                       {JARS_ENV: str(tmp_path / "absent")}),
                      (["batch", "--bootstrap", "127.0.0.1:1", "--jars", str(tmp_path / "absent")], {})):
        result = subprocess.run([sys.executable, "-m", "pipelines", *args], capture_output=True, text=True,
                                cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **env}, timeout=120)
        assert result.returncode == 2
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("gateway-recon: Spark's Kafka connector")


def test_alert_check_names_missing_unexpected_and_repeated_alerts():
    truth = GroundTruth.of(FLOW)
    expected = sorted(expected_alerts(FLOW.groups))
    raised = [alert_dict(key, f"id{n}") for n, key in enumerate(expected[1:])]
    raised.append(raised[0])  # the same alert twice
    stray = AlertKey(AMOUNT_MISMATCH, "o-none", "pay")
    raised.append(alert_dict(stray, "stray"))
    check = check_alerts(truth, raised)
    assert not check.ok
    assert check.missing == {expected[0]}
    assert check.unexpected == {stray}
    assert check.repeated == {"id0": 2}
    assert check_alerts(truth, [alert_dict(key, f"id{n}") for n, key in enumerate(expected)]).ok


def test_a_mismatch_is_listed_one_alert_and_one_window_per_line():
    truth = GroundTruth.of(FLOW)
    expected = sorted(expected_alerts(FLOW.groups))
    check = check_alerts(truth, [alert_dict(key, f"id{n}") for n, key in enumerate(expected[1:])])
    assert check.diff() == ["  1 expected, not raised:",
                            f"    {expected[0].alert_type} order {expected[0].order_id} {expected[0].kind}"]
    key = TotalsKey(1_714_521_600_000, "m001", "EUR", "pay")
    totals = TotalsCheck({key: (Totals(2, 300, 2, 1), None)})
    assert totals.diff() == ["  1 window totals differ (got / expected):",
                             "    window 2024-05-01 00:00:00 m001 EUR pay: 2 orders, amount 300, 2 trade + 1 fund "
                             "records / none"]


def test_progress_lines_count_records_by_offsets_and_show_the_watermark():
    progress = {"batchId": 7, "numInputRows": 999, "durationMs": {"triggerExecution": 812},
                "eventTime": {"watermark": "2024-05-01T00:00:10.000Z"},
                "sources": [{"description": "KafkaV2[Subscribe[trade-flow]]", "numInputRows": 400,
                             "startOffset": {"trade-flow": {"0": 10, "1": 5}},
                             "endOffset": {"trade-flow": {"0": 110, "1": 5}}},
                            {"description": "KafkaV2[Subscribe[fund-flow]]", "numInputRows": 3,
                             "startOffset": None, "endOffset": json.dumps({"fund-flow": {"0": 3}})}]}
    assert progress_line(progress, 4) == ("batch 7: records in: trade-flow 100, fund-flow 3; alerts out: 4; "
                                          "watermark: 2024-05-01T00:00:10.000Z; 812 ms")
    quiet = {"batchId": 0, "eventTime": {"watermark": "1970-01-01T00:00:00.000Z"}, "sources": []}
    assert progress_line(quiet, 0) == "batch 0: records in: none; alerts out: 0; watermark: none yet; 0 ms"


def test_alert_latency_counts_from_the_groups_last_acknowledgement_to_the_first_copy():
    keys = sorted(expected_alerts(FLOW.groups))[:4]
    sent = {f"{key.order_id}|{key.kind}": 1_000.0 for key in keys}
    truth = GroundTruth.of(FLOW, sent)
    alerts = [KafkaAlert(alert_dict(key, str(n)), str(n), 1_000 + 100 * (n + 1), 0, n)
              for n, key in enumerate(keys)]
    alerts.append(KafkaAlert(alert_dict(keys[0], "0"), "0", 9_000, 0, 99))  # a later copy does not count
    latency = alert_latency(truth, alerts)
    assert (latency.samples, latency.p50_ms, latency.p99_ms, latency.max_ms) == (4, 200.0, 400.0, 400.0)


def test_recon_config_refuses_a_session_gap_of_zero():
    with pytest.raises(ValueError, match="session gap and totals window must be > 0"):
        ReconConfig(session_gap_s=0)

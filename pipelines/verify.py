"""Comparing a job's outputs with the generator's ground truth, exactly, and alert latencies."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from pipelines.alerts_reader import KafkaAlert
from pipelines.flows import AlertKey
from pipelines.ground_truth import GroundTruth, Totals, TotalsKey, expected_alerts, expected_totals
from pipelines.reconcile import ReconConfig


@dataclass(frozen=True, slots=True)
class AlertCheck:
    missing: frozenset[AlertKey]  # expected, not raised
    unexpected: frozenset[AlertKey]  # raised, not expected
    repeated: dict[str, int]  # alert_id -> copies, where more than one

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unexpected and not self.repeated

    def diff(self) -> list[str]:
        """What differs, one line per alert (at most SHOWN per kind)."""
        return (_listed(f"{len(self.missing)} expected, not raised", sorted(map(_alert_text, self.missing)))
                + _listed(f"{len(self.unexpected)} raised, not expected", sorted(map(_alert_text, self.unexpected)))
                + _listed(f"{len(self.repeated)} raised more than once",
                          [f"{alert_id} x{copies}" for alert_id, copies in sorted(self.repeated.items())]))


@dataclass(frozen=True, slots=True)
class TotalsCheck:
    differing: dict[TotalsKey, tuple[Totals | None, Totals | None]]  # key -> (got, expected)

    @property
    def ok(self) -> bool:
        return not self.differing

    def diff(self) -> list[str]:
        """One line per differing window total: what the job wrote and what was expected."""
        return _listed(f"{len(self.differing)} window totals differ (got / expected)", [
            f"{_window_text(key)}: {_totals_text(got)} / {_totals_text(expected)}"
            for key, (got, expected) in sorted(self.differing.items(), key=lambda item: _sort_key(item[0]))])


SHOWN = 20


def _listed(title: str, lines: Iterable[str]) -> list[str]:
    lines = list(lines)
    if not lines:
        return []
    shown = [f"    {line}" for line in lines[:SHOWN]]
    if len(lines) > SHOWN:
        shown.append(f"    ... and {len(lines) - SHOWN} more")
    return [f"  {title}:", *shown]


def _alert_text(key: AlertKey) -> str:
    duplicate = f" ({key.side} record {key.record_id})" if key.record_id else ""
    return f"{key.alert_type} order {key.order_id} {key.kind}{duplicate}"


def _window_text(key: TotalsKey) -> str:
    start = datetime.fromtimestamp(key.window_start_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"window {start} {key.merchant} {key.currency} {key.kind}"


def _totals_text(totals: Totals | None) -> str:
    if totals is None:
        return "none"
    return (f"{totals.orders} orders, amount {totals.amount}, {totals.trade_records} trade + "
            f"{totals.fund_records} fund records")


def _sort_key(key: TotalsKey) -> tuple:
    return key.window_start_ms, key.merchant, key.currency, key.kind


def check_alerts(truth: GroundTruth, raised: list[dict]) -> AlertCheck:
    got = Counter(alert["alert_id"] for alert in raised)
    keys = {AlertKey.of(alert) for alert in raised}
    expected = expected_alerts(truth.groups)
    return AlertCheck(missing=frozenset(expected - keys), unexpected=frozenset(keys - expected),
                      repeated={alert_id: n for alert_id, n in got.items() if n > 1})


def check_totals(truth: GroundTruth, got: dict[TotalsKey, Totals], recon: ReconConfig,
                 include_flush: bool) -> TotalsCheck:
    expected = expected_totals(truth.groups, recon.session_gap_s, recon.totals_window_s, include_flush)
    return TotalsCheck({key: (got.get(key), expected.get(key)) for key in set(got) | set(expected)
                        if got.get(key) != expected.get(key)})


def read_parquet_outputs(spark: SparkSession, output_dir: str) -> tuple[list[dict], dict[TotalsKey, Totals]]:
    """The Parquet alerts (as dicts) and window totals (summed over batches: a window is emitted
    once, so the sum is that row) of a stream or batch run."""
    alerts = [row.asDict() for row in _read_or_empty(spark, f"{output_dir}/alerts")]
    totals: dict[TotalsKey, Totals] = {}
    for row in _read_or_empty(spark, f"{output_dir}/window_totals", "unix_millis(window_start) AS window_start_ms"):
        key = TotalsKey(row.window_start_ms, row.merchant, row.currency, row.kind)
        before = totals.get(key, Totals(0, 0, 0, 0))
        totals[key] = Totals(before.orders + row.orders, before.amount + row.amount,
                             before.trade_records + row.trade_records, before.fund_records + row.fund_records)
    return alerts, totals


def _read_or_empty(spark: SparkSession, path: str, *extra: str) -> list:
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    if not hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).exists(hadoop_path):
        return []
    return spark.read.parquet(path).selectExpr("*", *extra).collect()


@dataclass(frozen=True, slots=True)
class Latency:
    samples: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def alert_latency(truth: GroundTruth, alerts: list[KafkaAlert]) -> Latency | None:
    """Per expected alert: its first copy's Kafka timestamp minus when its order group's last
    record was acknowledged by the gateway."""
    first: dict[AlertKey, int] = {}
    for item in alerts:
        key = AlertKey.of(item.alert)
        first[key] = min(item.timestamp_ms, first.get(key, item.timestamp_ms))
    samples = sorted(first[key] - truth.sent_at_ms[f"{key.order_id}|{key.kind}"]
                     for key in expected_alerts(truth.groups)
                     if key in first and f"{key.order_id}|{key.kind}" in truth.sent_at_ms)
    if not samples:
        return None
    return Latency(len(samples), _percentile(samples, 50), _percentile(samples, 99), samples[-1])


def _percentile(ordered: list[float], percent: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, -(-len(ordered) * percent // 100))
    return float(ordered[int(rank) - 1])

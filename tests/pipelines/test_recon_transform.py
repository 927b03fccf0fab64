"""The reconciliation's transformation on static DataFrames built from generator output (local
Spark, no Kafka): every injected discrepancy is found, nothing else is flagged, the window totals
are exact, and alert ids do not depend on how the records were partitioned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipelines.flows import (
    AMOUNT_MISMATCH,
    CURRENCY_MISMATCH,
    DUPLICATE,
    FUND_TOPIC,
    FUNDS_WITHOUT_TRADE,
    MALFORMED,
    PAY,
    TRADE_SIDE,
    TRADE_TOPIC,
    TRADE_WITHOUT_FUNDS,
    AlertKey,
    FundRecord,
    TradeRecord,
    format_event_time,
)
from pipelines.generator import GeneratorConfig, generate
from pipelines.ground_truth import Totals, TotalsKey, expected_alerts, expected_totals
from pipelines.reconcile import ReconConfig, reconcile

START = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
FLOW = generate(GeneratorConfig(orders=80, rate=40, seed=11, discrepancy_rate=0.2, start=START))
RECON = ReconConfig()
# Not JSON, and JSON lacking required fields: both must be reported, neither may disturb the rest.
MALFORMED_VALUES = ("{not json", '{"trade_id": "x1", "order_id": "o-bad"}')


def run(trade_rows, fund_rows, recon=RECON):
    """Reconcile static frames: (alerts as dicts, totals keyed as the ground truth keys them)."""
    alerts, totals = [], {}
    for row in reconcile(trade_rows, fund_rows, recon).collect():
        if row.alert is not None:
            alerts.append(row.alert.asDict())
        else:
            t = row.totals
            key = TotalsKey(int(t.window_start.replace(tzinfo=UTC).timestamp() * 1000), t.merchant, t.currency,
                            t.kind)
            assert key not in totals, f"two totals rows for {key}"
            totals[key] = Totals(t.orders, t.amount, t.trade_records, t.fund_records)
    return alerts, totals


def malformed_rows() -> list[dict]:
    return [{"key": "o-bad", "value": value, "topic": TRADE_TOPIC, "partition": 0, "offset": 10_000 + n,
             "timestamp": START.isoformat()} for n, value in enumerate(MALFORMED_VALUES)]


@pytest.fixture(scope="module")
def output(spark, kafka_rows, kafka_frames):
    """The generated flow over 3 partitions, plus two malformed trade records, reconciled once."""
    rows = kafka_rows(FLOW.emissions, partitions=3)
    rows[TRADE_TOPIC] += malformed_rows()
    return run(*kafka_frames(spark, rows))


def test_every_injected_discrepancy_is_found_and_nothing_else_is_flagged(output):
    alerts, _ = output
    raised = {AlertKey.of(alert) for alert in alerts if alert["alert_type"] != MALFORMED}
    assert raised == expected_alerts(FLOW.groups)
    assert len(alerts) == len({alert["alert_id"] for alert in alerts}), "an alert was raised twice"


def test_malformed_records_are_each_reported_by_their_kafka_position(output):
    alerts, _ = output
    malformed = sorted((a["side"], a["record_id"]) for a in alerts if a["alert_type"] == MALFORMED)
    assert malformed == [(TRADE_SIDE, f"{TRADE_TOPIC}:0:10000"), (TRADE_SIDE, f"{TRADE_TOPIC}:0:10001")]


def test_alerts_carry_the_facts_of_their_discrepancy(output):
    alerts, _ = output
    by_type = {}
    for alert in alerts:
        by_type.setdefault(alert["alert_type"], alert)
    amount = by_type[AMOUNT_MISMATCH]
    assert amount["trade_amount"] != amount["fund_amount"]
    assert amount["trade_amount"] == next(g.amount for g in FLOW.groups
                                          if (g.order_id, g.kind) == (amount["order_id"], amount["kind"]))
    currency = by_type[CURRENCY_MISMATCH]
    assert len(set(currency["trade_currencies"]) | set(currency["fund_currencies"])) == 2
    assert by_type[TRADE_WITHOUT_FUNDS]["fund_records"] == 0
    assert by_type[FUNDS_WITHOUT_TRADE]["trade_records"] == 0
    assert by_type[DUPLICATE]["record_id"] is not None


def test_window_totals_of_matched_orders_are_exact(output):
    _, totals = output
    assert totals == expected_totals(FLOW.groups, RECON.session_gap_s, RECON.totals_window_s, include_flush=True)


def test_alert_ids_do_not_depend_on_partitioning_or_order(spark, kafka_rows, kafka_frames, output):
    alerts, _ = output
    rows = kafka_rows(reversed(FLOW.emissions), partitions=1)
    rows[TRADE_TOPIC] += malformed_rows()
    again, _ = run(*kafka_frames(spark, rows))
    assert {a["alert_id"]: AlertKey.of(a) for a in again} == {a["alert_id"]: AlertKey.of(a) for a in alerts}


def test_funds_outside_the_join_window_do_not_match_their_trade(spark, kafka_frames):
    # Funds 10 s after the trade, the join window ending 5 s after it: neither side is explained.
    trade = TradeRecord("t1", "o1", "m1", 500, "EUR", PAY, format_event_time(START))
    late_funds = FundRecord("f1", "o1", "m1", 500, "EUR", PAY, "wallet",
                            format_event_time(START + timedelta(seconds=10)))
    rows = {TRADE_TOPIC: [{"key": "o1", "value": trade.to_json().decode(), "topic": TRADE_TOPIC, "partition": 0,
                           "offset": 0, "timestamp": START.isoformat()}],
            FUND_TOPIC: [{"key": "o1", "value": late_funds.to_json().decode(), "topic": FUND_TOPIC, "partition": 0,
                          "offset": 0, "timestamp": START.isoformat()}]}
    alerts, totals = run(*kafka_frames(spark, rows))
    assert {AlertKey.of(a) for a in alerts} == {AlertKey(TRADE_WITHOUT_FUNDS, "o1", PAY),
                                                AlertKey(FUNDS_WITHOUT_TRADE, "o1", PAY)}
    assert totals == {}
    assert {a["side"] for a in alerts} == {None}

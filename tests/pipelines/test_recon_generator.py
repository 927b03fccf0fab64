"""The flow generator and its ground truth: deterministic, realistic, and exactly as discrepant as
it says (no Spark here)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from pipelines.flows import (
    AMOUNT_MISMATCH,
    CURRENCY_MISMATCH,
    DISCREPANCY_TYPES,
    DUPLICATE,
    FUND_SIDE,
    FUND_TOPIC,
    FUNDS_WITHOUT_TRADE,
    TRADE_SIDE,
    TRADE_TOPIC,
    TRADE_WITHOUT_FUNDS,
    AlertKey,
    parse_event_time,
)
from pipelines.generator import GeneratorConfig, generate
from pipelines.ground_truth import GroundTruth, Totals, TotalsKey, expected_alerts, expected_totals

START = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
CONFIG = GeneratorConfig(orders=120, rate=50, seed=7, discrepancy_rate=0.2, start=START)


def sent_by_group(flow):
    """(order_id, kind) -> {"trade": [record dicts], "fund": [...]} as emitted, duplicates included."""
    sent = defaultdict(lambda: {TRADE_SIDE: [], FUND_SIDE: []})
    for emission in flow.emissions:
        side = TRADE_SIDE if emission.topic == TRADE_TOPIC else FUND_SIDE
        sent[(emission.order_id, emission.kind)][side].append(json.loads(emission.value))
    return sent


def test_same_config_gives_the_same_flow():
    assert generate(CONFIG) == generate(CONFIG)
    assert generate(CONFIG) != generate(replace(CONFIG, seed=8))


def test_every_discrepancy_type_is_injected_and_duplicates_come_from_both_flows():
    groups = generate(CONFIG).groups
    injected = Counter(group.discrepancy for group in groups if group.discrepancy)
    assert set(injected) == set(DISCREPANCY_TYPES)
    assert min(injected.values()) >= 2
    assert {group.duplicate_side for group in groups if group.discrepancy == DUPLICATE} == {TRADE_SIDE, FUND_SIDE}


def test_flows_are_realistic_packages_mixed_payments_and_refunds():
    flow = generate(CONFIG)
    sent = sent_by_group(flow)
    assert any(len(sides[TRADE_SIDE]) > 1 for sides in sent.values()), "no package order"
    assert any(len({r["channel"] for r in sides[FUND_SIDE]}) > 1 for sides in sent.values()), "no mixed payment"
    assert any(kind == "refund" for _, kind in sent), "no refund"
    assert all(r["amount"] > 0 for sides in sent.values() for records in sides.values() for r in records)


def test_clean_groups_balance_and_each_discrepancy_breaks_its_group_as_declared():
    flow = generate(CONFIG)
    sent = sent_by_group(flow)
    for group in flow.groups:
        sides = sent[(group.order_id, group.kind)]
        trades, funds = sides[TRADE_SIDE], sides[FUND_SIDE]
        currencies = {r["currency"] for r in trades + funds}
        if group.discrepancy is None:
            assert sum(r["amount"] for r in trades) == sum(r["amount"] for r in funds) == group.amount
            assert currencies == {group.currency}
        elif group.discrepancy == FUNDS_WITHOUT_TRADE:
            assert trades == [] and funds
        elif group.discrepancy == TRADE_WITHOUT_FUNDS:
            assert funds == [] and trades
        elif group.discrepancy == AMOUNT_MISMATCH:
            assert sum(r["amount"] for r in trades) != sum(r["amount"] for r in funds)
            assert currencies == {group.currency}
        elif group.discrepancy == CURRENCY_MISMATCH:
            assert sum(r["amount"] for r in trades) == sum(r["amount"] for r in funds)
            assert len(currencies) == 2
        elif group.discrepancy == DUPLICATE:
            records = trades if group.duplicate_side == TRADE_SIDE else funds
            id_field = "trade_id" if group.duplicate_side == TRADE_SIDE else "fund_id"
            copies = [r for r in records if r[id_field] == group.duplicate_record_id]
            assert len(copies) == 2 and copies[0] == copies[1]


def test_funds_settle_within_seconds_of_their_trade_and_a_package_within_its_session():
    flow = generate(CONFIG)
    for group in flow.groups:
        trade_times = [parse_event_time(t) for t in group.trade_times]
        fund_times = [parse_event_time(t) for t in group.fund_times]
        if trade_times:
            assert max(trade_times) - min(trade_times) < timedelta(seconds=1)
        if trade_times and fund_times:
            assert min(trade_times) <= min(fund_times) <= min(trade_times) + timedelta(seconds=2)


def test_the_flush_order_comes_last_clean_and_far_after_the_rest():
    flow = generate(CONFIG)
    flush = [group for group in flow.groups if group.flush]
    assert len(flush) == 1 and flush[0].discrepancy is None
    last_other = max(e.event_time for e in flow.emissions if e.order_id != flush[0].order_id)
    assert flow.emissions[-1].order_id == flush[0].order_id
    assert flow.emissions[-1].event_time - last_other >= timedelta(seconds=CONFIG.flush_after_s)
    assert not any(group.flush for group in generate(replace(CONFIG, flush_after_s=0)).groups)


def test_records_carry_their_event_time_as_kafka_timestamp_and_order_id_as_key():
    for emission in generate(CONFIG).emissions:
        record = json.loads(emission.value)
        assert emission.key == record["order_id"].encode()
        assert emission.timestamp_ms == int(parse_event_time(record["event_time"]).timestamp() * 1000)


def test_ground_truth_survives_its_json_file(tmp_path):
    flow = generate(CONFIG)
    truth = GroundTruth.of(flow, {"o0000001|pay": 1714557600123.5})
    truth.save(tmp_path / "truth.json")
    loaded = GroundTruth.load(tmp_path / "truth.json")
    assert loaded == truth
    assert loaded.records == {TRADE_TOPIC: flow.records(TRADE_TOPIC), FUND_TOPIC: flow.records(FUND_TOPIC)}


def test_ground_truth_of_another_format_is_refused(tmp_path):
    path = tmp_path / "truth.json"
    path.write_text(json.dumps({"format": 99}))
    with pytest.raises(ValueError, match="unsupported ground truth format 99"):
        GroundTruth.load(path)


def test_expected_alerts_are_one_per_injected_discrepancy():
    groups = generate(CONFIG).groups
    alerts = expected_alerts(groups)
    assert len(alerts) == sum(1 for group in groups if group.discrepancy)
    duplicate = next(group for group in groups if group.discrepancy == DUPLICATE)
    assert AlertKey(DUPLICATE, duplicate.order_id, duplicate.kind, duplicate.duplicate_side,
                    duplicate.duplicate_record_id) in alerts


def test_expected_totals_place_an_order_by_its_last_trade_line_plus_the_session_gap():
    flow = generate(GeneratorConfig(orders=1, discrepancy_rate=0, refund_ratio=0, flush_after_s=0, start=START,
                                    max_package_trades=1))
    (group,) = flow.groups
    # Trade at 10:00:00.000, session gap 2 s: the session ends 10:00:02, its event time is 1 µs
    # earlier, so with 10 s windows the order is in [10:00:00, 10:00:10).
    start_ms = int(START.timestamp() * 1000)
    assert expected_totals(flow.groups, 2.0, 10.0, include_flush=True) == {
        TotalsKey(start_ms, group.merchant, group.currency, "pay"): Totals(1, group.amount, 1, len(group.fund_ids))}
    # A gap of exactly 10 s puts the session's end on the boundary: still the first window.
    assert list(expected_totals(flow.groups, 10.0, 10.0, include_flush=True))[0].window_start_ms == start_ms


def test_generator_refuses_a_rate_of_zero():
    with pytest.raises(ValueError, match="rate > 0"):
        GeneratorConfig(rate=0)

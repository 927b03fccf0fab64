"""The record model of the two flows and of the alerts, as plain Python values.

A trade record is one line of an order in the transaction flow (a package order has several); a
funds record is one movement of money for an order in the funds flow (a mixed payment has several:
bank card plus coupon, say). Records of one order share `order_id` and `kind`; `trade_id` and
`fund_id` identify a record, so the same record delivered twice is a duplicate. Amounts are integers
in minor units (cents, fen): money is never a float. Event times are UTC, ISO 8601 with
milliseconds, which is what Spark's JSON reader parses by default.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

TRADE_TOPIC = "trade-flow"
FUND_TOPIC = "fund-flow"
ALERT_TOPIC = "recon-alerts"

PAY = "pay"
REFUND = "refund"
KINDS = (PAY, REFUND)

CHANNELS = ("bank_card", "wallet", "coupon", "balance", "credit")

# Alert types, as written in the `alert_type` field of every alert.
FUNDS_WITHOUT_TRADE = "funds_without_trade"
TRADE_WITHOUT_FUNDS = "trade_without_funds"
AMOUNT_MISMATCH = "amount_mismatch"
CURRENCY_MISMATCH = "currency_mismatch"
DUPLICATE = "duplicate"
MALFORMED = "malformed"  # a record that is not JSON of the declared schema
ALERT_TYPES = (FUNDS_WITHOUT_TRADE, TRADE_WITHOUT_FUNDS, AMOUNT_MISMATCH, CURRENCY_MISMATCH, DUPLICATE, MALFORMED)
# What the generator can inject (each is one alert type, duplicates on either side).
DISCREPANCY_TYPES = (FUNDS_WITHOUT_TRADE, TRADE_WITHOUT_FUNDS, AMOUNT_MISMATCH, CURRENCY_MISMATCH, DUPLICATE)

TRADE_SIDE = "trade"
FUND_SIDE = "fund"


def format_event_time(moment: datetime) -> str:
    """UTC, millisecond precision, 'Z' suffix: 2024-05-01T10:00:00.250Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_event_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True, slots=True)
class TradeRecord:
    trade_id: str
    order_id: str
    merchant: str
    amount: int
    currency: str
    kind: str
    event_time: str

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class FundRecord:
    fund_id: str
    order_id: str
    merchant: str
    amount: int
    currency: str
    kind: str
    channel: str
    event_time: str

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True, order=True)
class AlertKey:
    """What identifies an alert, independent of when or how often it was computed."""

    alert_type: str
    order_id: str
    kind: str
    side: str | None = None  # duplicates only: which flow the record came from
    record_id: str | None = None  # duplicates only

    @classmethod
    def of(cls, alert: dict) -> AlertKey:
        return cls(alert["alert_type"], alert["order_id"], alert["kind"], alert.get("side"), alert.get("record_id"))

"""The generator's ground truth as a JSON file, and what a correct job outputs for it.

The file holds the generator's config, every order group (what was sent, which discrepancy was
injected) and, once the flow was produced, when each group's last record was acknowledged
(`sent_at_ms`, for alert latency). From it follow exactly the alerts a job must raise — one per
injected discrepancy, nothing else — and the totals of matched orders per window, merchant,
currency and kind. Totals depend on the job's session gap and window size, which place an order
in a window; see pipelines.reconcile for that definition.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pipelines.flows import DUPLICATE, FUND_TOPIC, TRADE_TOPIC, AlertKey, parse_event_time
from pipelines.generator import GeneratedFlow, GeneratorConfig, GroupTruth

FORMAT_VERSION = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True, order=True)
class TotalsKey:
    window_start_ms: int
    merchant: str
    currency: str
    kind: str


@dataclass(frozen=True, slots=True)
class Totals:
    orders: int
    amount: int
    trade_records: int
    fund_records: int


@dataclass(frozen=True, slots=True)
class GroundTruth:
    config: dict
    start: str
    records: dict[str, int]
    groups: tuple[GroupTruth, ...]
    sent_at_ms: dict[str, float] = field(default_factory=dict)  # group key -> last record acknowledged

    @classmethod
    def of(cls, flow: GeneratedFlow, sent_at_ms: dict[str, float] | None = None) -> GroundTruth:
        config = {f.name: getattr(flow.config, f.name) for f in fields(GeneratorConfig)}
        config["start"] = flow.start.isoformat()
        return cls(config=config, start=flow.start.isoformat(),
                   records={TRADE_TOPIC: flow.records(TRADE_TOPIC), FUND_TOPIC: flow.records(FUND_TOPIC)},
                   groups=flow.groups, sent_at_ms=dict(sent_at_ms or {}))

    def to_dict(self) -> dict:
        return {"format": FORMAT_VERSION, "config": self.config, "start": self.start, "records": self.records,
                "groups": [asdict(group) for group in self.groups], "sent_at_ms": self.sent_at_ms}

    @classmethod
    def from_dict(cls, data: dict) -> GroundTruth:
        if data.get("format") != FORMAT_VERSION:
            raise ValueError(f"unsupported ground truth format {data.get('format')!r}")
        groups = tuple(GroupTruth(**{**group, **{name: tuple(group[name]) for name in
                                                  ("trade_ids", "fund_ids", "trade_times", "fund_times")}})
                       for group in data["groups"])
        return cls(config=data["config"], start=data["start"], records=data["records"], groups=groups,
                   sent_at_ms=data.get("sent_at_ms", {}))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> GroundTruth:
        return cls.from_dict(json.loads(path.read_text()))

    def group(self, order_id: str, kind: str) -> GroupTruth:
        return self._by_key()[(order_id, kind)]

    def _by_key(self) -> dict[tuple[str, str], GroupTruth]:
        return {(group.order_id, group.kind): group for group in self.groups}


def expected_alerts(groups: tuple[GroupTruth, ...]) -> set[AlertKey]:
    """One alert per injected discrepancy; a duplicate names its side and record."""
    alerts = set()
    for group in groups:
        if group.discrepancy == DUPLICATE:
            alerts.add(AlertKey(DUPLICATE, group.order_id, group.kind, group.duplicate_side, group.duplicate_record_id))
        elif group.discrepancy is not None:
            alerts.add(AlertKey(group.discrepancy, group.order_id, group.kind))
    return alerts


def is_matched(group: GroupTruth) -> bool:
    """Matched orders make the totals; a duplicate is dropped before matching, so it still matches."""
    return group.discrepancy in (None, DUPLICATE)


def order_window_start_ms(group: GroupTruth, session_gap_s: float, window_s: float) -> int:
    """The totals window of an order: the one holding its trade session's end minus 1 µs (Spark's
    window_time of the session), the session ending `session_gap_s` after its last trade line."""
    last_trade_us = max(_epoch_us(parse_event_time(text)) for text in group.trade_times)
    window_time_us = last_trade_us + round(session_gap_s * 1_000_000) - 1
    window_us = round(window_s * 1_000_000)
    return (window_time_us - window_time_us % window_us) // 1000


def expected_totals(groups: tuple[GroupTruth, ...], session_gap_s: float, window_s: float,
                    include_flush: bool) -> dict[TotalsKey, Totals]:
    """Matched orders summed per window, merchant, currency and kind. A streaming run never closes
    the flush order's window (nothing comes after it), a batch run does: hence `include_flush`."""
    sums: dict[TotalsKey, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for group in groups:
        if not is_matched(group) or (group.flush and not include_flush):
            continue
        key = TotalsKey(order_window_start_ms(group, session_gap_s, window_s), group.merchant, group.currency,
                        group.kind)
        row = sums[key]
        row[0] += 1
        row[1] += group.amount
        row[2] += len(group.trade_ids)
        row[3] += len(group.fund_ids)
    return {key: Totals(*row) for key, row in sums.items()}


def _epoch_us(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)  # exact, unlike float seconds

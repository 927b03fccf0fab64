"""Realistic trade and funds flows with injected discrepancies, and the truth about them.

Pure and deterministic: the same GeneratorConfig (seed included) gives the same flow. Sending it
is pipelines.producer's job. The flow is a list of emissions in send order; every order group
(order_id, kind) is described by a GroupTruth saying what was sent and which discrepancy, if any,
was injected into it — at most one per group, so each one is expected to raise exactly one alert.

Shape of the traffic: orders of a few merchants, each merchant in its home currency; a package
order has several trade lines, a mixed payment several funds lines (card plus coupon, ...), the
funds following the trade by up to `max_fund_delay_s`; some orders are refunded a few seconds
later (kind "refund", refunded to one or two of the payment's channels). Duplicates are the same
record re-sent shortly after, as a retrying upstream system would.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from pipelines.flows import (
    AMOUNT_MISMATCH,
    CHANNELS,
    CURRENCY_MISMATCH,
    DISCREPANCY_TYPES,
    DUPLICATE,
    FUND_SIDE,
    FUND_TOPIC,
    FUNDS_WITHOUT_TRADE,
    PAY,
    REFUND,
    TRADE_SIDE,
    TRADE_TOPIC,
    TRADE_WITHOUT_FUNDS,
    FundRecord,
    TradeRecord,
    format_event_time,
)

CURRENCIES = ("CNY", "USD", "EUR", "HKD", "JPY")
DUPLICATE_RESEND_AFTER_S = 0.3  # a retry re-sends the same record this long after the original
LINE_SPACING_S = 0.05  # lines of one package or one mixed payment are this far apart


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    orders: int = 1000  # payment orders; refunds come on top
    rate: float = 100.0  # orders per second of event time (and of sending, when paced)
    seed: int = 1
    merchants: int = 5
    refund_ratio: float = 0.1
    discrepancy_rate: float = 0.05  # share of order groups given one discrepancy, types in rotation
    max_package_trades: int = 3
    max_mixed_funds: int = 3
    max_fund_delay_s: float = 1.5
    # One clean order this long after the last event, so a streaming job's watermark passes
    # everything before it; 0 leaves it out.
    flush_after_s: float = 60.0
    start: datetime | None = None  # event time of the first order; None: now
    prefix: str = ""  # prepended to every id, so several runs can share topics

    def __post_init__(self) -> None:
        if self.orders < 0 or self.rate <= 0 or self.merchants < 1:
            raise ValueError("orders must be >= 0, rate > 0 and merchants >= 1")
        if not 0 <= self.discrepancy_rate <= 1 or not 0 <= self.refund_ratio <= 1:
            raise ValueError("discrepancy_rate and refund_ratio must be within [0, 1]")


@dataclass(frozen=True, slots=True)
class Emission:
    """One record to produce: to `topic`, keyed by its order id, at `send_at_s` after the start."""

    topic: str
    order_id: str
    kind: str
    record_id: str
    value: bytes
    event_time: datetime
    send_at_s: float

    @property
    def key(self) -> bytes:
        return self.order_id.encode()

    @property
    def timestamp_ms(self) -> int:
        return int(self.event_time.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class GroupTruth:
    """What was sent for one (order_id, kind), and what the job must conclude about it."""

    order_id: str
    kind: str
    merchant: str
    currency: str
    amount: int  # the trade total, in minor units
    trade_ids: tuple[str, ...]  # as sent, without duplicates
    fund_ids: tuple[str, ...]
    trade_times: tuple[str, ...]
    fund_times: tuple[str, ...]
    discrepancy: str | None = None
    duplicate_side: str | None = None
    duplicate_record_id: str | None = None
    flush: bool = False

    @property
    def group_key(self) -> str:
        return f"{self.order_id}|{self.kind}"


@dataclass(frozen=True, slots=True)
class GeneratedFlow:
    config: GeneratorConfig
    start: datetime
    emissions: tuple[Emission, ...]
    groups: tuple[GroupTruth, ...]

    def records(self, topic: str) -> int:
        return sum(1 for emission in self.emissions if emission.topic == topic)


@dataclass(slots=True)
class _Group:
    """A group while it is being built; frozen into Emission/GroupTruth at the end."""

    order_id: str
    kind: str
    merchant: str
    currency: str
    trades: list[tuple[TradeRecord, datetime]] = field(default_factory=list)
    funds: list[tuple[FundRecord, datetime]] = field(default_factory=list)
    flush: bool = False


def generate(config: GeneratorConfig) -> GeneratedFlow:
    rng = random.Random(config.seed)
    start = config.start or datetime.now(UTC)
    merchants = [(f"{config.prefix}m{index:03d}", CURRENCIES[index % len(CURRENCIES)])
                 for index in range(config.merchants)]
    groups: list[_Group] = []
    for index in range(config.orders):
        paid_at = start + timedelta(seconds=index / config.rate)
        merchant, currency = rng.choice(merchants)
        pay = _payment(rng, config, f"{config.prefix}o{index:07d}", merchant, currency, paid_at)
        groups.append(pay)
        if rng.random() < config.refund_ratio:
            groups.append(_refund(rng, config, pay, paid_at + timedelta(seconds=rng.uniform(2.0, 6.0))))

    injected = _choose_discrepancies(rng, config, len(groups))
    truths: list[GroupTruth] = []
    emissions: list[Emission] = []
    for position, group in enumerate(groups):
        discrepancy, side = injected.get(position, (None, TRADE_SIDE))
        truth, sent = _inject(rng, group, discrepancy, side, start)
        truths.append(truth)
        emissions.extend(sent)

    if config.flush_after_s > 0:
        last = max((emission.event_time for emission in emissions), default=start)
        merchant, currency = merchants[0]
        flush = _payment(rng, replace(config, max_package_trades=1, max_mixed_funds=1),
                         f"{config.prefix}flush", merchant, currency, last + timedelta(seconds=config.flush_after_s))
        flush.flush = True
        truth, sent = _inject(rng, flush, None, TRADE_SIDE, start)
        truths.append(truth)
        emissions.extend(sent)

    emissions.sort(key=lambda emission: (emission.send_at_s, emission.topic, emission.record_id))
    return GeneratedFlow(config=config, start=start, emissions=tuple(emissions), groups=tuple(truths))


def _payment(rng: random.Random, config: GeneratorConfig, order_id: str, merchant: str, currency: str,
             paid_at: datetime) -> _Group:
    group = _Group(order_id, PAY, merchant, currency)
    line_amounts = _split(rng, rng.randint(100, 50_000), rng.randint(1, config.max_package_trades))
    for line, amount in enumerate(line_amounts):
        at = paid_at + timedelta(seconds=line * LINE_SPACING_S)
        group.trades.append((TradeRecord(f"{order_id}-t{line}", order_id, merchant, amount, currency, PAY,
                                         format_event_time(at)), at))
    settled_at = paid_at + timedelta(seconds=rng.uniform(0.1, config.max_fund_delay_s))
    channels = rng.sample(CHANNELS, rng.randint(1, min(config.max_mixed_funds, len(CHANNELS))))
    for line, (channel, amount) in enumerate(zip(channels, _split(rng, sum(line_amounts), len(channels)))):
        at = settled_at + timedelta(seconds=line * LINE_SPACING_S)
        group.funds.append((FundRecord(f"{order_id}-f{line}", order_id, merchant, amount, currency, PAY, channel,
                                       format_event_time(at)), at))
    return group


def _refund(rng: random.Random, config: GeneratorConfig, pay: _Group, refunded_at: datetime) -> _Group:
    paid = sum(record.amount for record, _ in pay.trades)
    amount = paid if rng.random() < 0.5 else rng.randint(1, paid)
    group = _Group(pay.order_id, REFUND, pay.merchant, pay.currency)
    group.trades.append((TradeRecord(f"{pay.order_id}-rt0", pay.order_id, pay.merchant, amount, pay.currency, REFUND,
                                     format_event_time(refunded_at)), refunded_at))
    channels = [record.channel for record, _ in pay.funds][: rng.randint(1, 2)]
    settled_at = refunded_at + timedelta(seconds=rng.uniform(0.1, config.max_fund_delay_s))
    for line, (channel, part) in enumerate(zip(channels, _split(rng, amount, len(channels)))):
        at = settled_at + timedelta(seconds=line * LINE_SPACING_S)
        group.funds.append((FundRecord(f"{pay.order_id}-rf{line}", pay.order_id, pay.merchant, part, pay.currency,
                                       REFUND, channel, format_event_time(at)), at))
    return group


def _split(rng: random.Random, total: int, parts: int) -> list[int]:
    """`total` as `parts` positive integers (fewer parts when the total is too small)."""
    parts = max(1, min(parts, total))
    cuts = sorted(rng.sample(range(1, total), parts - 1)) if parts > 1 else []
    bounds = [0, *cuts, total]
    return [bounds[i + 1] - bounds[i] for i in range(parts)]


def _choose_discrepancies(rng: random.Random, config: GeneratorConfig, group_count: int) -> dict[int, tuple[str, str]]:
    """Group position -> (discrepancy type, duplicate side); types rotate, and duplicates alternate
    between the trade and the funds side, so a run with a few of them has every variant."""
    count = round(group_count * config.discrepancy_rate)
    if config.discrepancy_rate > 0 and group_count:
        count = max(count, 1)
    chosen = rng.sample(range(group_count), min(count, group_count))
    rounds = len(DISCREPANCY_TYPES)
    return {position: (DISCREPANCY_TYPES[n % rounds], TRADE_SIDE if (n // rounds) % 2 == 0 else FUND_SIDE)
            for n, position in enumerate(chosen)}


def _inject(rng: random.Random, group: _Group, discrepancy: str | None, side: str,
            start: datetime) -> tuple[GroupTruth, list[Emission]]:
    trades, funds = list(group.trades), list(group.funds)
    duplicate_side = duplicate_record_id = None
    resend: tuple[str, str, bytes, datetime] | None = None
    if discrepancy == FUNDS_WITHOUT_TRADE:
        trades = []
    elif discrepancy == TRADE_WITHOUT_FUNDS:
        funds = []
    elif discrepancy == AMOUNT_MISMATCH:
        line = rng.randrange(len(funds))
        record, at = funds[line]
        delta = rng.randint(1, 999)
        funds[line] = (replace(record, amount=record.amount + delta if rng.random() < 0.5 or record.amount <= delta
                               else record.amount - delta), at)
    elif discrepancy == CURRENCY_MISMATCH:
        line = rng.randrange(len(funds))
        record, at = funds[line]
        funds[line] = (replace(record, currency=rng.choice([c for c in CURRENCIES if c != record.currency])), at)
    elif discrepancy == DUPLICATE:
        duplicate_side = side
        if duplicate_side == TRADE_SIDE:
            record, at = rng.choice(trades)
            duplicate_record_id, resend = record.trade_id, (TRADE_TOPIC, record.trade_id, record.to_json(), at)
        else:
            record, at = rng.choice(funds)
            duplicate_record_id, resend = record.fund_id, (FUND_TOPIC, record.fund_id, record.to_json(), at)

    def emission(topic: str, record_id: str, value: bytes, at: datetime, delay: float = 0.0) -> Emission:
        return Emission(topic, group.order_id, group.kind, record_id, value, at, (at - start).total_seconds() + delay)

    sent = [emission(TRADE_TOPIC, record.trade_id, record.to_json(), at) for record, at in trades]
    sent += [emission(FUND_TOPIC, record.fund_id, record.to_json(), at) for record, at in funds]
    if resend is not None:
        sent.append(emission(*resend, delay=DUPLICATE_RESEND_AFTER_S))
    truth = GroupTruth(
        order_id=group.order_id, kind=group.kind, merchant=group.merchant, currency=group.currency,
        amount=sum(record.amount for record, _ in group.trades),
        trade_ids=tuple(record.trade_id for record, _ in trades), fund_ids=tuple(record.fund_id for record, _ in funds),
        trade_times=tuple(record.event_time for record, _ in trades),
        fund_times=tuple(record.event_time for record, _ in funds),
        discrepancy=discrepancy, duplicate_side=duplicate_side, duplicate_record_id=duplicate_record_id,
        flush=group.flush,
    )
    return truth, sent

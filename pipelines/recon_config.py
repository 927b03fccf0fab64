"""The reconciliation's timing parameters (no Spark import, so the CLI can show the defaults).

Event-time semantics: a discrepancy becomes final once the watermark (the largest event time seen,
minus `watermark_delay_s`) has passed the order's last line plus the join window and the session
gap, so these three bound the alert latency from below, in event time. The defaults suit the
generator's flows (funds settle within 1.6 s of the trade, lines of a package or mixed payment
are 50 ms apart, a retry re-sends after 0.3 s).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReconConfig:
    watermark_delay_s: float = 2.0  # how late (in event time) a record may arrive and still count
    funds_before_trade_s: float = 2.0  # join window: funds may precede their trade (clock skew) ...
    funds_after_trade_s: float = 3.0  # ... or follow it by this much
    session_gap_s: float = 1.0  # lines of one order group closer than this form one session
    totals_window_s: float = 10.0  # tumbling window of the matched totals

    def __post_init__(self) -> None:
        if min(self.watermark_delay_s, self.funds_before_trade_s, self.funds_after_trade_s) < 0:
            raise ValueError("delays and join bounds must be >= 0")
        if self.session_gap_s <= 0 or self.totals_window_s <= 0:
            raise ValueError("session gap and totals window must be > 0")

"""Load of the brokers of a cluster, and the leader's decision to shed some of it.

Each broker writes a report every few seconds to its ephemeral node `/cluster/load/<id>`:

    {"bundles": {"<tenant>/<namespace>/<i>": [messages per s, bytes per s]}, "connections": n}

(messages appended, bytes appended and read, over the last interval, per bundle it holds). The
leader reads the reports once per shedding interval and moves at most one bundle, as Pulsar's
threshold shedder does with its resource shares:

- load is bytes per second plus `MESSAGE_BYTES` per message (a message costs the broker about what
  a kibibyte of payload does, whatever its size); the busiest broker sheds when its share of the
  cluster's load is above the mean share by more than the threshold (10 percentage points by
  default) and it moves at least `MIN_MESSAGES_PER_S` or `MIN_BYTES_PER_S` (an idle cluster never
  moves anything);
- the bundle moved is the busiest one that fits in half the gap between the busiest and the least
  busy broker, so after the move the busiest broker is still at least as busy as the one that took
  the bundle: the next round cannot send it back, and the cluster never thrashes;
- a bundle bigger than half the gap stays (moving it would only swap the roles), and so does a
  bundle an operator placed (placements.py).

Connections are reported (operators see them) but not shed: a client connects to any broker and
follows the partition leaders, so moving a bundle does not move connections.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

LOAD = "/cluster/load"
MIN_MESSAGES_PER_S = 1_000.0
MIN_BYTES_PER_S = float(1 << 20)
MESSAGE_BYTES = 1024.0

Traffic = tuple[float, float]    # (messages, bytes): cumulative counts, or rates per second


@dataclass(frozen=True, slots=True)
class LoadReport:
    bundles: dict[str, Traffic]
    connections: int = 0

    def to_json(self) -> bytes:
        return json.dumps({"bundles": {b: list(t) for b, t in self.bundles.items()},
                           "connections": self.connections}, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "LoadReport":
        value = json.loads(raw)
        return cls({bundle: (float(m), float(b)) for bundle, (m, b) in value["bundles"].items()},
                   int(value.get("connections", 0)))


class RateMeter:
    """Rates per bundle from cumulative counts taken at intervals (a count that went down is a
    partition closed and reopened meanwhile: its new count is the traffic since)."""

    def __init__(self) -> None:
        self._last: dict[str, Traffic] = {}
        self._at: float | None = None

    def rates(self, counts: Mapping[str, Traffic], now_s: float) -> dict[str, Traffic]:
        elapsed = None if self._at is None else now_s - self._at
        rates = {}
        if elapsed is not None and elapsed > 0:
            for bundle, (messages, size) in counts.items():
                before_messages, before_size = self._last.get(bundle, (0.0, 0.0))
                rates[bundle] = (_since(messages, before_messages) / elapsed, _since(size, before_size) / elapsed)
        self._last, self._at = dict(counts), now_s
        return rates


def _weight(traffic) -> float:
    return traffic[1] + MESSAGE_BYTES * traffic[0]


def _since(count: float, before: float) -> float:
    return count - before if count >= before else count


@dataclass(frozen=True, slots=True)
class Move:
    bundle: str
    source: int
    target: int


def shed(assignment: Mapping[str, int], reports: Mapping[int, LoadReport], live: Iterable[int],
         threshold: float, pinned: Collection[str] = ()) -> Move | None:
    """The one bundle to move now, or None. `threshold` is a share (0.10: ten percentage points);
    `pinned` bundles are never moved."""
    brokers = sorted(set(live))
    if len(brokers) < 2:
        return None
    load: dict[str, Traffic] = {}
    for broker, report in reports.items():
        for bundle, traffic in report.bundles.items():
            if assignment.get(bundle) == broker:     # a report older than a move does not count
                load[bundle] = traffic
    total = sum(_weight(traffic) for traffic in load.values())
    per_broker = {broker: [0.0, 0.0] for broker in brokers}
    for bundle, (messages, size) in load.items():
        held = per_broker.get(assignment[bundle])
        if held is not None:
            held[0] += messages
            held[1] += size

    def share(traffic) -> float:
        return _weight(traffic) / total if total else 0.0

    busiest = max(brokers, key=lambda b: (share(per_broker[b]), -b))
    idlest = min(brokers, key=lambda b: (share(per_broker[b]), b))
    busy = per_broker[busiest]
    if busy[0] < MIN_MESSAGES_PER_S and busy[1] < MIN_BYTES_PER_S:
        return None
    gap = share(busy) - share(per_broker[idlest])
    if share(busy) - 1 / len(brokers) <= threshold or gap <= 0:
        return None
    candidates = [(share(traffic), bundle) for bundle, traffic in load.items()
                  if assignment[bundle] == busiest and 0 < share(traffic) <= gap / 2 and bundle not in pinned]
    if not candidates:
        return None
    return Move(max(candidates)[1], busiest, idlest)

"""Which live broker should own each bundle: a pure function of the bundles, the current assignment
and the live brokers, so the leader's decisions can be tested without a cluster.

Rules: a bundle stays where it is while its broker lives (a move costs a failover); orphaned and new
bundles go to the broker with the fewest; then bundles move from the fullest to the emptiest broker
only while their counts differ by more than one, so a broker that joins takes its share and a
balanced cluster never moves anything. Those count moves take the least busy bundles (by the
`busy` measure given, e.g. the load reports' messages per second), so that evening the counts
after a load shed (load.py) moves an idle bundle back, not the busy one that was shed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def assign(bundles: Iterable[str], current: dict[str, int], live: Iterable[int],
           busy: Mapping[str, float] | None = None) -> dict[str, int]:
    brokers = sorted(set(live))
    if not brokers:
        return {}
    owned: dict[int, list[str]] = {broker: [] for broker in brokers}
    orphans = []
    for bundle in sorted(set(bundles)):
        owner = current.get(bundle)
        if owner in owned:
            owned[owner].append(bundle)
        else:
            orphans.append(bundle)
    for bundle in orphans:
        owned[_emptiest(brokers, owned)].append(bundle)
    while True:
        fullest = max(brokers, key=lambda b: (len(owned[b]), -b))
        emptiest = _emptiest(brokers, owned)
        if len(owned[fullest]) - len(owned[emptiest]) <= 1:
            break
        idlest = min(reversed(owned[fullest]), key=lambda bundle: (busy or {}).get(bundle, 0.0))
        owned[fullest].remove(idlest)
        owned[emptiest].append(idlest)
    return {bundle: broker for broker, held in owned.items() for bundle in held}


def _emptiest(brokers: list[int], owned: dict[int, list[str]]) -> int:
    return min(brokers, key=lambda b: (len(owned[b]), b))

"""Which live broker should own each bundle: a pure function of the bundles, the current assignment
and the live brokers, so the leader's decisions can be tested without a cluster.

Rules: a bundle an operator placed on a live broker (`pinned`: a partition reassignment,
placements.py) goes there and stays; any other bundle stays where it is while its broker lives (a
move costs a failover); orphaned and new bundles go to the broker with the fewest; then unpinned
bundles move from the fullest to the emptiest broker only while their counts differ by more than
one, so a broker that joins takes its share and a balanced cluster never moves anything. Pinned
bundles count towards their broker's share, so placing one there moves another off it. Those count
moves take the least busy bundles (by the `busy` measure given, e.g. the load reports' messages per
second), so that evening the counts after a load shed (load.py) moves an idle bundle back, not the
busy one that was shed. A bundle pinned to a broker that is not alive is placed as if unpinned,
and goes back to its broker when that one returns (Kafka's preferred leader).

The halves of a split bundle are new to the assignment: `inherited` gives each the broker its parent
had, so a split moves nothing by itself (the count rule may then move a half, as for any bundle).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from core.cluster.bundles import Bundle


def assign(bundles: Iterable[str], current: dict[str, int], live: Iterable[int],
           busy: Mapping[str, float] | None = None, pinned: Mapping[str, int] | None = None) -> dict[str, int]:
    brokers = sorted(set(live))
    if not brokers:
        return {}
    owned: dict[int, list[str]] = {broker: [] for broker in brokers}
    fixed = {bundle for bundle, broker in (pinned or {}).items() if broker in owned}
    orphans = []
    for bundle in sorted(set(bundles)):
        owner = pinned[bundle] if bundle in fixed else current.get(bundle)
        if owner in owned:
            owned[owner].append(bundle)
        else:
            orphans.append(bundle)
    for bundle in orphans:
        owned[_emptiest(brokers, owned)].append(bundle)
    while True:
        emptiest = _emptiest(brokers, owned)
        sources = [b for b in brokers if len(owned[b]) - len(owned[emptiest]) > 1
                   and any(bundle not in fixed for bundle in owned[b])]
        if not sources:
            break
        fullest = max(sources, key=lambda b: (len(owned[b]), -b))
        idlest = min((bundle for bundle in reversed(owned[fullest]) if bundle not in fixed),
                     key=lambda bundle: (busy or {}).get(bundle, 0.0))
        owned[fullest].remove(idlest)
        owned[emptiest].append(idlest)
    return {bundle: broker for broker, held in owned.items() for bundle in held}


def _emptiest(brokers: list[int], owned: dict[int, list[str]]) -> int:
    return min(brokers, key=lambda b: (len(owned[b]), b))


def inherited(current: Mapping[str, int], bundles: Iterable[str]) -> dict[str, int]:
    """`current` plus, for each bundle not in it, the broker of a current bundle it was cut from."""
    found = dict(current)
    parents = [(Bundle.parse(path), broker) for path, broker in current.items()]
    for path in bundles:
        if path not in found:
            bundle = Bundle.parse(path)
            found.update((path, broker) for parent, broker in parents
                         if parent.lower <= bundle.lower and bundle.upper <= parent.upper
                         and (parent.tenant, parent.namespace) == (bundle.tenant, bundle.namespace))
    return found

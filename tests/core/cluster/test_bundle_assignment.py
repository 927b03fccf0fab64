"""The leader's assignment rule and the bundle hash, as pure functions."""

from __future__ import annotations

from collections import Counter

from core.cluster.assignment import assign
from core.cluster.bundles import BUNDLES_PER_NAMESPACE, Bundle, bundle_of, namespace_bundles, partition_bundle

BUNDLES = [b.path for b in namespace_bundles("public", "default")]


def counts(assignment: dict[str, int]) -> list[int]:
    return sorted(Counter(assignment.values()).values())


def test_bundles_are_spread_evenly_over_the_live_brokers() -> None:
    assignment = assign(BUNDLES, {}, [0, 1, 2])
    assert set(assignment) == set(BUNDLES)
    assert counts(assignment) == [5, 5, 6]


def test_a_balanced_assignment_never_moves() -> None:
    first = assign(BUNDLES, {}, [0, 1, 2])
    assert assign(BUNDLES, first, [0, 1, 2]) == first
    assert assign(BUNDLES, first, [2, 1, 0]) == first


def test_only_the_bundles_of_a_dead_broker_move() -> None:
    before = assign(BUNDLES, {}, [0, 1, 2])
    after = assign(BUNDLES, before, [0, 2])
    moved = {b for b in BUNDLES if before[b] != after[b]}
    assert moved == {b for b in BUNDLES if before[b] == 1}
    assert counts(after) == [8, 8]


def test_a_joining_broker_takes_its_share_and_no_more() -> None:
    alone = assign(BUNDLES, {}, [0])
    joined = assign(BUNDLES, alone, [0, 1])
    assert counts(joined) == [8, 8]
    assert sum(1 for b in BUNDLES if alone[b] != joined[b]) == 8


def test_no_live_broker_assigns_nothing() -> None:
    assert assign(BUNDLES, {BUNDLES[0]: 3}, []) == {}


def test_keys_hash_into_stable_bundles_of_their_namespace() -> None:
    bundle = partition_bundle("t", "ns", "orders", 3)
    assert bundle == partition_bundle("t", "ns", "orders", 3)
    assert (bundle.tenant, bundle.namespace) == ("t", "ns") and 0 <= bundle.index < BUNDLES_PER_NAMESPACE
    assert Bundle.parse(bundle.path) == bundle
    spread = Counter(bundle_of("t", "ns", f"topic-{i}").index for i in range(1600))
    assert len(spread) == BUNDLES_PER_NAMESPACE and min(spread.values()) > 50


def test_a_pinned_bundle_goes_to_its_broker_and_another_makes_room() -> None:
    before = assign(BUNDLES, {}, [0, 1, 2])
    bundle = next(b for b in BUNDLES if before[b] == 0)
    after = assign(BUNDLES, before, [0, 1, 2], pinned={bundle: 1})
    assert after[bundle] == 1
    assert counts(after) == [5, 5, 6]
    assert sum(1 for b in BUNDLES if before[b] != after[b]) <= 2
    assert assign(BUNDLES, after, [0, 1, 2], pinned={bundle: 1}) == after


def test_count_balancing_never_moves_a_pinned_bundle() -> None:
    pinned = {b: 0 for b in BUNDLES[:10]}      # more than a fair share on broker 0
    after = assign(BUNDLES, {}, [0, 1], pinned=pinned)
    assert all(after[b] == 0 for b in pinned)
    assert counts(after) == [6, 10]


def test_a_bundle_pinned_to_a_dead_broker_is_placed_elsewhere_and_returns_with_it() -> None:
    bundle = BUNDLES[0]
    without = assign(BUNDLES, {}, [0, 1], pinned={bundle: 2})
    assert without[bundle] in (0, 1)
    back = assign(BUNDLES, without, [0, 1, 2], pinned={bundle: 2})
    assert back[bundle] == 2


def test_a_delayed_store_keeps_its_index_in_the_bundle_of_its_messages() -> None:
    namespaces = [f"ns-{i}" for i in range(64)]
    assert all(partition_bundle("t", ns, "__delayed_index", 0) == partition_bundle("t", ns, "__delayed_messages", 0)
               for ns in namespaces)
    # ... which, hashed on their own names, would often differ
    assert any(bundle_of("t", ns, "__delayed_index-partition-0") != bundle_of("t", ns, "__delayed_messages-partition-0")
               for ns in namespaces)

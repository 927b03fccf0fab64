"""The leader's assignment rule and the bundle hash, as pure functions."""

from __future__ import annotations

from collections import Counter

import pytest

from core.cluster.assignment import assign, inherited
from core.cluster.bundles import (
    BUNDLES_PER_NAMESPACE,
    HASH_SPACE,
    Bundle,
    Layouts,
    bundle_of,
    first_layout,
    follow,
    key_hash,
    namespace_bundles,
    partition_bundle,
    partition_key,
)
from core.cluster.splits import SplitLimits, traffic_split

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
    assert (bundle.tenant, bundle.namespace) == ("t", "ns") and bundle in first_layout("t", "ns")
    assert bundle.holds_partition("t", "ns", "orders", 3) and not bundle.holds_partition("t", "other", "orders", 3)
    assert Bundle.parse(bundle.path) == bundle
    spread = Counter(bundle_of("t", "ns", f"topic-{i}") for i in range(1600))
    assert len(spread) == BUNDLES_PER_NAMESPACE and min(spread.values()) > 50


def test_a_bundle_named_by_an_earlier_version_is_its_range_of_the_first_layout() -> None:
    assert Bundle.parse("t/ns/3") == first_layout("t", "ns")[3] == Bundle("t", "ns", 3 << 28, 4 << 28)
    assert Bundle.parse("t/ns/0xf0000000_0x100000000").upper == HASH_SPACE
    for bad in ("t/ns/0x10_0x10", "t/ns/0x0_0x200000000", "t/ns/x"):
        with pytest.raises(ValueError):
            Bundle.parse(bad)


def test_a_split_cuts_one_bundle_in_two_and_leaves_the_others() -> None:
    layouts = Layouts()
    parent = layouts.bundles("t", "ns")[5]
    at = parent.lower + 12345
    after = layouts.split(parent, at)
    bundles = after.bundles("t", "ns")
    assert len(bundles) == BUNDLES_PER_NAMESPACE + 1
    assert parent not in bundles and set(parent.halves(at)) <= set(bundles)
    assert after.bundles("t", "other") == layouts.bundles("t", "other")
    assert Layouts(after.as_dict()) == after and after != layouts
    # The ranges still tile the hash space: every key is in exactly one bundle.
    assert [b.lower for b in bundles[1:]] == [b.upper for b in bundles[:-1]]
    assert bundles[0].lower == 0 and bundles[-1].upper == HASH_SPACE
    with pytest.raises(ValueError):
        after.split(parent, at + 1)         # not a bundle any more
    with pytest.raises(ValueError):
        after.split(bundles[0], bundles[0].upper)   # not inside


def test_keys_follow_the_layouts_the_process_reads() -> None:
    key = partition_key("orders", 0)
    before = partition_bundle("t", "ns", "orders", 0)
    try:
        follow(Layouts().split(before, key_hash(key) + 1 if key_hash(key) + 1 < before.upper else key_hash(key)))
        after = partition_bundle("t", "ns", "orders", 0)
        assert after != before and after.overlaps(before) and after.holds("t", "ns", key)
        assert namespace_bundles("t", "ns") != first_layout("t", "ns")
    finally:
        follow(Layouts())
    assert partition_bundle("t", "ns", "orders", 0) == before


def test_the_halves_of_a_split_stay_with_their_parents_broker() -> None:
    parent = first_layout("t", "ns")[2]
    low, high = parent.halves(parent.lower + 100)
    current = {b.path: i % 3 for i, b in enumerate(first_layout("t", "ns"))}
    bundles = [b.path for b in Layouts().split(parent, low.upper).bundles("t", "ns")]
    found = inherited(current, bundles)
    assert found[low.path] == found[high.path] == current[parent.path]
    assert assign(bundles, found, [0, 1, 2])[low.path] == current[parent.path]


def test_a_split_point_divides_the_traffic_and_one_busy_key_is_not_split() -> None:
    assert traffic_split([(10, 5.0), (20, 1.0), (30, 1.0), (40, 3.0)]) == 20
    assert traffic_split([(10, 1.0), (20, 1.0), (30, 1.0), (40, 1.0)]) == 30
    assert traffic_split([(10, 100.0), (20, 0.0), (10, 5.0)]) is None
    assert traffic_split([]) is None
    limits = SplitLimits(1000, 1 << 20, 128)
    assert limits.over(1001, 0) and limits.over(0, 2 << 20) and not limits.over(999, 100)
    assert not SplitLimits(0, 0, 128).over(1e9, 1e9)


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

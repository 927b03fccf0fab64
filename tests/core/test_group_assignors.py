"""The server-side assignors (core/groups/assignors): every partition exactly once to a member
subscribing to it, balance where the assignor promises it, stickiness where it promises that."""

from __future__ import annotations

import pytest

from core.groups.assignors import ASSIGNORS
from core.groups.assignors.spec import Subscriber

BALANCED = ("uniform", "averagely", "circle")   # within one partition of each other, for one subscription


def layout(**partitions: int) -> dict[str, tuple[None, ...]]:
    return {topic: (None,) * count for topic, count in partitions.items()}


def members(count: int, topics=("a", "b"), rack=None) -> dict[str, Subscriber]:
    return {f"m{i:02d}": Subscriber(frozenset(topics), rack) for i in range(count)}


def check_exactly_once(assignment, subscribers, topics) -> None:
    seen = {}
    for member, partitions in assignment.items():
        for tp in partitions:
            assert tp not in seen, f"{tp} given to {seen[tp]} and {member}"
            assert tp[0] in subscribers[member].topics, f"{member} got {tp} of a topic it does not subscribe to"
            seen[tp] = member
    wanted = {(t, i) for t, racks in topics.items() for i in range(len(racks))
              if any(t in s.topics for s in subscribers.values())}
    assert set(seen) == wanted


def moved(before, after) -> int:
    """Partitions whose owner changed (a partition of a member that left counts once)."""
    owner = {tp: m for m, tps in before.items() for tp in tps}
    return sum(1 for m, tps in after.items() for tp in tps if owner.get(tp) != m)


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@pytest.mark.parametrize("count", [1, 2, 3, 7, 20])
def test_every_partition_exactly_once(name, count):
    topics = layout(a=12, b=5, c=3)
    subscribers = members(count) | {"odd": Subscriber(frozenset({"c"}))}
    result = ASSIGNORS[name](subscribers, topics, {})
    assert set(result) == set(subscribers)
    check_exactly_once(result, subscribers, topics)


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_no_members_and_no_topics(name):
    assert ASSIGNORS[name]({}, layout(a=3), {}) == {}
    assert ASSIGNORS[name](members(2), {}, {}) == {"m00": frozenset(), "m01": frozenset()}


@pytest.mark.parametrize("name", BALANCED)
@pytest.mark.parametrize("count", [2, 3, 5, 17])
def test_balance_within_one(name, count):
    topics = layout(a=10, b=7)
    result = ASSIGNORS[name](members(count), topics, {})
    sizes = [len(p) for p in result.values()]
    assert max(sizes) - min(sizes) <= 1


def test_range_is_balanced_per_topic_and_co_partitioned():
    result = ASSIGNORS["range"](members(3), layout(a=7, b=7), {})
    for partitions in result.values():
        assert sorted(i for t, i in partitions if t == "a") == sorted(i for t, i in partitions if t == "b")
    per_topic = [sum(1 for t, _ in p if t == "a") for p in result.values()]
    assert max(per_topic) - min(per_topic) <= 1


def test_averagely_blocks_are_contiguous_and_circle_alternates():
    subscribers = members(2, topics=("a",))
    assert ASSIGNORS["averagely"](subscribers, layout(a=5), {}) == {
        "m00": frozenset({("a", 0), ("a", 1), ("a", 2)}), "m01": frozenset({("a", 3), ("a", 4)})}
    assert ASSIGNORS["circle"](subscribers, layout(a=5), {}) == {
        "m00": frozenset({("a", 0), ("a", 2), ("a", 4)}), "m01": frozenset({("a", 1), ("a", 3)})}


def test_consistent_hash_is_roughly_balanced():
    result = ASSIGNORS["consistent-hash"](members(4, topics=("a",)), layout(a=400), {})
    assert all(50 <= len(p) <= 160 for p in result.values()), {m: len(p) for m, p in result.items()}


@pytest.mark.parametrize("name", ["uniform", "consistent-hash"])
def test_sticky_on_join_and_leave(name):
    topics = layout(a=30, b=30)
    before = ASSIGNORS[name](members(5), topics, {})
    joined = ASSIGNORS[name](members(6), topics, before)
    assert moved(before, joined) <= 11         # just what the new member takes (60/6 = 10, +1 slack)
    assert all(before[m] >= joined[m] for m in before)    # nobody else gains or swaps
    left = ASSIGNORS[name](members(4), topics, before)
    assert moved(before, left) == len(before["m04"])      # only the leaver's partitions move


def test_uniform_keeps_a_balanced_assignment_as_is():
    topics = layout(a=9)
    first = ASSIGNORS["uniform"](members(3, topics=("a",)), topics, {})
    assert ASSIGNORS["uniform"](members(3, topics=("a",)), topics, first) == first


def test_uniform_drops_partitions_that_vanished_or_are_not_subscribed():
    subscribers = {"x": Subscriber(frozenset({"a"})), "y": Subscriber(frozenset({"a"}))}
    current = {"x": {("a", 0), ("a", 5), ("gone", 0)}, "y": {("a", 1)}}
    result = ASSIGNORS["uniform"](subscribers, layout(a=4), current)
    check_exactly_once(result, subscribers, layout(a=4))
    assert ("a", 0) in result["x"] and ("a", 1) in result["y"]


def test_uniform_balances_heterogeneous_subscriptions():
    subscribers = {"x": Subscriber(frozenset({"a", "b"})), "y": Subscriber(frozenset({"a"})),
                   "z": Subscriber(frozenset({"b"}))}
    result = ASSIGNORS["uniform"](subscribers, layout(a=6, b=6), {})
    check_exactly_once(result, subscribers, layout(a=6, b=6))
    assert sorted(len(p) for p in result.values()) == [4, 4, 4]


def test_machine_room_prefers_the_partition_room():
    topics = {"a": ("east", "east", "west", "west", "north", "north")}
    subscribers = {"e1": Subscriber(frozenset({"a"}), "east"), "w1": Subscriber(frozenset({"a"}), "west"),
                   "w2": Subscriber(frozenset({"a"}), "west")}
    result = ASSIGNORS["machine-room"](subscribers, topics, {})
    check_exactly_once(result, subscribers, topics)
    assert {("a", 0), ("a", 1)} <= result["e1"]
    assert {("a", 2), ("a", 3)} <= result["w1"] | result["w2"]
    assert not (result["w1"] | result["w2"]) & {("a", 0), ("a", 1)}
    # the room without consumers ("north") is shared by everyone rather than dropped
    assert {("a", 4), ("a", 5)} <= result["e1"] | result["w1"] | result["w2"]


def test_static_members_are_ordered_by_instance_id():
    subscribers = {"random-2": Subscriber(frozenset({"a"}), instance_id="i1"),
                   "random-1": Subscriber(frozenset({"a"}), instance_id="i2")}
    result = ASSIGNORS["averagely"](subscribers, layout(a=2), {})
    assert result["random-2"] == {("a", 0)}

"""`machine-room`: rack-aware. A partition goes to the members in its own room (the rack of the
broker that leads it; a member's room is its client.rack) when there are any, else to all members
that may own it; each such set of candidates shares its partitions in even contiguous blocks
(RocketMQ's AllocateMachineRoomNearby over `averagely`). Reading from the same room avoids
cross-room traffic; a room without consumers is not starved."""

from __future__ import annotations

from collections.abc import Mapping, Set

from core.groups.assignors.spec import (Assignment, Subscriber, TopicLayouts, TopicPartition, blocks, frozen,
                                        partitions_by_subscribers)


def assign(members: Mapping[str, Subscriber], topics: TopicLayouts,
           current: Mapping[str, Set[TopicPartition]]) -> Assignment:
    by_candidates: dict[tuple[str, ...], list[TopicPartition]] = {}
    for owners, partitions in partitions_by_subscribers(members, topics).items():
        for topic, index in partitions:
            room = topics[topic][index]
            near = tuple(m for m in owners if room is not None and members[m].rack == room)
            by_candidates.setdefault(near or owners, []).append((topic, index))
    draft: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for candidates, partitions in by_candidates.items():
        for member, block in blocks(partitions, candidates).items():
            draft[member] += block
    return frozen(members, draft)

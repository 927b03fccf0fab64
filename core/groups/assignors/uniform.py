"""`uniform` (Kafka's name, the default): as even as the subscriptions allow, and sticky: a member
keeps the partitions it owns unless they must go for balance.

1. Every member keeps its current partitions that still exist and that it still subscribes to.
2. Each partition without an owner goes to the least loaded member that may own it.
3. While some member owns two more partitions than a member that could take one of them, one
   moves from the most loaded to the least loaded; so only as many partitions move as balance needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from core.groups.assignors.spec import (Assignment, Subscriber, TopicLayouts, TopicPartition, frozen,
                                        ordered_members, partitions_by_subscribers)


def assign(members: Mapping[str, Subscriber], topics: TopicLayouts,
           current: Mapping[str, Set[TopicPartition]]) -> Assignment:
    order = ordered_members(members)
    rank = {member: position for position, member in enumerate(order)}
    eligible: dict[str, tuple[str, ...]] = {}           # topic -> who may own its partitions
    for owners, partitions in partitions_by_subscribers(members, topics).items():
        for topic, _ in partitions:
            eligible[topic] = owners
    draft: dict[str, set[TopicPartition]] = {m: set() for m in members}
    owned: set[TopicPartition] = set()
    for member in order:
        for tp in sorted(current.get(member, ())):
            topic, index = tp
            if topic in members[member].topics and topic in eligible and index < len(topics[topic]) \
                    and tp not in owned:
                draft[member].add(tp)
                owned.add(tp)

    def lightest(candidates: tuple[str, ...]) -> str:
        return min(candidates, key=lambda m: (len(draft[m]), rank[m]))

    for topic in sorted(eligible):
        for index in range(len(topics[topic])):
            if (topic, index) not in owned:
                draft[lightest(eligible[topic])].add((topic, index))
    moved = True
    while moved:
        moved = False
        for heavy in sorted(order, key=lambda m: (-len(draft[m]), rank[m])):
            for tp in sorted(draft[heavy]):
                light = lightest(eligible[tp[0]])
                if len(draft[heavy]) - len(draft[light]) > 1:
                    draft[heavy].remove(tp)
                    draft[light].add(tp)
                    moved = True
                    break
            if moved:
                break
    return frozen(members, draft)

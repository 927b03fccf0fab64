"""`range` (Kafka's name): per topic, the members subscribing to it in order, each a contiguous
range of its partitions, the first ones one more. Members with the same position get the same
partition numbers of every topic (co-partitioned joins), at the cost of balance across topics."""

from __future__ import annotations

from collections.abc import Mapping, Set

from core.groups.assignors.spec import (Assignment, Subscriber, TopicLayouts, TopicPartition, blocks, frozen,
                                        ordered_members)


def assign(members: Mapping[str, Subscriber], topics: TopicLayouts,
           current: Mapping[str, Set[TopicPartition]]) -> Assignment:
    order = ordered_members(members)
    draft: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic in sorted(topics):
        eligible = tuple(m for m in order if topic in members[m].topics)
        if eligible:
            for member, block in blocks([(topic, i) for i in range(len(topics[topic]))], eligible).items():
                draft[member] += block
    return frozen(members, draft)

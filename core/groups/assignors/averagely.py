"""`averagely`: all partitions the same members may own, in topic then partition order, cut into
contiguous blocks as even as can be (RocketMQ's AllocateMessageQueueAveragely, over the whole
subscription rather than per topic: a group of many one-partition topics is balanced too)."""

from __future__ import annotations

from collections.abc import Mapping, Set

from core.groups.assignors.spec import (Assignment, Subscriber, TopicLayouts, TopicPartition, blocks, frozen,
                                        partitions_by_subscribers)


def assign(members: Mapping[str, Subscriber], topics: TopicLayouts,
           current: Mapping[str, Set[TopicPartition]]) -> Assignment:
    draft: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for owners, partitions in partitions_by_subscribers(members, topics).items():
        for member, block in blocks(partitions, owners).items():
            draft[member] += block
    return frozen(members, draft)

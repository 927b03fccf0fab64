"""`circle`: round robin by consumer: the i-th partition (in topic then partition order) of those
the same members may own goes to the (i mod n)-th of them (RocketMQ's
AllocateMessageQueueAveragelyByCircle)."""

from __future__ import annotations

from collections.abc import Mapping, Set

from core.groups.assignors.spec import (Assignment, Subscriber, TopicLayouts, TopicPartition, frozen,
                                        partitions_by_subscribers)


def assign(members: Mapping[str, Subscriber], topics: TopicLayouts,
           current: Mapping[str, Set[TopicPartition]]) -> Assignment:
    draft: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for owners, partitions in partitions_by_subscribers(members, topics).items():
        for i, tp in enumerate(partitions):
            draft[owners[i % len(owners)]].append(tp)
    return frozen(members, draft)

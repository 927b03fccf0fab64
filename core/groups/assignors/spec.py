"""What a server-side assignor is given and what it returns.

An assignor is a pure function: the members (each with the topics it subscribes to, its rack and
its static instance id), the partitions of every subscribed topic (each with the rack it lives in)
and the current assignment; it returns which partitions each member should own. Every partition
of a topic some member subscribes to goes to exactly one member subscribing to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Subscriber:
    topics: frozenset[str]
    rack: str | None = None
    instance_id: str | None = None


# topic -> the rack of each of its partitions (by index; None: unknown). Its length is the count.
TopicLayouts = Mapping[str, tuple[str | None, ...]]
Assignment = dict[str, frozenset[TopicPartition]]
Assignor = Callable[[Mapping[str, Subscriber], TopicLayouts, Mapping[str, Set[TopicPartition]]], Assignment]


def stable_key(member_id: str, subscriber: Subscriber) -> str:
    """What orders and hashes a member: its instance id survives restarts, its member id does not."""
    return subscriber.instance_id if subscriber.instance_id is not None else member_id


def ordered_members(members: Mapping[str, Subscriber]) -> list[str]:
    return sorted(members, key=lambda m: (stable_key(m, members[m]), m))


def partitions_by_subscribers(members: Mapping[str, Subscriber], topics: TopicLayouts
                              ) -> dict[tuple[str, ...], list[TopicPartition]]:
    """Every assignable partition, grouped by the (ordered) members that may own it; members with
    the same subscription share one list, in topic then partition order."""
    order = ordered_members(members)
    groups: dict[tuple[str, ...], list[TopicPartition]] = {}
    for topic in sorted(topics):
        eligible = tuple(m for m in order if topic in members[m].topics)
        if eligible:
            groups.setdefault(eligible, []).extend((topic, index) for index in range(len(topics[topic])))
    return groups


def blocks(partitions: list[TopicPartition], owners: tuple[str, ...]) -> dict[str, list[TopicPartition]]:
    """Contiguous blocks, as even as can be: the first len % n owners get one more."""
    size, extra = divmod(len(partitions), len(owners))
    result, start = {}, 0
    for position, owner in enumerate(owners):
        end = start + size + (1 if position < extra else 0)
        result[owner] = partitions[start:end]
        start = end
    return result


def frozen(members: Mapping[str, Subscriber], draft: Mapping[str, list[TopicPartition] | set[TopicPartition]]
           ) -> Assignment:
    return {member: frozenset(draft.get(member, ())) for member in members}

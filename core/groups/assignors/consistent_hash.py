"""`consistent-hash`: each member is VIRTUAL_NODES points on a hash ring (hashed from its instance
id, else its member id); a partition goes to the first point at or after its own hash among the
members that may own it. A member joining takes only the partitions that land on its points, a
member leaving hands over only its own: nothing else moves. Balance is statistical, not exact."""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Mapping, Set

from core.groups.assignors.spec import (Assignment, Subscriber, TopicLayouts, TopicPartition, frozen,
                                        partitions_by_subscribers, stable_key)

VIRTUAL_NODES = 160   # points per member: more points, more even shares (spread ~ 1/sqrt(points))


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def assign(members: Mapping[str, Subscriber], topics: TopicLayouts,
           current: Mapping[str, Set[TopicPartition]]) -> Assignment:
    draft: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for owners, partitions in partitions_by_subscribers(members, topics).items():
        ring = sorted((_hash(f"{stable_key(m, members[m])}#{v}"), m) for m in owners for v in range(VIRTUAL_NODES))
        points = [point for point, _ in ring]
        for topic, index in partitions:
            at = bisect.bisect_left(points, _hash(f"{topic}/{index}")) % len(ring)
            draft[ring[at][1]].append((topic, index))
    return frozen(members, draft)

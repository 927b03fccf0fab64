"""A consistent hash ring: each value goes to one member, members get shares proportional to weight.

Every member has POINTS_PER_WEIGHT points per unit of weight on a ring of 64-bit hashes (fewer,
proportionally, once the ring would exceed MAX_POINTS); a value goes to the member owning the first
point at or after the value's hash, wrapping around. A point's position depends only on the
member's name and the point's number, so the same bindings give the same ring in every process
and after every restart, and adding a member of weight w to members of total weight W moves only
about w / (W + w) of the values, all of them to the new member.

Hash: BLAKE2b with an 8-byte digest, read big-endian.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

POINTS_PER_WEIGHT = 500
MAX_POINTS = 1 << 16

Member = TypeVar("Member", bound=Hashable)


def hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class HashRing(Generic[Member]):
    def __init__(self, weighted: Iterable[tuple[Member, str, int]]) -> None:
        """`weighted`: (member, its stable label, weight); a member listed twice adds the weights."""
        weights: dict[Member, int] = {}
        labels: dict[Member, str] = {}
        for member, label, weight in weighted:
            weights[member] = weights.get(member, 0) + weight
            labels[member] = label
        total = sum(weights.values()) * POINTS_PER_WEIGHT
        scale = min(1.0, MAX_POINTS / total) if total else 1.0
        points: list[tuple[int, str, Member]] = []
        for member, weight in weights.items():
            label = labels[member].encode("utf-8", "surrogatepass")
            for index in range(max(1, round(weight * POINTS_PER_WEIGHT * scale))):
                points.append((hash64(b"%s\0%d" % (label, index)), labels[member], member))
        points.sort(key=lambda point: (point[0], point[1]))
        self._hashes = [point[0] for point in points]
        self._members = [point[2] for point in points]

    def __len__(self) -> int:
        return len(self._hashes)

    def pick(self, value: bytes) -> Member | None:
        """The member owning `value` (None on an empty ring)."""
        if not self._hashes:
            return None
        index = bisect.bisect_left(self._hashes, hash64(value))
        return self._members[index if index < len(self._members) else 0]

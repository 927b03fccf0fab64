"""A share group's membership (KIP-932): who is in it, what they subscribe to, what they may fetch.

Members join with epoch 0, heartbeat with their current epoch, leave with epoch -1, and are
dropped when no heartbeat came for `session_timeout_ms`. The group epoch moves whenever the
membership or a subscription changes.

Assignment: every member is given every partition of the topics it subscribes to. Records, not
partitions, are what members share: each record goes to one member at a time through the share
partition's locks (share_partition.py), so there is nothing to balance and nothing to revoke, and
more members than partitions all get work. (Kafka's simple assignor spreads partitions when there
are more partitions than members; fetching from every partition costs one more partition per fetch
request and nothing per record.) A member's epoch becomes the group epoch whenever its assignment
changes, and the new assignment goes out with that heartbeat's answer.

Owned by the event loop; synchronous.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from core.clock import Clock
from core.errors import FencedMemberEpoch, GroupFull, InvalidGroupRequest, UnknownMember

JOIN_EPOCH = 0
LEAVE_EPOCH = -1


@dataclass(slots=True)
class ShareMember:
    member_id: str
    epoch: int
    topics: frozenset[str]
    rack: str | None
    client_id: str
    client_host: str
    deadline_ms: int
    assignment: frozenset[tuple[str, int]] = frozenset()


@dataclass(frozen=True, slots=True)
class ShareAnswer:
    member_id: str
    epoch: int
    assignment: frozenset[tuple[str, int]] | None    # None: unchanged since the last answer


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    clock: Clock
    session_timeout_ms: int = 45_000
    max_size: int = 0x7FFFFFFF
    group_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topics}

    def heartbeat(self, *, member_id: str, epoch: int, topics: list[str] | None, rack: str | None,
                  client_id: str, client_host: str, partitions: Mapping[str, int]) -> ShareAnswer:
        """One heartbeat; `partitions` gives the partition count of each existing subscribed topic."""
        now = self.clock.now_ms()
        if epoch == LEAVE_EPOCH:
            if self.members.pop(member_id, None) is not None:
                self.group_epoch += 1
            return ShareAnswer(member_id, LEAVE_EPOCH, None)
        member = self.members.get(member_id)
        if epoch == JOIN_EPOCH:
            if topics is None:
                raise InvalidGroupRequest("a joining member must name its subscribed topics")
            if member is None:
                if len(self.members) >= self.max_size:
                    raise GroupFull(f"share group {self.group_id} has {len(self.members)} members")
                member_id = member_id or str(uuid.uuid4())
                member = self.members[member_id] = ShareMember(member_id, 0, frozenset(topics), rack, client_id,
                                                               client_host, 0)
                self.group_epoch += 1
        elif member is None:
            raise UnknownMember(f"member {member_id} is not in share group {self.group_id}")
        elif epoch != member.epoch:
            raise FencedMemberEpoch(f"member {member_id} has epoch {member.epoch}, not {epoch}")
        member.deadline_ms = now + self.session_timeout_ms
        member.rack = rack if rack is not None else member.rack
        if topics is not None and frozenset(topics) != member.topics:
            member.topics = frozenset(topics)
            self.group_epoch += 1
        assignment = frozenset((t, i) for t in member.topics for i in range(partitions.get(t, 0)))
        if assignment != member.assignment or epoch == JOIN_EPOCH:
            member.assignment = assignment
            member.epoch = max(self.group_epoch, member.epoch + 1)
            return ShareAnswer(member.member_id, member.epoch, assignment)
        return ShareAnswer(member.member_id, member.epoch, None)

    def expire(self) -> list[str]:
        """Drop the members whose session ran out; returns their ids."""
        now = self.clock.now_ms()
        gone = [m for m, member in self.members.items() if member.deadline_ms <= now]
        for member_id in gone:
            del self.members[member_id]
        if gone:
            self.group_epoch += 1
        return gone

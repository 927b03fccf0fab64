"""A consumer group of Kafka's consumer protocol (KIP-848): the broker assigns the partitions.

Protocol-free, and the rules are Kafka's group coordinator's:

- The group epoch grows whenever what the assignment depends on changes: a member joins or
  leaves, a subscription, rack or assignor changes, a subscribed topic gains partitions. The
  target assignment is then computed at once, by the server-side assignor the members ask for
  (the most asked for; ties: by name; none: `uniform`), so the assignment epoch is the group epoch.
- Each member converges to its target through its heartbeats (reconciliation). A member never
  gets a partition another member still holds: first the old owner is told to give it up (its
  assignment no longer lists it) and acknowledges by a heartbeat whose owned partitions leave it
  out; only then may the new owner have it. A member that must give up partitions keeps its epoch
  until it acknowledges (UNREVOKED), then moves to the assignment epoch; a member still waiting
  for partitions others hold has the new epoch and what is free so far (UNRELEASED).
- A member is fenced (removed, its partitions freed) when its session times out without a
  heartbeat, or when it does not give up revoked partitions within its rebalance timeout.
- Epochs: a heartbeat must carry the member's epoch, or the previous one while what it owns is
  within its assignment (the answer that moved it on was lost); else FENCED_MEMBER_EPOCH. An
  unknown member id is UNKNOWN_MEMBER_ID. Epoch 0 joins (member ids are the client's: KIP-1082),
  -1 leaves, -2 leaves for a while: a static member (instance id) keeps its partitions until its
  session ends, and the instance joining again under a new member id gets them back without a
  rebalance. An instance id held by a member that has not left is UNRELEASED_INSTANCE_ID.
- A member subscribes to topic names, a regular expression, or both. The expression must match a
  whole topic name (Kafka's RE2 rules; Python's `re` here) and is matched against the namespace's
  topics on every heartbeat (internal topics, "__..." names, excluded), so a new matching topic
  joins the subscription at the next heartbeat of any member.

Time comes from the injected Clock; `expire()` applies what is due, `next_deadline()` says when.
Owned by the event loop: every method runs to completion without awaiting.
"""

from __future__ import annotations

import enum
import functools
import logging
import re
from collections import Counter
from collections.abc import Collection, Iterable, Set
from dataclasses import dataclass

from core.clock import Clock
from core.errors import (FencedInstanceId, FencedMemberEpoch, GroupFull, InvalidGroupRequest,
                         InvalidRegularExpression, StaleMemberEpoch, UnknownMember, UnreleasedInstanceId,
                         UnsupportedAssignor, UnsupportedGroupVersion)
from core.groups.assignors import ASSIGNORS, DEFAULT
from core.groups.assignors.spec import Subscriber, TopicLayouts
from core.groups.settings import GroupSettings
from core.groups.state import GroupState
from core.groups.values import GroupOverview

log = logging.getLogger("gateway.core")

TopicPartition = tuple[str, int]
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
CONSUMER_PROTOCOL_TYPE = "consumer"


class Reconciliation(enum.Enum):
    STABLE = "stable"                  # owns its target assignment (at the assignment epoch)
    UNREVOKED = "unrevoked"            # must give up partitions first; still at its old epoch
    UNRELEASED = "unreleased"          # at the new epoch, waiting for partitions others still hold


@dataclass(slots=True, eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rack: str | None = None
    names: frozenset[str] = frozenset()                    # the topic names it subscribes to
    regex: str | None = None                               # and the expression
    topics: frozenset[str] = frozenset()                   # both together: what it is assigned from
    assignor: str | None = None
    rebalance_timeout_ms: int = 0
    epoch: int = 0
    previous_epoch: int = -1
    state: Reconciliation = Reconciliation.STABLE
    assigned: frozenset[TopicPartition] = frozenset()      # what it may consume now
    revoking: frozenset[TopicPartition] = frozenset()      # asked to give up, not yet acknowledged
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    left_static: bool = False          # a static member that left for a while (epoch -2)
    sent: frozenset[TopicPartition] | None = None          # the assignment last answered to it

    def subscriber(self) -> Subscriber:
        return Subscriber(self.topics, self.rack, self.instance_id)


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    member_id: str
    epoch: int
    heartbeat_interval_ms: int
    assignment: frozenset[TopicPartition] | None   # None: unchanged since the last answer


@dataclass(frozen=True, slots=True)
class ConsumerMemberSummary:
    member_id: str
    instance_id: str | None
    rack: str | None
    epoch: int
    client_id: str
    client_host: str
    topics: tuple[str, ...]
    regex: str | None
    assigned: frozenset[TopicPartition]
    target: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class ConsumerGroupSummary:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ConsumerMemberSummary, ...] = ()


@dataclass(slots=True)
class _Request:
    """A heartbeat's fields; None: not sent (unchanged since the last heartbeat)."""

    member_id: str
    epoch: int
    instance_id: str | None
    rack: str | None
    rebalance_timeout_ms: int
    topics: frozenset[str] | None
    regex: str | None
    assignor: str | None
    owned: frozenset[TopicPartition] | None
    client_id: str
    client_host: str


class ConsumerGroup:
    protocol_type = CONSUMER_PROTOCOL_TYPE
    protocol_name = None

    def __init__(self, group_id: str, clock: Clock, settings: GroupSettings | None = None, *,
                 group_epoch: int = 0) -> None:
        self.group_id = group_id
        self._clock = clock
        self._settings = settings or GroupSettings()
        self.group_epoch = group_epoch
        self.assignment_epoch = group_epoch
        self.members: dict[str, ConsumerMember] = {}
        self._static: dict[str, str] = {}                       # instance id -> member id
        self.target: dict[str, frozenset[TopicPartition]] = {}
        self._holder: dict[TopicPartition, str] = {}            # partition -> member that still holds it
        self.topics: dict[str, tuple[str | None, ...]] = {}     # the layouts the target was computed for
        self.assignor = DEFAULT
        self.dead = False
        self.empty_since_ms = clock.now_ms()

    # --- queries ----------------------------------------------------------------------------------

    @property
    def state(self) -> GroupState:
        if self.dead:
            return GroupState.DEAD
        if not self.members:
            return GroupState.EMPTY
        if self.assignment_epoch < self.group_epoch:
            return GroupState.ASSIGNING
        if any(m.epoch != self.assignment_epoch or m.state is not Reconciliation.STABLE
               for m in self.members.values() if not m.left_static):
            return GroupState.RECONCILING
        return GroupState.STABLE

    @property
    def generation(self) -> int:
        return self.group_epoch

    def has_member(self, member_id: str) -> bool:
        member = self.members.get(member_id)
        return member is not None and not member.left_static

    def subscribed_topics(self) -> frozenset[str]:
        return frozenset().union(*(m.topics for m in self.members.values()))

    def regexes(self) -> set[str]:
        return {m.regex for m in self.members.values() if m.regex is not None}

    def overview(self) -> GroupOverview:
        return GroupOverview(self.group_id, CONSUMER_PROTOCOL_TYPE, self.state.value, CONSUMER_PROTOCOL_TYPE)

    def summary(self) -> ConsumerGroupSummary:
        members = tuple(ConsumerMemberSummary(m.member_id, m.instance_id, m.rack, m.epoch, m.client_id, m.client_host,
                                              tuple(sorted(m.names)), m.regex, m.assigned,
                                              self.target.get(m.member_id, frozenset()))
                        for m in self.members.values())
        return ConsumerGroupSummary(self.group_id, self.state.value, self.group_epoch, self.assignment_epoch,
                                    self.assignor, members)

    def validate_fetch(self, *, member_id: str | None, member_epoch: int) -> None:
        """Kafka's check of an OffsetFetch v9 naming a member: it must be in the group, at its epoch."""
        member = self.members.get(member_id) if member_id is not None else None
        if member is None or member.left_static:
            raise UnknownMember(f"no member {member_id!r} in group {self.group_id}")
        if member_epoch != member.epoch:
            raise StaleMemberEpoch(f"member {member_id} is at epoch {member.epoch}, not {member_epoch}")

    def next_deadline(self) -> int | None:
        deadlines = [m.session_deadline_ms for m in self.members.values()]
        deadlines += [m.revocation_deadline_ms for m in self.members.values() if m.revocation_deadline_ms is not None]
        idle = self.idle_deadline_ms
        if idle is not None:
            deadlines.append(idle)
        return min(deadlines, default=None)

    @property
    def idle_deadline_ms(self) -> int | None:
        if self.members or self.dead:
            return None
        return self.empty_since_ms + self._settings.empty_group_idle_ms

    # --- ConsumerGroupHeartbeat -------------------------------------------------------------------

    def heartbeat(self, *, member_id: str, member_epoch: int, instance_id: str | None, rack: str | None,
                  rebalance_timeout_ms: int, topics: Set[str] | None, assignor: str | None,
                  owned: Set[TopicPartition] | None, client_id: str, client_host: str,
                  layouts: TopicLayouts, regex: str | None = None,
                  namespace_topics: Collection[str] = ()) -> HeartbeatAnswer:
        """One heartbeat. `layouts` holds the partitions (and their racks) of every topic the group
        subscribes to after this heartbeat, as they are now; `namespace_topics` every topic name,
        when expressions are in use (this request's or members'). `regex` "" drops the expression.
        Raises the group's refusals."""
        request = _Request(member_id, member_epoch, instance_id, rack, rebalance_timeout_ms,
                           None if topics is None else frozenset(topics), regex, assignor,
                           None if owned is None else frozenset(owned), client_id, client_host)
        if request.assignor is not None and request.assignor not in ASSIGNORS:
            raise UnsupportedAssignor(f"no server-side assignor {request.assignor!r}; known: {sorted(ASSIGNORS)}")
        if member_id == "":
            raise InvalidGroupRequest("the member id must not be empty")
        if regex:
            pattern(regex)      # InvalidRegularExpression before anything changes
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(request)
        if member_epoch == JOIN_EPOCH:
            member, changed = self._join(request)
        else:
            member = self._known_member(request)
            changed = False
        changed |= self._update(member, request)
        changed |= self._match_regexes(namespace_topics)
        member.session_deadline_ms = self._clock.now_ms() + self._settings.consumer_session_timeout_ms
        changed |= self._refresh_layouts(layouts)
        if changed:
            self._bump(f"member {member.member_id} joined or changed")
        self._reconcile(member, request.owned)
        return self._answer(member, request)

    def _join(self, request: _Request) -> tuple[ConsumerMember, bool]:
        if request.topics is None and not request.regex:
            raise InvalidGroupRequest("a joining member must send its subscribed topic names or regex")
        if request.rebalance_timeout_ms < 0:
            raise InvalidGroupRequest("a joining member must send its rebalance timeout")
        if request.owned is None:
            raise InvalidGroupRequest("a joining member must send its owned partitions (none)")
        existing = self.members.get(request.member_id)
        if existing is not None and existing.left_static:
            existing = None
        held_by = self._static.get(request.instance_id) if request.instance_id is not None else None
        if held_by is not None and held_by != request.member_id and not self.members[held_by].left_static:
            raise UnreleasedInstanceId(f"instance {request.instance_id!r} is still member {held_by}")
        if existing is None and held_by is None and len(self.members) >= self._settings.max_size:
            raise GroupFull(f"group {self.group_id} has its maximum of {self._settings.max_size} members")
        if existing is not None:
            # It lost its state (and, as a joining member, owns nothing): it starts over.
            self._remove(existing, "joined again with epoch 0")
        elif held_by is not None:
            return self._replace_static(self.members[held_by], request), False
        member = ConsumerMember(request.member_id, request.instance_id, request.client_id, request.client_host)
        self.members[member.member_id] = member
        if request.instance_id is not None:
            self._static[request.instance_id] = member.member_id
        log.info("group %s: member %s joined (instance %s)", self.group_id, member.member_id, request.instance_id)
        return member, True

    def _replace_static(self, previous: ConsumerMember, request: _Request) -> ConsumerMember:
        """A static member comes back under a new member id: it takes its old place as it was."""
        del self.members[previous.member_id]
        old_id, previous.member_id = previous.member_id, request.member_id
        previous.left_static = False
        previous.sent = None
        previous.client_id, previous.client_host = request.client_id, request.client_host
        self.members[previous.member_id] = previous
        self._static[request.instance_id] = previous.member_id   # type: ignore[index]
        if old_id in self.target:
            self.target[previous.member_id] = self.target.pop(old_id)
        for tp, holder in self._holder.items():
            if holder == old_id:
                self._holder[tp] = previous.member_id
        log.info("group %s: static member %s rejoined as %s", self.group_id, previous.instance_id, previous.member_id)
        return previous

    def _known_member(self, request: _Request) -> ConsumerMember:
        member = self.members.get(request.member_id)
        if member is None or member.left_static:
            raise UnknownMember(f"no member {request.member_id!r} in group {self.group_id}")
        if request.instance_id is not None and member.instance_id != request.instance_id:
            raise FencedInstanceId(f"member {member.member_id} is instance {member.instance_id!r}")
        if request.epoch == member.epoch:
            return member
        if (request.epoch == member.previous_epoch and request.owned is not None
                and request.owned <= member.assigned):
            return member    # it missed the answer that moved it to its current epoch
        raise FencedMemberEpoch(f"member {member.member_id} is at epoch {member.epoch}, not {request.epoch}")

    def _update(self, member: ConsumerMember, request: _Request) -> bool:
        """Apply what the heartbeat changed; True if the target assignment depends on it."""
        changed = False
        if request.topics is not None and request.topics != member.names:
            member.names = request.topics
            changed = True
        if request.regex is not None and (request.regex or None) != member.regex:
            member.regex = request.regex or None
            changed = True
        if request.rack is not None and request.rack != member.rack:
            member.rack = request.rack
            changed = True
        if request.assignor is not None and request.assignor != member.assignor:
            member.assignor = request.assignor
            changed = True
        if request.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        return changed

    def _match_regexes(self, namespace_topics: Collection[str]) -> bool:
        """Each member's topics: its names and what its expression matches now."""
        changed = False
        for member in self.members.values():
            topics = member.names
            if member.regex is not None:
                topics |= matching([member.regex], namespace_topics)
            if topics != member.topics:
                member.topics = topics
                changed = True
        return changed

    def _refresh_layouts(self, layouts: TopicLayouts) -> bool:
        wanted = self.subscribed_topics()
        current = {topic: tuple(racks) for topic, racks in layouts.items() if topic in wanted}
        if current == self.topics:
            return False
        self.topics = current
        return True

    def _leave(self, request: _Request) -> HeartbeatAnswer:
        member = self.members.get(request.member_id)
        if member is None:
            raise UnknownMember(f"no member {request.member_id!r} in group {self.group_id}")
        if request.epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            member.left_static = True     # its partitions wait for the instance until its session ends
            log.info("group %s: static member %s left for now", self.group_id, member.instance_id)
        else:
            self._remove(member, "left")
            self._bump(f"member {member.member_id} left")
        return HeartbeatAnswer(request.member_id, request.epoch, self._settings.consumer_heartbeat_interval_ms, None)

    # --- time -------------------------------------------------------------------------------------

    def expire(self) -> None:
        now = self._clock.now_ms()
        gone = []
        for member in self.members.values():
            if member.session_deadline_ms <= now:
                gone.append((member, "timed out"))
            elif member.revocation_deadline_ms is not None and member.revocation_deadline_ms <= now:
                gone.append((member, "did not give up its revoked partitions in time"))
        for member, why in gone:
            self._remove(member, why)
        if gone:
            self._bump(f"{len(gone)} member(s) fenced")

    def mark_dead(self) -> None:
        self.dead = True

    def hand_over(self, error: Exception) -> None:
        """Another coordinator takes the group (nothing waits here: members learn it by heartbeat)."""
        self.dead = True

    # --- offsets ----------------------------------------------------------------------------------

    def validate_commit(self, *, member_id: str, generation: int, partitions: Iterable[TopicPartition],
                        epoch_aware: bool = True) -> None:
        """Kafka's rules: without a member (epoch < 0) only while the group has no members; a member
        commits at its own epoch, in a request that can carry one (`epoch_aware`: OffsetCommit v9+),
        else STALE_MEMBER_EPOCH / UNSUPPORTED_VERSION. An older epoch of the member is accepted for
        partitions it still holds (as KIP-1251 has it): the answer moving it on may have crossed
        the commit, and nobody else can have consumed them meanwhile."""
        if generation < 0 and not self.members:
            return
        member = self.members.get(member_id)
        if member is None or member.left_static:
            raise UnknownMember(f"no member {member_id!r} in group {self.group_id}")
        if not epoch_aware:
            raise UnsupportedGroupVersion(f"member {member_id} must commit with OffsetCommit v9 or later")
        if generation == member.epoch:
            return
        if 0 < generation < member.epoch and set(partitions) <= member.assigned | member.revoking:
            return
        raise StaleMemberEpoch(f"member {member_id} is at epoch {member.epoch}, not {generation}")

    # --- assignment -------------------------------------------------------------------------------

    def _bump(self, reason: str) -> None:
        self.group_epoch += 1
        self.assignor = self._preferred_assignor()
        subscribers = {m.member_id: m.subscriber() for m in self.members.values()}
        self.target = ASSIGNORS[self.assignor](subscribers, self.topics, self.target)
        self.assignment_epoch = self.group_epoch
        if not self.members:
            self.empty_since_ms = self._clock.now_ms()
        log.info("group %s: epoch %d (%s), %s assignment of %d partitions to %d members", self.group_id,
                 self.group_epoch, reason, self.assignor, sum(len(p) for p in self.target.values()),
                 len(self.members))

    def _preferred_assignor(self) -> str:
        votes = Counter(m.assignor for m in self.members.values() if m.assignor is not None)
        if not votes:
            return DEFAULT
        return min(votes, key=lambda name: (-votes[name], name))

    def _reconcile(self, member: ConsumerMember, owned: frozenset[TopicPartition] | None) -> None:
        if member.state is Reconciliation.UNREVOKED:
            if owned is None or owned & member.revoking:
                return       # still owns some of what it must give up
            self._release(member, member.revoking)
            member.revoking = frozenset()
            member.revocation_deadline_ms = None
            member.state = Reconciliation.STABLE
        if member.epoch == self.assignment_epoch and member.state is Reconciliation.STABLE:
            return
        target = self.target.get(member.member_id, frozenset())
        keep = member.assigned & target
        revoke = member.assigned - target
        if revoke:
            member.assigned = keep
            member.revoking = revoke
            member.state = Reconciliation.UNREVOKED
            member.revocation_deadline_ms = self._clock.now_ms() + member.rebalance_timeout_ms
            return
        free = frozenset(tp for tp in target - keep if self._holder.get(tp, member.member_id) == member.member_id)
        for tp in free:
            self._holder[tp] = member.member_id
        member.assigned = keep | free
        if member.epoch != self.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
        member.state = Reconciliation.STABLE if member.assigned == target else Reconciliation.UNRELEASED

    def _release(self, member: ConsumerMember, partitions: Set[TopicPartition]) -> None:
        for tp in partitions:
            if self._holder.get(tp) == member.member_id:
                del self._holder[tp]

    def _remove(self, member: ConsumerMember, why: str) -> None:
        log.info("group %s: member %s %s", self.group_id, member.member_id, why)
        self._release(member, member.assigned | member.revoking)
        del self.members[member.member_id]
        self.target.pop(member.member_id, None)
        if member.instance_id is not None and self._static.get(member.instance_id) == member.member_id:
            del self._static[member.instance_id]

    def _answer(self, member: ConsumerMember, request: _Request) -> HeartbeatAnswer:
        # As Kafka: on joining, on a full request (the client may have lost track), or when changed.
        full = request.rebalance_timeout_ms >= 0 and request.topics is not None and request.owned is not None
        if request.epoch == JOIN_EPOCH or full or member.sent != member.assigned:
            member.sent = member.assigned
            assignment: frozenset[TopicPartition] | None = member.assigned
        else:
            assignment = None
        return HeartbeatAnswer(member.member_id, member.epoch, self._settings.consumer_heartbeat_interval_ms,
                               assignment)


@functools.lru_cache(maxsize=256)
def pattern(regex: str) -> re.Pattern:
    try:
        return re.compile(regex)
    except re.error as exc:
        raise InvalidRegularExpression(f"invalid topic regex {regex!r}: {exc}") from None


def matching(regexes: Iterable[str], topics: Collection[str]) -> frozenset[str]:
    """The topics some expression matches in full, internal ones ("__...") left out."""
    patterns = [pattern(regex) for regex in regexes]
    return frozenset(t for t in topics if not t.startswith("__") and any(p.fullmatch(t) for p in patterns))

"""A membership group: members, generations, the chosen protocol, the leader and its assignments.

Protocol-free: members bring opaque (protocol name, metadata) pairs and the leader hands back
opaque assignments; what they mean is the client protocol's business. The rules are Kafka's
group coordinator's:

- A join moves the group to PreparingRebalance; the rebalance completes once every known member
  has joined again (and no member id handed out by a two-phase join is outstanding), or when the
  rebalance timeout (the largest of the members') passes, dropping dynamic members that did not
  rejoin. A new, empty group first waits `initial_rebalance_delay_ms`, once more for every member
  that joined meanwhile, up to the rebalance timeout, so members starting together form one
  generation.
- Completion starts a new generation: the protocol is the one most members prefer among those all
  of them support; the leader (kept if it rejoined) gets every member's metadata, the others none.
- The leader's SyncGroup carries the assignments; every member waiting in SyncGroup gets its own
  and the group is Stable. Members missing from the leader's assignment get an empty one.
- A member that sends no heartbeat (nor commit, nor sync) within its session timeout is removed,
  which starts a rebalance; members waiting on a rebalance are exempt. A member that joined but
  never completed a rebalance is removed after `new_member_join_timeout_ms`.
- A join that would take the group past `max_size` members is refused (GroupFull); while a
  rebalance is prepared only members that joined again count, and a known member refused then is
  removed.
- Static members (an instance id) keep their place across restarts: rejoining with an empty member
  id gets a new member id and, when the group is Stable and the chosen protocol would not change,
  its old assignment back without a rebalance. A request naming the instance with another member
  id is fenced.

Time comes from the injected Clock; `expire()` applies whatever is due, and `next_deadline()` says
when that next is. Joins and syncs answer through futures that complete when the rebalance does.
Owned by the event loop: every method runs to completion without awaiting.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from core.clock import Clock
from core.errors import (FencedInstanceId, GroupError, GroupFull, IllegalGeneration, InconsistentGroupProtocol,
                         MemberIdRequired, RebalanceInProgress, UnknownMember)
from core.groups.member import Member
from core.groups.settings import GroupSettings
from core.groups.state import VALID_PREVIOUS, GroupState
from core.groups.values import GroupOverview, GroupSummary, JoinedMember, JoinResult, MemberSummary, SyncResult

log = logging.getLogger("gateway.core")

Protocols = tuple[tuple[str, bytes], ...]


@dataclass(slots=True)
class _InitialDelay:
    """The wait of a new group for more members: the current delay and what may still follow."""

    delay_ms: int
    remaining_ms: int


class MembershipGroup:
    def __init__(self, group_id: str, clock: Clock, settings: GroupSettings | None = None, *,
                 protocol_type: str | None = None) -> None:
        self.group_id = group_id
        self._clock = clock
        self._settings = settings or GroupSettings()
        self.state = GroupState.EMPTY
        self.generation = 0
        self.protocol_type = protocol_type
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self._static: dict[str, str] = {}        # instance id -> member id
        self._pending: dict[str, int] = {}       # member ids handed out by MEMBER_ID_REQUIRED -> expiry
        self._support = Counter[str]()           # protocol name -> members supporting it
        self._join_deadline_ms: int | None = None
        self._initial_delay: _InitialDelay | None = None
        self._new_member_added = False
        self.empty_since_ms = clock.now_ms()

    # --- queries ----------------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def static_member_id(self, instance_id: str) -> str | None:
        return self._static.get(instance_id)

    def is_pending(self, member_id: str) -> bool:
        return member_id in self._pending

    def member_metadata(self) -> list[bytes]:
        """Every member's metadata for the chosen protocol (empty before a protocol is chosen)."""
        if self.protocol_name is None:
            return []
        return [m.metadata(self.protocol_name) for m in self.members.values()
                if self.protocol_name in m.protocol_names]

    def summary(self) -> GroupSummary:
        stable = self.state is GroupState.STABLE and self.protocol_name is not None
        members = tuple(MemberSummary(m.member_id, m.instance_id, m.client_id, m.client_host,
                                      m.metadata(self.protocol_name) if stable else b"",
                                      m.assignment if stable else b"")
                        for m in self.members.values())
        return GroupSummary(self.group_id, self.state.value, self.protocol_type or "",
                            (self.protocol_name or "") if stable else "", members)

    def overview(self) -> GroupOverview:
        return GroupOverview(self.group_id, self.protocol_type or "", self.state.value)

    def next_deadline(self) -> int | None:
        """When `expire()` next has something to do (None: nothing is timed)."""
        deadlines = list(self._pending.values())
        deadlines += [m.deadline_ms for m in self.members.values() if m.deadline_ms is not None]
        if self.state is GroupState.PREPARING_REBALANCE and self._join_deadline_ms is not None:
            deadlines.append(self._join_deadline_ms)
        idle = self.idle_deadline_ms
        if idle is not None:
            deadlines.append(idle)
        return min(deadlines, default=None)

    @property
    def idle_deadline_ms(self) -> int | None:
        """When an Empty group has been idle long enough to be dropped from memory."""
        if self.state is not GroupState.EMPTY:
            return None
        return self.empty_since_ms + self._settings.empty_group_idle_ms

    # --- JoinGroup --------------------------------------------------------------------------------

    def join(self, *, member_id: str, instance_id: str | None, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str, protocols: Protocols,
             require_known_member_id: bool) -> asyncio.Future[JoinResult]:
        """Join (or rejoin). Errors known at once are raised; the future resolves when the rebalance
        completes (or with the error that ended this member's wait)."""
        if not self._supports(protocol_type, [name for name, _ in protocols]):
            raise InconsistentGroupProtocol(f"group {self.group_id} does not support protocol type "
                                            f"{protocol_type!r} with protocols {[n for n, _ in protocols]}",
                                            member_id=member_id)
        if not self._accepts(member_id):
            known = self.members.get(member_id)
            if known is not None:
                self._remove_member_and_update(known, "removed: the group is over its maximum size")
            raise GroupFull(f"group {self.group_id} has its maximum of {self._settings.max_size} members",
                            member_id="")
        timeouts = (session_timeout_ms, rebalance_timeout_ms)
        if member_id == "":
            waiter = self._join_new(instance_id, client_id, client_host, timeouts, protocol_type, protocols,
                                    require_known_member_id)
        else:
            waiter = self._join_known(member_id, instance_id, client_id, client_host, timeouts, protocol_type,
                                      protocols)
        self._maybe_complete_join()
        return waiter

    def _accepts(self, member_id: str) -> bool:
        """Whether a join keeps the group within max_size (as Kafka counts: while preparing a
        rebalance the members that joined again, otherwise all members)."""
        limit = self._settings.max_size
        member = self.members.get(member_id)
        if self.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if self.state is GroupState.PREPARING_REBALANCE:
            return ((member is not None and member.awaiting_join)
                    or sum(m.awaiting_join for m in self.members.values()) < limit)
        return member is not None or len(self.members) < limit

    def _supports(self, protocol_type: str, names: list[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return protocol_type != "" and bool(names)
        return (self.protocol_type == protocol_type
                and any(self._support[name] == len(self.members) for name in names))

    def _join_new(self, instance_id: str | None, client_id: str, client_host: str, timeouts: tuple[int, int],
                  protocol_type: str, protocols: Protocols, require_known_member_id: bool) -> asyncio.Future:
        member_id = f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_member_id = self._static.get(instance_id)
            if old_member_id is not None:
                return self._replace_static_member(old_member_id, member_id, protocols, timeouts)
        elif require_known_member_id:
            self._pending[member_id] = self._clock.now_ms() + timeouts[0]
            raise MemberIdRequired(f"join group {self.group_id} again with member id {member_id}",
                                   member_id=member_id)
        return self._add_member(member_id, instance_id, client_id, client_host, timeouts, protocol_type, protocols)

    def _join_known(self, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                    timeouts: tuple[int, int], protocol_type: str, protocols: Protocols) -> asyncio.Future:
        if member_id in self._pending:
            return self._add_member(member_id, None, client_id, client_host, timeouts, protocol_type, protocols)
        self._validate_member(member_id, instance_id)
        member = self.members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(member, protocols, timeouts)
        if self.state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # it missed the answer to its previous join: answer again for the current generation
                return self._resolved(self._join_result(member.member_id, with_members=self._is_leader(member_id)))
            return self._update_member_and_rebalance(member, protocols, timeouts)
        if self.state is GroupState.STABLE:
            # a rejoining leader forces a rebalance (how it asks for a new assignment)
            if self._is_leader(member_id) or not member.matches(protocols):
                return self._update_member_and_rebalance(member, protocols, timeouts)
            return self._resolved(self._join_result(member.member_id, with_members=False))
        raise UnknownMember(f"group {self.group_id} is {self.state.value}")

    def _add_member(self, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                    timeouts: tuple[int, int], protocol_type: str, protocols: Protocols) -> asyncio.Future:
        session_ms, rebalance_ms = timeouts
        member = Member(member_id, instance_id, client_id, client_host, session_ms, rebalance_ms, protocol_type,
                        protocols, is_new=True)
        if self.state is GroupState.PREPARING_REBALANCE and self.generation == 0:
            self._new_member_added = True   # a new group waits a little longer for more members
        waiter = self._new_future()
        if not self.members:
            self.protocol_type = protocol_type
        if self.leader_id is None:
            self.leader_id = member_id
        self.members[member_id] = member
        self._support.update(member.protocol_names)
        if instance_id is not None:
            self._static[instance_id] = member_id
        member.join_waiter = waiter
        # A new member cannot heartbeat before its first generation; it is dropped if that never comes.
        member.deadline_ms = self._clock.now_ms() + self._settings.new_member_join_timeout_ms
        self._pending.pop(member_id, None)
        self._maybe_prepare_rebalance(f"member {member_id} (instance {instance_id}) joined")
        return waiter

    def _replace_static_member(self, old_member_id: str, new_member_id: str, protocols: Protocols,
                               timeouts: tuple[int, int]) -> asyncio.Future:
        """A known static member restarted: it takes its old place under a new member id."""
        current_leader = self.leader_id
        member = self.members.pop(old_member_id)
        fenced = FencedInstanceId(f"instance {member.instance_id} rejoined as {new_member_id}",
                                  member_id=old_member_id)
        self._resolve_join(member, fenced)
        self._resolve_sync(member, fenced)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        assert member.instance_id is not None
        self._static[member.instance_id] = new_member_id
        self._touch(member)
        waiter = self._new_future()
        self._update_member(member, protocols, timeouts, waiter)
        log.info("group %s: static member %s rejoined as %s", self.group_id, member.instance_id, new_member_id)
        if self.state is GroupState.STABLE:
            if self._select_protocol() == self.protocol_name:
                # Same protocol: no rebalance. The old leader id is returned on purpose, so that a
                # rejoining leader does not compute an assignment a Stable group would not use.
                self._resolve_join(member, JoinResult(new_member_id, self.generation, self.protocol_type,
                                                      self.protocol_name, current_leader or ""))
            else:
                self._maybe_prepare_rebalance(f"static member {new_member_id} rejoined with other protocols")
        elif self.state is GroupState.COMPLETING_REBALANCE:
            # the leader may be assigning to the old member id: start over
            self._prepare_rebalance(f"static member {new_member_id} rejoined during the assignment")
        return waiter

    def _update_member_and_rebalance(self, member: Member, protocols: Protocols,
                                     timeouts: tuple[int, int]) -> asyncio.Future:
        changed = not member.matches(protocols)
        waiter = self._new_future()
        self._update_member(member, protocols, timeouts, waiter)
        self._maybe_prepare_rebalance(f"{'leader' if self._is_leader(member.member_id) else 'member'} "
                                      f"{member.member_id} rejoined{' with new metadata' if changed else ''}")
        return waiter

    def _update_member(self, member: Member, protocols: Protocols, timeouts: tuple[int, int],
                       waiter: asyncio.Future | None) -> None:
        self._support.subtract(member.protocol_names)
        member.protocols = protocols
        self._support.update(member.protocol_names)
        member.session_timeout_ms, member.rebalance_timeout_ms = timeouts
        if member.join_waiter is not None and member.join_waiter is not waiter:
            # an earlier JoinGroup of this member (from a connection it gave up on) is superseded
            self._resolve_join(member, RebalanceInProgress("superseded by a newer JoinGroup"))
        member.join_waiter = waiter

    # --- SyncGroup --------------------------------------------------------------------------------

    def sync(self, *, member_id: str, instance_id: str | None, generation: int, protocol_type: str | None,
             protocol_name: str | None, assignments: Mapping[str, bytes]) -> asyncio.Future[SyncResult]:
        self._validate_member(member_id, instance_id)
        if generation != self.generation:
            raise IllegalGeneration(f"group {self.group_id} is at generation {self.generation}, not {generation}")
        if protocol_type is not None and protocol_type != self.protocol_type:
            raise InconsistentGroupProtocol(f"group {self.group_id} has protocol type {self.protocol_type!r}")
        if protocol_name is not None and protocol_name != self.protocol_name:
            raise InconsistentGroupProtocol(f"group {self.group_id} uses protocol {self.protocol_name!r}")
        member = self.members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(f"group {self.group_id} is rebalancing")
        if self.state is GroupState.STABLE:
            self._touch(member)
            return self._resolved(SyncResult(self.protocol_type, self.protocol_name, member.assignment))
        if self.state is not GroupState.COMPLETING_REBALANCE:
            raise UnknownMember(f"group {self.group_id} is {self.state.value}")
        waiter = self._new_future()
        self._resolve_sync(member, RebalanceInProgress("superseded by a newer SyncGroup"))
        member.sync_waiter = waiter
        if self._is_leader(member_id):
            for other in self.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            self._propagate_assignment(None)
            self._transition(GroupState.STABLE)
            log.info("group %s: generation %d is stable with %d members", self.group_id, self.generation,
                     len(self.members))
        return waiter

    # --- Heartbeat, LeaveGroup, commits -----------------------------------------------------------

    def heartbeat(self, *, member_id: str, instance_id: str | None, generation: int) -> None:
        self._validate_member(member_id, instance_id)
        if generation != self.generation:
            raise IllegalGeneration(f"group {self.group_id} is at generation {self.generation}, not {generation}")
        if self.state is GroupState.EMPTY:
            raise UnknownMember(f"group {self.group_id} is empty")
        self._touch(self.members[member_id])
        if self.state is GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(f"group {self.group_id} is rebalancing")

    def leave(self, members: Sequence[tuple[str, str | None]]) -> list[GroupError | None]:
        """Remove members named by (member id, instance id); an empty member id names the instance.
        Returns each one's error (None: removed)."""
        errors: list[GroupError | None] = []
        for member_id, instance_id in members:
            try:
                if member_id == "":
                    current = self._static.get(instance_id) if instance_id is not None else None
                    if current is None:
                        raise UnknownMember(f"no static member {instance_id!r} in group {self.group_id}")
                    member_id = current
                elif member_id in self._pending:
                    del self._pending[member_id]
                    self._maybe_complete_join()
                    errors.append(None)
                    continue
                else:
                    self._validate_member(member_id, instance_id)
                self._remove_member_and_update(self.members[member_id], "left")
                errors.append(None)
            except GroupError as exc:
                errors.append(exc)
        return errors

    def validate_commit(self, *, member_id: str, instance_id: str | None, generation: int) -> None:
        """May this member commit offsets now? A commit with generation -1 and no member id (a
        client managing its own partitions, or an admin) is allowed while the group is Empty."""
        if generation < 0 and self.state is GroupState.EMPTY:
            return
        if generation >= 0 or member_id != "" or instance_id is not None:
            self._validate_member(member_id, instance_id)
            if generation != self.generation:
                raise IllegalGeneration(f"group {self.group_id} is at generation {self.generation}, "
                                        f"not {generation}")
        elif self.state is not GroupState.EMPTY:
            raise UnknownMember(f"group {self.group_id} has members; only they may commit")
        if self.state is GroupState.COMPLETING_REBALANCE:
            raise RebalanceInProgress(f"group {self.group_id} is completing a rebalance")
        if self.state is not GroupState.EMPTY:
            self._touch(self.members[member_id])

    def mark_dead(self) -> None:
        self._transition(GroupState.DEAD)

    def hand_over(self, error: GroupError) -> None:
        """Another coordinator takes the group: dead here, and every waiting join or sync gets `error`."""
        for member in self.members.values():
            self._resolve_join(member, error)
            self._resolve_sync(member, error)
        self.mark_dead()

    # --- time -------------------------------------------------------------------------------------

    def expire(self) -> None:
        """Apply every timeout that is due: pending member ids, sessions, the rebalance wait."""
        now = self._clock.now_ms()
        for member_id in [m for m, deadline in self._pending.items() if deadline <= now]:
            del self._pending[member_id]
        for member in list(self.members.values()):
            if member.deadline_ms is None or member.deadline_ms > now or member.member_id not in self.members:
                continue
            if not member.is_new and (member.awaiting_join or member.awaiting_sync):
                member.deadline_ms = None    # waiting on the group, not silent
                continue
            self._remove_member_and_update(member, "timed out")
        if (self.state is GroupState.PREPARING_REBALANCE and self._join_deadline_ms is not None
                and self._join_deadline_ms <= now):
            self._on_join_deadline(now)
        else:
            self._maybe_complete_join()

    def _on_join_deadline(self, now: int) -> None:
        phase = self._initial_delay
        if phase is not None:
            if self._new_member_added and phase.remaining_ms > 0:
                self._new_member_added = False
                delay = min(self._settings.initial_rebalance_delay_ms, phase.remaining_ms)
                phase.remaining_ms = max(phase.remaining_ms - phase.delay_ms, 0)
                phase.delay_ms = delay
                self._join_deadline_ms = now + delay
                return
            self._initial_delay = None
        self._complete_join()

    # --- rebalancing ------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, reason: str) -> None:
        if self.state in VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]:
            self._prepare_rebalance(reason)

    def _prepare_rebalance(self, reason: str) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            for member in self.members.values():
                member.assignment = b""
            self._propagate_assignment(lambda: RebalanceInProgress(f"group {self.group_id} is rebalancing"))
        now = self._clock.now_ms()
        timeout = self._rebalance_timeout_ms()
        if self.state is GroupState.EMPTY:
            delay = self._settings.initial_rebalance_delay_ms
            self._initial_delay = _InitialDelay(delay, max(timeout - delay, 0))
            self._join_deadline_ms = now + delay
        else:
            self._initial_delay = None
            self._join_deadline_ms = now + timeout
        log.info("group %s: preparing to rebalance (generation %d): %s", self.group_id, self.generation, reason)
        self._transition(GroupState.PREPARING_REBALANCE)
        self._maybe_complete_join()

    def _maybe_complete_join(self) -> None:
        if (self.state is GroupState.PREPARING_REBALANCE and self._initial_delay is None
                and not self._pending and all(m.awaiting_join for m in self.members.values())):
            self._complete_join()

    def _complete_join(self) -> None:
        for member in [m for m in self.members.values() if not m.awaiting_join and m.instance_id is None]:
            log.info("group %s: member %s did not rejoin in time", self.group_id, member.member_id)
            self._remove(member)
        if not self._elect_joined_leader() and self.members:
            # Only static members that have not rejoined are left: wait for them (or their sessions).
            self._join_deadline_ms = self._clock.now_ms() + self._rebalance_timeout_ms()
            return
        self._join_deadline_ms = None
        self.generation += 1
        if not self.members:
            self.protocol_name = None
            self._transition(GroupState.EMPTY)
            log.info("group %s: generation %d is empty", self.group_id, self.generation)
            return
        self.protocol_name = self._select_protocol()
        self._transition(GroupState.COMPLETING_REBALANCE)
        for member in list(self.members.values()):
            self._resolve_join(member, self._join_result(member.member_id,
                                                         with_members=self._is_leader(member.member_id)))
            self._touch(member)
            member.is_new = False

    def _elect_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def _select_protocol(self) -> str:
        """The protocol most members prefer among those all members support (ties: the earliest
        member's preference)."""
        candidates = {name for name, count in self._support.items() if count == len(self.members)}
        votes = Counter(member.vote(candidates) for member in self.members.values())
        best = max(votes.values())
        for member in self.members.values():
            for name in member.protocol_names:
                if votes.get(name) == best:
                    return name
        raise AssertionError("a vote was cast for a protocol no member supports")

    def _rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _propagate_assignment(self, error: Callable[[], GroupError] | None) -> None:
        """Answer every waiting SyncGroup: its assignment, or a fresh `error()` each."""
        for member in self.members.values():
            result = error() if error is not None else SyncResult(self.protocol_type, self.protocol_name,
                                                                  member.assignment)
            if self._resolve_sync(member, result):
                self._touch(member)

    # --- members ----------------------------------------------------------------------------------

    def _validate_member(self, member_id: str, instance_id: str | None) -> None:
        if instance_id is not None:
            current = self._static.get(instance_id)
            if current is None:
                raise UnknownMember(f"no static member {instance_id!r} in group {self.group_id}")
            if current != member_id:
                raise FencedInstanceId(f"instance {instance_id!r} of group {self.group_id} is now member {current}")
            return
        if member_id not in self.members:
            raise UnknownMember(f"no member {member_id!r} in group {self.group_id}")

    def _remove_member_and_update(self, member: Member, why: str) -> None:
        log.info("group %s: member %s %s", self.group_id, member.member_id, why)
        gone = UnknownMember(f"member {member.member_id} was removed from group {self.group_id}", member_id="")
        self._resolve_join(member, gone)
        self._resolve_sync(member, gone)
        self._remove(member)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(f"member {member.member_id} {why}")
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join()

    def _remove(self, member: Member) -> None:
        del self.members[member.member_id]
        self._support.subtract(member.protocol_names)
        if member.instance_id is not None and self._static.get(member.instance_id) == member.member_id:
            del self._static[member.instance_id]
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)

    def _is_leader(self, member_id: str) -> bool:
        return member_id == self.leader_id

    def _touch(self, member: Member) -> None:
        member.deadline_ms = self._clock.now_ms() + member.session_timeout_ms

    def _join_result(self, member_id: str, *, with_members: bool) -> JoinResult:
        members: tuple[JoinedMember, ...] = ()
        if with_members and self.protocol_name is not None:
            members = tuple(JoinedMember(m.member_id, m.instance_id, m.metadata(self.protocol_name))
                            for m in self.members.values())
        return JoinResult(member_id, self.generation, self.protocol_type, self.protocol_name,
                          self.leader_id or "", members)

    def _transition(self, state: GroupState) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise RuntimeError(f"group {self.group_id}: invalid transition {self.state.value} -> {state.value}")
        self.state = state
        if state is GroupState.EMPTY:
            self.empty_since_ms = self._clock.now_ms()

    # --- waiters ----------------------------------------------------------------------------------

    @staticmethod
    def _new_future() -> asyncio.Future:
        return asyncio.get_running_loop().create_future()

    def _resolved(self, result: object) -> asyncio.Future:
        future = self._new_future()
        future.set_result(result)
        return future

    @staticmethod
    def _resolve_join(member: Member, outcome: JoinResult | GroupError) -> bool:
        waiter, member.join_waiter = member.join_waiter, None
        return _settle(waiter, outcome)

    @staticmethod
    def _resolve_sync(member: Member, outcome: SyncResult | GroupError) -> bool:
        waiter, member.sync_waiter = member.sync_waiter, None
        return _settle(waiter, outcome)


def _settle(waiter: asyncio.Future | None, outcome: object) -> bool:
    """Complete `waiter` (if any, and not given up by its requester). True if there was one."""
    if waiter is None:
        return False
    if not waiter.done():
        if isinstance(outcome, BaseException):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)
    return True


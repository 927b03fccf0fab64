"""Membership groups (core/groups): the state machine under a FakeClock, and the coordinator with
its stored offsets."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.clock import FakeClock
from core.errors import (FencedInstanceId, GroupFull, GroupNotFound, GroupSubscribedToTopic, IllegalGeneration,
                         InconsistentGroupProtocol, InvalidGroupId, InvalidSessionTimeout, MemberIdRequired,
                         NonEmptyGroup, OffsetMetadataTooLarge, RebalanceInProgress, UnknownMember, UnknownTopic)
from core.groups.coordinator import GroupCoordinator
from core.groups.group import MembershipGroup
from core.groups.naming import group_id_of, storage_name
from core.groups.settings import GroupSettings
from core.groups.state import GroupState
from core.groups.store import GroupKey
from core.groups.values import OffsetAndMetadata
from core.names import TopicName

DELAY = 3_000
SESSION = 10_000
REBALANCE = 30_000
SETTINGS = GroupSettings(initial_rebalance_delay_ms=DELAY)
RANGE = (("range", b"range-meta"),)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def group(clock) -> MembershipGroup:
    return MembershipGroup("g", clock, SETTINGS)


def join(group: MembershipGroup, member_id: str = "", *, instance_id: str | None = None, protocols=RANGE,
         protocol_type: str = "consumer", session: int = SESSION, rebalance: int = REBALANCE,
         require_known: bool = False, client_id: str = "client") -> asyncio.Future:
    return group.join(member_id=member_id, instance_id=instance_id, client_id=client_id, client_host="/127.0.0.1",
                      session_timeout_ms=session, rebalance_timeout_ms=rebalance, protocol_type=protocol_type,
                      protocols=protocols, require_known_member_id=require_known)


def sync(group: MembershipGroup, member_id: str, assignments=None, *, generation: int | None = None,
         instance_id: str | None = None) -> asyncio.Future:
    return group.sync(member_id=member_id, instance_id=instance_id,
                      generation=group.generation if generation is None else generation,
                      protocol_type=None, protocol_name=None, assignments=assignments or {})


def heartbeat(group: MembershipGroup, member_id: str, *, generation: int | None = None,
              instance_id: str | None = None) -> None:
    group.heartbeat(member_id=member_id, instance_id=instance_id,
                    generation=group.generation if generation is None else generation)


def advance(clock: FakeClock, group: MembershipGroup, ms: int) -> None:
    clock.advance(ms)
    group.expire()


def form(clock: FakeClock, group: MembershipGroup, waiters: list[asyncio.Future]) -> list:
    """Let the initial delay (extended once per member that joined during it) run out."""
    for _ in range(len(waiters) + 1):
        if all(w.done() for w in waiters):
            return [w.result() for w in waiters]
        advance(clock, group, DELAY)
    raise AssertionError("the first generation did not form")


def stable_group(clock: FakeClock, group: MembershipGroup, count: int, **options) -> list[str]:
    """`count` members that joined together; the group is Stable with assignments b"a0", b"a1", ..."""
    waiters = [join(group, client_id=f"c{i}", **options) for i in range(count)]
    ids = [result.member_id for result in form(clock, group, waiters)]
    syncs = [sync(group, member_id) for member_id in ids if member_id != group.leader_id]
    leader_sync = sync(group, group.leader_id, {member_id: f"a{i}".encode() for i, member_id in enumerate(ids)})
    assert group.state is GroupState.STABLE
    assert leader_sync.done() and all(s.done() for s in syncs)
    return ids


# --- joining --------------------------------------------------------------------------------------


async def test_first_member_waits_the_initial_delay_then_leads_generation_one(clock, group):
    waiter = join(group)
    assert group.state is GroupState.PREPARING_REBALANCE
    advance(clock, group, DELAY - 1)
    assert not waiter.done()
    advance(clock, group, 1)
    result = waiter.result()
    assert (result.generation, result.leader_id, result.protocol_name) == (1, result.member_id, "range")
    assert result.member_id.startswith("client-")
    assert [(m.member_id, m.metadata) for m in result.members] == [(result.member_id, b"range-meta")]
    assert group.state is GroupState.COMPLETING_REBALANCE


async def test_members_joining_during_the_initial_delay_extend_it_and_share_one_generation(clock, group):
    first = join(group, client_id="a")
    advance(clock, group, DELAY - 100)
    second = join(group, client_id="b")
    advance(clock, group, 100)          # the first delay ends, but a member arrived: wait once more
    assert not first.done() and not second.done()
    advance(clock, group, DELAY)
    a, b = first.result(), second.result()
    assert a.generation == b.generation == 1
    assert a.leader_id == b.leader_id == a.member_id
    assert len(a.members) == 2 and b.members == ()


async def test_initial_delay_never_outlasts_the_rebalance_timeout(clock, group):
    first = join(group, rebalance=DELAY + 1_000)
    join(group, rebalance=DELAY + 1_000)
    advance(clock, group, DELAY)        # extended, but only by what is left of the rebalance timeout
    join(group, rebalance=DELAY + 1_000)
    advance(clock, group, 999)
    assert not first.done()
    advance(clock, group, 1)
    assert first.result().generation == 1 and len(first.result().members) == 3


async def test_new_member_of_a_stable_group_starts_a_rebalance_that_completes_when_all_rejoin(clock, group):
    (a,) = stable_group(clock, group, 1)
    b_join = join(group, client_id="b")
    assert group.state is GroupState.PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgress):
        heartbeat(group, a)
    a_join = join(group, a)
    assert a_join.done() and b_join.done()
    assert (a_join.result().generation, b_join.result().generation) == (2, 2)
    assert a_join.result().leader_id == a
    assert {m.member_id for m in a_join.result().members} == {a, b_join.result().member_id}
    assert b_join.result().members == ()


async def test_followers_wait_in_sync_for_the_leader_and_unassigned_members_get_nothing(clock, group):
    results = form(clock, group, [join(group, client_id=f"c{i}") for i in range(3)])
    leader = group.leader_id
    followers = [r.member_id for r in results if r.member_id != leader]
    pending = [sync(group, f) for f in followers]
    assert not any(p.done() for p in pending)
    leader_sync = sync(group, leader, {leader: b"L", followers[0]: b"F0"})
    assert group.state is GroupState.STABLE
    assert leader_sync.result().assignment == b"L"
    assert [p.result().assignment for p in pending] == [b"F0", b""]
    assert sync(group, followers[0]).result().assignment == b"F0"   # Stable: answered at once


async def test_follower_with_unchanged_metadata_rejoining_a_stable_group_needs_no_rebalance(clock, group):
    a, b = stable_group(clock, group, 2)
    follower = b if group.leader_id == a else a
    result = join(group, follower).result()
    assert group.state is GroupState.STABLE
    assert result.generation == 1 and result.members == ()


async def test_leader_rejoining_a_stable_group_forces_a_rebalance(clock, group):
    ids = stable_group(clock, group, 2)
    join(group, group.leader_id)
    assert group.state is GroupState.PREPARING_REBALANCE
    follower = next(i for i in ids if i != group.leader_id)
    assert join(group, follower).result().generation == 2


async def test_sync_waiting_when_a_rebalance_starts_gets_rebalance_in_progress(clock, group):
    results = form(clock, group, [join(group, client_id=f"c{i}") for i in range(2)])
    follower = next(r.member_id for r in results if r.member_id != group.leader_id)
    pending = sync(group, follower)
    join(group, client_id="newcomer")
    with pytest.raises(RebalanceInProgress):
        pending.result()


# --- heartbeats and sessions ----------------------------------------------------------------------


async def test_heartbeat_checks_member_and_generation(clock, group):
    (a,) = stable_group(clock, group, 1)
    heartbeat(group, a)
    with pytest.raises(UnknownMember, match="no member"):
        heartbeat(group, "nobody")
    with pytest.raises(IllegalGeneration, match="generation 1, not 7"):
        heartbeat(group, a, generation=7)


async def test_silent_member_is_removed_after_its_session_and_the_group_rebalances(clock, group):
    a, b = stable_group(clock, group, 2)
    for _ in range(3):
        advance(clock, group, 3_000)
        heartbeat(group, a)
    advance(clock, group, 1_000)        # b's session (10 s since its sync) is over
    assert not group.has_member(b)
    assert group.state is GroupState.PREPARING_REBALANCE
    result = join(group, a).result()
    assert result.generation == 2 and [m.member_id for m in result.members] == [a]


async def test_rebalance_timeout_drops_members_that_did_not_rejoin(clock, group):
    a, b = stable_group(clock, group, 2)
    c_join = join(group, client_id="c")
    a_join = join(group, a)
    for _ in range(3):                  # b keeps heartbeating but never rejoins
        advance(clock, group, REBALANCE // 3 - 1)
        with pytest.raises(RebalanceInProgress):
            heartbeat(group, b)
    assert not a_join.done()
    advance(clock, group, 3)
    assert not group.has_member(b)
    assert a_join.result().generation == c_join.result().generation == 2


async def test_members_waiting_for_a_rebalance_are_not_expired_by_their_session(clock, group):
    a, b = stable_group(clock, group, 2, session=6_000, rebalance=20_000)
    join(group, client_id="c", session=6_000, rebalance=20_000)
    a_join = join(group, a, session=6_000, rebalance=20_000)
    for _ in range(3):                  # 15 s: far past a's session while it waits
        advance(clock, group, 5_000)
        with pytest.raises(RebalanceInProgress):
            heartbeat(group, b)         # b stays alive but does not rejoin
    assert group.has_member(a) and not a_join.done()
    advance(clock, group, 5_000)
    assert a_join.result().generation == 2
    assert not group.has_member(b)


async def test_leader_leaving_hands_leadership_to_a_remaining_member(clock, group):
    ids = stable_group(clock, group, 2)
    old_leader = group.leader_id
    assert group.leave([(old_leader, None)]) == [None]
    survivor = next(i for i in ids if i != old_leader)
    assert group.leader_id == survivor
    assert join(group, survivor).result().leader_id == survivor


async def test_last_member_leaving_empties_the_group_with_a_new_generation(clock, group):
    (a,) = stable_group(clock, group, 1)
    errors = group.leave([(a, None), ("nobody", None)])
    assert errors[0] is None and isinstance(errors[1], UnknownMember)
    assert group.state is GroupState.EMPTY and group.generation == 2 and not group.members


# --- protocols --------------------------------------------------------------------------------------


async def test_protocol_is_the_most_preferred_among_those_every_member_supports(clock, group):
    form(clock, group, [join(group, protocols=(("roundrobin", b"rr"), ("range", b"r"))),
                        join(group, protocols=(("roundrobin", b"rr"), ("range", b"r"))),
                        join(group, protocols=(("sticky", b"s"), ("range", b"r"), ("roundrobin", b"rr")))])
    assert group.protocol_name == "roundrobin"


async def test_a_protocol_one_member_lacks_is_never_chosen(clock, group):
    waiters = [join(group, protocols=(("roundrobin", b"rr"), ("range", b"r"))) for _ in range(2)]
    waiters.append(join(group, protocols=(("range", b"only-range"),)))
    results = form(clock, group, waiters)
    assert group.protocol_name == "range"
    leader_view = next(r for r in results if r.members)
    assert sorted(m.metadata for m in leader_view.members) == [b"only-range", b"r", b"r"]


async def test_joins_that_do_not_fit_the_groups_protocols_are_refused(clock, group):
    stable_group(clock, group, 1)
    with pytest.raises(InconsistentGroupProtocol):
        join(group, protocol_type="connect")
    with pytest.raises(InconsistentGroupProtocol):
        join(group, protocols=(("sticky", b""),))
    with pytest.raises(InconsistentGroupProtocol):
        MembershipGroup("h", clock, SETTINGS).join(
            member_id="", instance_id=None, client_id="c", client_host="", session_timeout_ms=SESSION,
            rebalance_timeout_ms=REBALANCE, protocol_type="", protocols=RANGE, require_known_member_id=False)


# --- two-phase join (KIP-394) -----------------------------------------------------------------------


async def test_member_id_required_hands_out_an_id_to_join_with(clock, group):
    with pytest.raises(MemberIdRequired) as raised:
        join(group, require_known=True, client_id="app")
    member_id = raised.value.member_id
    assert member_id.startswith("app-") and group.is_pending(member_id)
    assert group.state is GroupState.EMPTY
    waiter = join(group, member_id, require_known=True)
    advance(clock, group, DELAY)
    assert waiter.result().member_id == member_id and not group.is_pending(member_id)


async def test_outstanding_member_id_holds_a_rebalance_until_its_session_expires(clock, group):
    (a,) = stable_group(clock, group, 1)
    with pytest.raises(MemberIdRequired):
        join(group, require_known=True)
    waiting = join(group, a)            # the leader rejoins: a rebalance, held by the id handed out
    assert not waiting.done()
    advance(clock, group, SESSION)      # nobody joined with it within the session timeout
    assert waiting.result().generation == 2


# --- static membership (KIP-345) -------------------------------------------------------------------


async def test_static_member_rejoining_a_stable_group_keeps_its_assignment_without_rebalance(clock, group):
    results = form(clock, group, [join(group, instance_id="i-static", client_id="s"), join(group, client_id="d")])
    static_id, dynamic_id = (r.member_id for r in results)
    leader = group.leader_id
    follower_sync = sync(group, dynamic_id if leader == static_id else static_id)
    sync(group, leader, {static_id: b"static-part", dynamic_id: b"dynamic-part"})
    assert follower_sync.done()

    rejoined = join(group, instance_id="i-static", client_id="s").result()
    assert rejoined.member_id != static_id and rejoined.member_id.startswith("i-static-")
    assert rejoined.generation == 1 and rejoined.leader_id == leader
    assert group.state is GroupState.STABLE
    assert sync(group, rejoined.member_id, instance_id="i-static").result().assignment == b"static-part"
    heartbeat(group, dynamic_id)        # the other member sees no rebalance
    with pytest.raises(FencedInstanceId):
        heartbeat(group, static_id, instance_id="i-static")
    with pytest.raises(FencedInstanceId):
        join(group, static_id, instance_id="i-static")


async def test_static_member_rejoining_with_a_protocol_change_rebalances(clock, group):
    stable_group(clock, group, 1, instance_id="i1")
    rejoined = join(group, instance_id="i1", protocols=(("sticky", b"s"), ("range", b"r")))
    # the only member rejoined, so the rebalance completes at once: a new generation, a new protocol
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert (rejoined.result().generation, rejoined.result().protocol_name) == (2, "sticky")


async def test_static_member_that_does_not_rejoin_keeps_its_place_until_its_session_expires(clock, group):
    results = form(clock, group, [join(group, instance_id="i1", session=60_000, rebalance=10_000),
                                  join(group, client_id="d", rebalance=10_000)])
    static_id, dynamic_id = (r.member_id for r in results)
    sync(group, group.leader_id, {})
    join(group, client_id="newcomer", rebalance=10_000)
    dynamic_join = join(group, dynamic_id, rebalance=10_000)
    advance(clock, group, 10_000)       # the static member did not rejoin: it stays, the others go on
    assert dynamic_join.result().generation == 2 and group.has_member(static_id)
    assert group.leader_id == dynamic_id
    advance(clock, group, 60_000)
    assert not group.has_member(static_id)


async def test_leave_by_instance_id_removes_the_static_member(clock, group):
    (static_id,) = stable_group(clock, group, 1, instance_id="i1")
    assert group.leave([("", "i1")]) == [None]
    assert not group.has_member(static_id) and group.state is GroupState.EMPTY
    (error,) = group.leave([("", "i1")])
    assert isinstance(error, UnknownMember)


# --- commits ---------------------------------------------------------------------------------------


async def test_commit_rules_follow_the_groups_state(clock, group):
    group.validate_commit(member_id="", instance_id=None, generation=-1)     # Empty: a simple commit
    a, b = stable_group(clock, group, 2)
    with pytest.raises(UnknownMember, match="only they may commit"):
        group.validate_commit(member_id="", instance_id=None, generation=-1)
    with pytest.raises(IllegalGeneration):
        group.validate_commit(member_id=a, instance_id=None, generation=0)
    group.validate_commit(member_id=a, instance_id=None, generation=1)
    join(group, client_id="c")
    group.validate_commit(member_id=a, instance_id=None, generation=1)      # PreparingRebalance: allowed
    join(group, a)
    join(group, b)
    with pytest.raises(RebalanceInProgress):
        group.validate_commit(member_id=a, instance_id=None, generation=2)


async def test_summary_shows_metadata_and_assignments_only_when_stable(clock, group):
    (a,) = stable_group(clock, group, 1)
    summary = group.summary()
    assert (summary.state, summary.protocol_type, summary.protocol_name) == ("Stable", "consumer", "range")
    assert [(m.member_id, m.metadata, m.assignment) for m in summary.members] == [(a, b"range-meta", b"a0")]
    join(group, client_id="b")
    summary = group.summary()
    assert (summary.state, summary.protocol_name) == ("PreparingRebalance", "")
    assert {(m.metadata, m.assignment) for m in summary.members} == {(b"", b"")}


def test_group_ids_map_to_storage_names_and_back():
    for group_id in ["orders", "", "my.group", "spaces and / slashes", "ünïcödé", "g.2e"]:
        name = storage_name(group_id)
        assert name.startswith("group.") and group_id_of(name) == group_id
    assert storage_name("orders-eu_1") == "group.orders-eu_1"
    assert group_id_of("other.x") is None
    with pytest.raises(InvalidGroupId, match="too long"):
        storage_name("x" * 300)


# --- the coordinator ----------------------------------------------------------------------------------

KEY = GroupKey("public", "default", "billing")


async def settle(predicate, timeout_s: float = 5.0) -> None:
    """Let the event loop run (the timer task, metadata I/O) until `predicate()` holds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.002)


def has_members(coordinator: GroupCoordinator, key: GroupKey = KEY):
    return lambda: coordinator.group(key) is not None and bool(coordinator.group(key).members)


def coordinator_of(core) -> GroupCoordinator:
    return GroupCoordinator(core, GroupSettings(initial_rebalance_delay_ms=DELAY))


async def coordinator_join(coordinator: GroupCoordinator, key: GroupKey = KEY, **options):
    params = dict(member_id="", instance_id=None, client_id="c", client_host="", session_timeout_ms=SESSION,
                  rebalance_timeout_ms=REBALANCE, protocol_type="consumer", protocols=[("range", b"m")],
                  require_known_member_id=False)
    params.update(options)
    return await coordinator.join(key, **params)


async def test_coordinator_timer_completes_a_join_when_the_clock_passes_the_delay(core):
    coordinator = coordinator_of(core)
    joining = asyncio.create_task(coordinator_join(coordinator))
    await settle(has_members(coordinator))
    core.clock.advance(DELAY - 1)
    await asyncio.sleep(0.01)
    assert not joining.done()
    core.clock.advance(1)
    await settle(joining.done)
    assert joining.result().generation == 1
    coordinator.close()


async def test_coordinator_refuses_bad_group_ids_and_session_timeouts(core):
    coordinator = coordinator_of(core)
    with pytest.raises(InvalidGroupId):
        await coordinator_join(coordinator, GroupKey("public", "default", ""))
    with pytest.raises(InvalidSessionTimeout, match="6000..1800000"):
        await coordinator_join(coordinator, session_timeout_ms=5_999)
    with pytest.raises(InvalidSessionTimeout):
        await coordinator_join(coordinator, session_timeout_ms=1_800_001)
    with pytest.raises(UnknownMember):
        await coordinator_join(coordinator, member_id="made-up")
    with pytest.raises(UnknownMember):
        await coordinator.heartbeat(KEY, member_id="x", instance_id=None, generation=1)


async def test_committed_offsets_and_metadata_survive_a_new_coordinator(core):
    await core.create_topic(TopicName.of("orders"), 3)
    first = coordinator_of(core)
    errors = await first.commit_offsets(KEY, {("orders", 0): OffsetAndMetadata(42, "meta-0"),
                                              ("orders", 2): OffsetAndMetadata(7, ""),
                                              ("orders", 9): OffsetAndMetadata(1, ""),
                                              ("nope", 0): OffsetAndMetadata(1, "")})
    assert errors[("orders", 0)] is None and errors[("orders", 2)] is None
    assert isinstance(errors[("orders", 9)], UnknownTopic) and isinstance(errors[("nope", 0)], UnknownTopic)
    first.close()

    again = coordinator_of(core)      # as after a restart: nothing in memory
    assert await again.fetch_offsets(KEY, [("orders", 0), ("orders", 1)]) == {
        ("orders", 0): OffsetAndMetadata(42, "meta-0"), ("orders", 1): None}
    assert await again.fetch_offsets(KEY, None) == {("orders", 0): OffsetAndMetadata(42, "meta-0"),
                                                     ("orders", 2): OffsetAndMetadata(7, "")}
    assert [(o.group_id, o.state) for o in await again.list_groups("public", "default")] == [("billing", "Empty")]
    assert (await again.describe(KEY)).state == "Empty"


async def test_commits_by_members_are_checked_against_the_group(core):
    await core.create_topic(TopicName.of("orders"), 1)
    coordinator = coordinator_of(core)
    commit = {("orders", 0): OffsetAndMetadata(5, "m")}
    errors = await coordinator.commit_offsets(KEY, commit, member_id="m", generation=3)
    assert isinstance(errors[("orders", 0)], IllegalGeneration)     # no such group: a stale generation
    joining = asyncio.create_task(coordinator_join(coordinator))
    await settle(has_members(coordinator))
    core.clock.advance(DELAY)
    await settle(joining.done)
    member = joining.result().member_id
    assert isinstance((await coordinator.commit_offsets(KEY, commit))[("orders", 0)], UnknownMember)
    errors = await coordinator.commit_offsets(KEY, commit, member_id=member, generation=1)
    assert isinstance(errors[("orders", 0)], RebalanceInProgress)   # no SyncGroup yet
    await coordinator.sync(KEY, member_id=member, instance_id=None, generation=1, protocol_type="consumer",
                           protocol_name="range", assignments={member: b"x"})
    assert await coordinator.commit_offsets(KEY, commit, member_id=member, generation=1) == {("orders", 0): None}
    too_long = {("orders", 0): OffsetAndMetadata(6, "x" * 4097)}
    errors = await coordinator.commit_offsets(KEY, too_long, member_id=member, generation=1)
    assert isinstance(errors[("orders", 0)], OffsetMetadataTooLarge)
    coordinator.close()


async def test_delete_group_needs_an_empty_group_and_removes_its_offsets(core):
    await core.create_topic(TopicName.of("orders"), 1)
    coordinator = coordinator_of(core)
    with pytest.raises(GroupNotFound):
        await coordinator.delete_group(KEY)
    await coordinator.commit_offsets(KEY, {("orders", 0): OffsetAndMetadata(3, "")})
    other = GroupKey("public", "default", "busy")
    joining = asyncio.create_task(coordinator_join(coordinator, other))
    await settle(has_members(coordinator, other))
    with pytest.raises(NonEmptyGroup):
        await coordinator.delete_group(other)
    await coordinator.delete_group(KEY)
    assert await coordinator.fetch_offsets(KEY, None) == {}
    assert (await coordinator.describe(KEY)).state == "Dead"
    assert [o.group_id for o in await coordinator.list_groups("public", "default")] == ["busy"]
    assert [o.group_id for o in await coordinator.list_groups("public", "default", ["stable"])] == []
    core.clock.advance(DELAY)
    await settle(joining.done)
    coordinator.close()


async def test_offsets_of_consumed_topics_survive_offset_delete_while_the_group_is_live(core):
    await core.create_topic(TopicName.of("orders"), 1)
    await core.create_topic(TopicName.of("audit"), 1)
    coordinator = coordinator_of(core)
    both = {("orders", 0): OffsetAndMetadata(1, ""), ("audit", 0): OffsetAndMetadata(2, "")}
    await coordinator.commit_offsets(KEY, both)
    joining = asyncio.create_task(coordinator_join(coordinator))
    await settle(has_members(coordinator))
    core.clock.advance(DELAY)
    await settle(joining.done)
    consumed = lambda protocol_type, protocol_name, metadata: {"orders"}  # noqa: E731
    errors = await coordinator.delete_offsets(KEY, [("orders", 0), ("audit", 0), ("gone", 0)], consumed)
    assert isinstance(errors[("orders", 0)], GroupSubscribedToTopic)
    assert errors[("audit", 0)] is None and isinstance(errors[("gone", 0)], UnknownTopic)
    assert await coordinator.fetch_offsets(KEY, None) == {("orders", 0): OffsetAndMetadata(1, "")}
    with pytest.raises(NonEmptyGroup):
        await coordinator.delete_offsets(KEY, [("orders", 0)], lambda *_: None)
    with pytest.raises(GroupNotFound):
        await coordinator.delete_offsets(GroupKey("public", "default", "nobody"), [("orders", 0)], consumed)
    coordinator.close()


async def test_idle_empty_group_is_dropped_from_memory_but_keeps_its_offsets(core):
    await core.create_topic(TopicName.of("orders"), 1)
    coordinator = GroupCoordinator(core, GroupSettings(empty_group_idle_ms=1_000))
    await coordinator.commit_offsets(KEY, {("orders", 0): OffsetAndMetadata(9, "")})
    assert coordinator.group(KEY) is not None
    core.clock.advance(1_000)
    await settle(lambda: coordinator.group(KEY) is None)
    assert await coordinator.fetch_offsets(KEY, [("orders", 0)]) == {("orders", 0): OffsetAndMetadata(9, "")}
    assert (await coordinator.describe(KEY)).state == "Empty"
    coordinator.close()


# --- group.max.size ------------------------------------------------------------------------------


async def test_a_full_group_refuses_one_more_member(clock):
    group = MembershipGroup("g", clock, GroupSettings(initial_rebalance_delay_ms=DELAY, max_size=2))
    members = stable_group(clock, group, 2)
    with pytest.raises(GroupFull) as refused:
        join(group)
    assert refused.value.member_id == ""
    assert sorted(group.members) == sorted(members) and group.state is GroupState.STABLE


async def test_while_preparing_a_rebalance_only_members_that_joined_again_count(clock):
    """Kafka's rule: a newcomer takes the place of a member that has not rejoined yet, and that
    member, when it comes back to a full group, is removed."""
    group = MembershipGroup("g", clock, GroupSettings(initial_rebalance_delay_ms=DELAY, max_size=2))
    first, second = stable_group(clock, group, 2)
    join(group, first)
    assert group.state is GroupState.PREPARING_REBALANCE
    newcomer = join(group, client_id="newcomer")
    with pytest.raises(GroupFull):
        join(group, second)
    assert second not in group.members
    assert newcomer.done() and len(group.members) == 2


# --- offsets.retention.minutes -------------------------------------------------------------------

RETENTION_MS = 60_000


async def test_offsets_of_a_group_empty_past_the_retention_expire_and_the_group_with_them(core):
    await core.create_topic(TopicName.of("orders"), 1)
    coordinator = GroupCoordinator(core, GroupSettings(initial_rebalance_delay_ms=0, offsets_retention_ms=RETENTION_MS))
    standalone = GroupKey("public", "default", "standalone")
    await coordinator.commit_offsets(standalone, {("orders", 0): OffsetAndMetadata(3)})
    await coordinator.commit_offsets(KEY, {("orders", 0): OffsetAndMetadata(7)})
    joined = await coordinator_join(coordinator, session_timeout_ms=10 * RETENTION_MS)
    core.clock.advance(RETENTION_MS - 1)
    assert await coordinator.expire_offsets() == []
    core.clock.advance(1)   # the standalone group's commit is old enough; the other group has a member
    assert await coordinator.expire_offsets() == [standalone]
    assert await coordinator.fetch_offsets(standalone, None) == {}
    assert (await coordinator.describe(standalone)).state == "Dead"
    await coordinator.leave(KEY, [(joined.member_id, None)])   # Empty from now: its clock starts
    core.clock.advance(RETENTION_MS - 1)
    assert await coordinator.expire_offsets() == []
    assert await coordinator.fetch_offsets(KEY, None) == {("orders", 0): OffsetAndMetadata(7)}
    core.clock.advance(1)
    assert await coordinator.expire_offsets() == [KEY]
    assert await coordinator.fetch_offsets(KEY, None) == {}
    assert await coordinator.list_groups("public", "default") == []
    coordinator.close()


async def test_offset_expiry_runs_by_itself_and_covers_groups_not_in_memory(core):
    await core.create_topic(TopicName.of("orders"), 1)
    settings = GroupSettings(offsets_retention_ms=RETENTION_MS, offsets_retention_check_ms=1_000)
    first = GroupCoordinator(core, settings)
    await first.commit_offsets(KEY, {("orders", 0): OffsetAndMetadata(7)})
    first.close()
    coordinator = GroupCoordinator(core, settings)   # as after a restart: the group is only stored
    coordinator.start()
    core.clock.advance(RETENTION_MS)
    await asyncio.sleep(0)
    core.clock.advance(1_000)
    deadline = time.monotonic() + 5
    while await coordinator.fetch_offsets(KEY, None):
        assert time.monotonic() < deadline, "the offsets did not expire"
        await asyncio.sleep(0.01)
    coordinator.close()

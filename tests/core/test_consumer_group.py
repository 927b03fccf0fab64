"""Consumer-protocol groups (core/groups/consumer_group.py) under a FakeClock: epochs, the target
assignment, reconciliation (revoke before reassign), fencing, static members, and a random churn
that must never give one partition to two members."""

from __future__ import annotations

import asyncio
import random

import pytest

from core.clock import FakeClock
from core.errors import (FencedMemberEpoch, GroupFull, GroupNotFound, InconsistentGroupProtocol, InvalidGroupRequest,
                         InvalidRegularExpression, StaleMemberEpoch, UnknownMember, UnreleasedInstanceId,
                         UnsupportedAssignor, UnsupportedGroupVersion)
from core.groups.consumer_group import ConsumerGroup, Reconciliation
from core.groups.coordinator import GroupCoordinator
from core.groups.group import MembershipGroup
from core.groups.settings import GroupSettings
from core.groups.state import GroupState
from core.groups.store import GroupKey
from core.groups.values import OffsetAndMetadata
from core.names import TopicName

SETTINGS = GroupSettings(consumer_session_timeout_ms=10_000, consumer_heartbeat_interval_ms=1_000, max_size=10)
LAYOUTS = {"t": (None,) * 6}
ALL = frozenset(("t", i) for i in range(6))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def group(clock) -> ConsumerGroup:
    return ConsumerGroup("g", clock, SETTINGS)


def beat(group, member_id, epoch, *, owned=None, topics=None, join=False, instance_id=None, assignor=None,
         rebalance_ms=-1, rack=None, layouts=LAYOUTS):
    if join:
        topics = topics or {"t"}
        owned = owned if owned is not None else set()
        rebalance_ms = 5_000 if rebalance_ms < 0 else rebalance_ms
    return group.heartbeat(member_id=member_id, member_epoch=epoch, instance_id=instance_id, rack=rack,
                           rebalance_timeout_ms=rebalance_ms, topics=topics, assignor=assignor, owned=owned,
                           client_id="c", client_host="/127.0.0.1", layouts=layouts)


def assert_disjoint(group) -> None:
    held = {}
    for member in group.members.values():
        for tp in member.assigned | member.revoking:
            assert tp not in held, f"{tp} held by {held[tp]} and {member.member_id}"
            held[tp] = member.member_id


def test_first_member_gets_everything(group):
    answer = beat(group, "a", 0, join=True)
    assert (answer.epoch, answer.assignment, answer.heartbeat_interval_ms) == (1, ALL, 1_000)
    assert group.state is GroupState.STABLE and group.group_epoch == 1


def test_partitions_are_revoked_before_they_move(group):
    beat(group, "a", 0, join=True)
    answer_b = beat(group, "b", 0, join=True)
    assert answer_b.epoch == 2 and answer_b.assignment == frozenset()     # a still holds everything
    assert group.state is GroupState.RECONCILING
    answer_a = beat(group, "a", 1)
    kept = answer_a.assignment
    assert answer_a.epoch == 1 and len(kept) == 3                          # revoke first, at the old epoch
    assert group.members["a"].state is Reconciliation.UNREVOKED
    assert beat(group, "b", 2).assignment is None                         # still nothing free
    assert beat(group, "a", 1, owned=ALL).epoch == 1                      # not acknowledged yet
    answer_a = beat(group, "a", 1, owned=kept)                           # acknowledged
    assert answer_a.epoch == 2 and answer_a.assignment is None
    answer_b = beat(group, "b", 2, owned=set())
    assert answer_b.assignment == ALL - kept
    assert group.state is GroupState.STABLE
    assert_disjoint(group)


def test_leave_frees_partitions_at_once(group):
    beat(group, "a", 0, join=True)
    beat(group, "b", 0, join=True)
    kept = beat(group, "a", 1).assignment
    beat(group, "a", 1, owned=kept)
    assert beat(group, "b", 0 + 2, owned=set()).assignment == ALL - kept
    assert beat(group, "b", 2, owned=ALL - kept).epoch == 2
    assert beat(group, "a", -1).epoch == -1
    answer = beat(group, "b", 2, owned=ALL - kept)
    assert (answer.epoch, answer.assignment) == (3, ALL)


def test_session_timeout_fences_and_frees(group, clock):
    beat(group, "a", 0, join=True)
    beat(group, "b", 0, join=True)
    clock.advance(6_000)
    beat(group, "b", 2, owned=set())
    clock.advance(5_000)
    group.expire()
    assert "a" not in group.members
    answer = beat(group, "b", 2, owned=set())
    assert (answer.epoch, answer.assignment) == (3, ALL)
    with pytest.raises(UnknownMember):
        beat(group, "a", 1)


def test_revocation_timeout_fences(group, clock):
    beat(group, "a", 0, join=True, rebalance_ms=2_000)
    beat(group, "b", 0, join=True)
    beat(group, "a", 1)
    clock.advance(2_500)
    group.expire()
    assert list(group.members) == ["b"]
    assert beat(group, "b", 2, owned=set()).assignment == ALL


def test_epochs_are_checked(group):
    beat(group, "a", 0, join=True)
    with pytest.raises(FencedMemberEpoch):
        beat(group, "a", 7)
    with pytest.raises(UnknownMember):
        beat(group, "nobody", 1)
    beat(group, "b", 0, join=True)
    kept = beat(group, "a", 1).assignment
    beat(group, "a", 1, owned=kept)                                   # now at epoch 2
    assert beat(group, "a", 1, owned=kept).epoch == 2                # the previous epoch: answer lost
    with pytest.raises(FencedMemberEpoch):
        beat(group, "a", 1, owned=ALL)                                # ... but it owns more than it may


def test_join_requires_a_full_request_and_a_known_assignor(group):
    with pytest.raises(InvalidGroupRequest):
        group.heartbeat(member_id="a", member_epoch=0, instance_id=None, rack=None, rebalance_timeout_ms=5_000,
                        topics=None, assignor=None, owned=set(), client_id="c", client_host="", layouts=LAYOUTS)
    with pytest.raises(InvalidGroupRequest):
        beat(group, "", 0, join=True)
    with pytest.raises(UnsupportedAssignor):
        beat(group, "a", 0, join=True, assignor="sticky-ish")


def test_group_max_size(group):
    for i in range(10):
        beat(group, f"m{i}", 0, join=True)
    with pytest.raises(GroupFull):
        beat(group, "m10", 0, join=True)


def test_static_member_comes_back_without_rebalance(group):
    beat(group, "a", 0, join=True, instance_id="i1")
    beat(group, "b", 0, join=True, instance_id="i2")
    kept = beat(group, "a", 1).assignment
    beat(group, "a", 1, owned=kept)
    beat(group, "b", 2, owned=set())
    epoch = group.group_epoch
    assert beat(group, "a", -2).epoch == -2
    with pytest.raises(UnreleasedInstanceId):
        beat(group, "b2", 0, join=True, instance_id="i2")
    answer = beat(group, "a2", 0, join=True, instance_id="i1")
    assert (answer.epoch, answer.assignment) == (2, kept)
    assert group.group_epoch == epoch
    assert set(group.members) == {"a2", "b"}


def test_static_member_that_stays_away_is_removed(group, clock):
    beat(group, "a", 0, join=True, instance_id="i1")
    beat(group, "a", -2)
    clock.advance(11_000)
    group.expire()
    assert group.state is GroupState.EMPTY


def test_most_asked_for_assignor_wins(group):
    beat(group, "a", 0, join=True, assignor="range")
    assert group.assignor == "range"
    beat(group, "b", 0, join=True, assignor="circle")
    beat(group, "c", 0, join=True, assignor="circle")
    assert group.assignor == "circle"


def test_subscribed_topic_growth_bumps_the_epoch(group):
    beat(group, "a", 0, join=True)
    grown = {"t": (None,) * 8}
    answer = beat(group, "a", 1, owned=ALL, layouts=grown)
    assert answer.epoch == 2 and len(answer.assignment) == 8


def test_commit_checks_the_member_epoch(group):
    group.validate_commit(member_id="", generation=-1, partitions=[])     # empty: anyone
    beat(group, "a", 0, join=True)
    group.validate_commit(member_id="a", generation=1, partitions=[("t", 0)])
    with pytest.raises(StaleMemberEpoch):
        group.validate_commit(member_id="a", generation=2, partitions=[("t", 0)])
    with pytest.raises(UnknownMember):
        group.validate_commit(member_id="", generation=-1, partitions=[])
    with pytest.raises(UnsupportedGroupVersion):
        group.validate_commit(member_id="a", generation=1, partitions=[], epoch_aware=False)
    beat(group, "b", 0, join=True)
    kept = beat(group, "a", 1).assignment
    beat(group, "a", 1, owned=kept)                                   # a is at epoch 2 now
    gone = next(iter(ALL - kept))
    group.validate_commit(member_id="a", generation=1, partitions=kept)   # the older epoch, still its own
    with pytest.raises(StaleMemberEpoch):
        group.validate_commit(member_id="a", generation=1, partitions=[gone])


def test_random_churn_never_shares_a_partition_and_converges(clock):
    """Simulated clients that follow the protocol (ack revocations, some lose answers, some die)."""
    rng = random.Random(4)
    group = ConsumerGroup("g", clock, SETTINGS)
    layouts = {"t": (None,) * 12, "u": (None,) * 5}
    clients: dict[str, dict] = {}
    serial = 0
    for step in range(600):
        roll = rng.random()
        if roll < 0.05 and len(clients) < 8:
            serial += 1
            member_id = f"m{serial}"
            answer = beat(group, member_id, 0, join=True, topics={"t", "u"}, layouts=layouts)
            clients[member_id] = {"epoch": answer.epoch, "owned": set(answer.assignment or ())}
        elif roll < 0.08 and clients:
            member_id = rng.choice(sorted(clients))
            beat(group, member_id, -1, layouts=layouts)
            del clients[member_id]
        elif roll < 0.10 and clients:
            del clients[rng.choice(sorted(clients))]        # dies silently: its session must end
        elif clients:
            member_id = rng.choice(sorted(clients))
            client = clients[member_id]
            try:
                answer = beat(group, member_id, client["epoch"], owned=set(client["owned"]), layouts=layouts)
            except (UnknownMember, FencedMemberEpoch):
                del clients[member_id]
                continue
            if rng.random() < 0.1:
                continue                                     # the answer is lost on the way
            client["epoch"] = answer.epoch
            if answer.assignment is not None:
                client["owned"] = set(answer.assignment)
        clock.advance(200)
        group.expire()
        assert_disjoint(group)
        consumed = [tp for c in clients.values() for tp in c["owned"]]
        live = {m for m in clients if m in group.members}
        consumed_live = [tp for m in live for tp in clients[m]["owned"]]
        assert len(consumed_live) == len(set(consumed_live)), "two live clients consume one partition"
        assert consumed is not None
    for _ in range(40):        # quiet: everyone heartbeats until stable
        for member_id, client in list(clients.items()):
            answer = beat(group, member_id, client["epoch"], owned=set(client["owned"]), layouts=layouts)
            client["epoch"] = answer.epoch
            if answer.assignment is not None:
                client["owned"] = set(answer.assignment)
        clock.advance(200)
        group.expire()
    if clients:
        assert group.state is GroupState.STABLE
        owned = [tp for c in clients.values() for tp in c["owned"]]
        assert sorted(owned) == sorted({(t, i) for t, racks in layouts.items() for i in range(len(racks))})


def test_regex_subscriptions_follow_the_namespace_topics(group):
    layouts = {"orders-eu": (None,) * 2, "orders-us": (None,) * 2, "audit": (None,)}
    answer = group.heartbeat(member_id="a", member_epoch=0, instance_id=None, rack=None, rebalance_timeout_ms=5_000,
                             topics=set(), regex="orders-.*", assignor=None, owned=set(), client_id="c",
                             client_host="", layouts=layouts, namespace_topics=["orders-eu", "orders-us", "audit",
                                                                                "__consumer_offsets"])
    assert answer.assignment == {("orders-eu", 0), ("orders-eu", 1), ("orders-us", 0), ("orders-us", 1)}
    grown = layouts | {"orders-jp": (None,)}
    answer = group.heartbeat(member_id="a", member_epoch=1, instance_id=None, rack=None, rebalance_timeout_ms=-1,
                             topics=None, regex=None, assignor=None, owned=None, client_id="c", client_host="",
                             layouts=grown, namespace_topics=list(grown))
    assert answer.epoch == 2 and ("orders-jp", 0) in answer.assignment
    answer = group.heartbeat(member_id="a", member_epoch=2, instance_id=None, rack=None, rebalance_timeout_ms=-1,
                             topics={"audit"}, regex="", assignor=None, owned=None, client_id="c", client_host="",
                             layouts=grown, namespace_topics=list(grown))
    assert (answer.epoch, answer.assignment) == (2, frozenset())    # revoke the orders first
    answer = group.heartbeat(member_id="a", member_epoch=2, instance_id=None, rack=None, rebalance_timeout_ms=-1,
                             topics=None, regex=None, assignor=None, owned=set(), client_id="c", client_host="",
                             layouts=grown, namespace_topics=list(grown))
    assert (answer.epoch, answer.assignment) == (3, {("audit", 0)})


def test_an_invalid_regex_is_refused(group):
    with pytest.raises(InvalidRegularExpression):
        group.heartbeat(member_id="a", member_epoch=0, instance_id=None, rack=None, rebalance_timeout_ms=5_000,
                        topics=set(), regex="orders-(", assignor=None, owned=set(), client_id="c",
                        client_host="", layouts=LAYOUTS)
    assert not group.members


# --- the coordinator: both kinds of group, topic ids, commits, a restart --------------------------

KEY = GroupKey("public", "default", "billing")


def coordinator_of(core) -> GroupCoordinator:
    return GroupCoordinator(core, SETTINGS)


async def consumer_beat(coordinator, member_id, epoch, *, owned=None, join=False, key=KEY, topics=("orders",)):
    fields = dict(topics=list(topics), rebalance_timeout_ms=5_000, owned=[]) if join else \
        dict(topics=None, rebalance_timeout_ms=-1, owned=owned)
    return await coordinator.consumer_heartbeat(key, member_id=member_id, member_epoch=epoch, instance_id=None,
                                                rack=None, regex=None, assignor=None, client_id="c", client_host="",
                                                partition_rack=lambda topic, index: "room-1", **fields)


async def test_coordinator_answers_topic_ids_and_checks_member_epochs_on_commit(core):
    info = await core.create_topic(TopicName.of("orders"), 2)
    coordinator = coordinator_of(core)
    answer, ids = await consumer_beat(coordinator, "a", 0, join=True)
    assert (answer.epoch, answer.assignment, ids) == (1, {("orders", 0), ("orders", 1)}, {"orders": info.topic_id})
    answer, _ = await consumer_beat(coordinator, "a", 1, owned=[(info.topic_id, 0), (info.topic_id, 1)])
    assert answer.assignment is None
    errors = await coordinator.commit_offsets(KEY, {("orders", 0): OffsetAndMetadata(5)}, member_id="a",
                                              generation=1)
    assert errors == {("orders", 0): None}
    errors = await coordinator.commit_offsets(KEY, {("orders", 0): OffsetAndMetadata(6)}, member_id="a",
                                              generation=0)
    assert isinstance(errors[("orders", 0)], StaleMemberEpoch)
    errors = await coordinator.commit_offsets(KEY, {("orders", 0): OffsetAndMetadata(6)}, member_id="a",
                                              generation=1, epoch_aware=False)
    assert isinstance(errors[("orders", 0)], UnsupportedGroupVersion)
    assert [(o.group_id, o.protocol_type, o.state) for o in await coordinator.list_groups("public", "default")] == [
        ("billing", "consumer", "Stable")]
    assert (await coordinator.describe(KEY)).members[0].member_id == "a"
    coordinator.close()


async def test_one_group_id_is_one_kind_at_a_time(core):
    await core.create_topic(TopicName.of("orders"), 1)
    coordinator = coordinator_of(core)
    await consumer_beat(coordinator, "a", 0, join=True)
    with pytest.raises(InconsistentGroupProtocol):
        await coordinator.join(KEY, member_id="", instance_id=None, client_id="c", client_host="",
                               session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocol_type="consumer",
                               protocols=[("range", b"")], require_known_member_id=False)
    with pytest.raises(UnknownMember):
        await coordinator.heartbeat(KEY, member_id="a", instance_id=None, generation=1)
    await consumer_beat(coordinator, "a", -1)
    joining = asyncio.create_task(coordinator.join(
        KEY, member_id="", instance_id=None, client_id="c", client_host="", session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000, protocol_type="consumer", protocols=[("range", b"")],
        require_known_member_id=False))
    await asyncio.sleep(0.01)
    assert isinstance(coordinator.group(KEY), MembershipGroup)      # the Empty group became classic
    with pytest.raises(GroupNotFound):
        await consumer_beat(coordinator, "b", 0, join=True)
    with pytest.raises(GroupNotFound):
        await coordinator.describe_consumer_group(KEY)
    joining.cancel()
    coordinator.close()


async def test_the_group_kind_and_epoch_survive_a_new_coordinator(core):
    await core.create_topic(TopicName.of("orders"), 1)
    first = coordinator_of(core)
    await consumer_beat(first, "a", 0, join=True)
    await consumer_beat(first, "b", 0, join=True)
    first.close()
    again = coordinator_of(core)            # as after a restart: nothing in memory
    with pytest.raises(UnknownMember):      # the member joins again ...
        await consumer_beat(again, "a", 2, owned=[])
    answer, _ = await consumer_beat(again, "a", 0, join=True)
    assert answer.epoch == 3                # ... at a higher epoch than before
    assert (await again.describe_consumer_group(KEY)).group_epoch == 3
    with pytest.raises(UnknownMember):      # a group never stored: join again (epoch 0)
        await consumer_beat(again, "z", 4, key=GroupKey("public", "default", "never"))
    again.close()

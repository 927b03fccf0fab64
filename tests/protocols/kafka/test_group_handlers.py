"""The group read APIs (OffsetFetch v8-9, ListGroups v5, ConsumerGroupDescribe v1, ShareGroupDescribe)
called through their compiled codecs at the version under test against a real core, with groups
of every kind made the way clients make them: classic by a standalone commit, consumer-protocol
by ConsumerGroupHeartbeat, share by ShareGroupHeartbeat."""

from __future__ import annotations

import uuid

import pytest

from core.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from core.auth import Principal
from core.names import TopicName
from protocols.kafka.broker import ConnectionSession, KafkaBroker
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.handlers import (consumer_group_describe, consumer_group_heartbeat, list_groups, offset_commit,
                                      offset_fetch, share_group_describe, share_group_heartbeat)
from protocols.kafka.registry import advertised
from test_transaction_handlers import ANONYMOUS, broker, call, secured  # noqa: F401 (fixtures)

TOPIC, OTHER = "orders", "audit"
ALICE = ConnectionSession(principal=Principal("alice"), client_host="127.0.0.1")
BOB = ConnectionSession(principal=Principal("bob"), client_host="127.0.0.1")


@pytest.fixture
async def core(core):
    """The shared core (tests/conftest.py), with this module's topics."""
    await core.create_topic(TopicName.of(TOPIC), 2)
    await core.create_topic(TopicName.of(OTHER), 1)
    return core


async def commit(broker, group_id: str, offsets: dict[tuple[str, int], int], *, member_id: str = "",
                 generation: int = -1, version: int = 2, session: ConnectionSession = ANONYMOUS) -> list[int]:
    topics: dict[str, list] = {}
    for (topic, index), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": index, "committed_offset": offset,
                                             "committed_metadata": f"m{offset}"})
    response = await call(broker, offset_commit, version, {
        "group_id": group_id, "generation_id": generation, "member_id": member_id,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]}, session)
    return [p.error_code for t in response.topics for p in t.partitions]


async def consumer_join(broker, group_id: str, topics=(TOPIC,)) -> Msg:
    member_id = str(uuid.uuid4())
    answer = await call(broker, consumer_group_heartbeat, 1, {
        "group_id": group_id, "member_id": member_id, "member_epoch": 0, "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": list(topics), "topic_partitions": []})
    assert answer.error_code == ErrorCode.NONE
    return answer


async def share_heartbeat(broker, group_id: str, member_id: str, epoch: int = 0, topics=(TOPIC,),
                          session: ConnectionSession = ANONYMOUS) -> Msg:
    answer = await call(broker, share_group_heartbeat, 1, {
        "group_id": group_id, "member_id": member_id, "member_epoch": epoch,
        "subscribed_topic_names": list(topics) if epoch == 0 else None}, session)
    assert answer.error_code == ErrorCode.NONE
    return answer


def fetch_group(group_id: str, topics: dict[str, list[int]] | None, member_id: str | None = None,
                member_epoch: int = -1) -> dict:
    return {"group_id": group_id, "member_id": member_id, "member_epoch": member_epoch,
            "topics": None if topics is None else [{"name": name, "partition_indexes": indexes}
                                                   for name, indexes in topics.items()]}


def offsets_of(group: Msg) -> dict[tuple[str, int], tuple[int, str | None, int]]:
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
            for t in group.topics for p in t.partitions}


async def allow(broker: KafkaBroker, resource_type: ResourceType, name: str, operation: Operation,
                user: str = "alice") -> None:
    binding = AclBinding.of(resource_type, name, PatternType.LITERAL, f"User:{user}", "*", operation, Permission.ALLOW)
    assert await broker.authorizer.create_acls(ALICE.principal.tenant, [binding]) == [None]


def test_the_new_versions_are_advertised() -> None:
    served = {a["api_key"]: (a["min_version"], a["max_version"]) for a in advertised()}
    assert served[9] == (0, 9) and served[16] == (0, 5) and served[69] == (0, 1) and served[77] == (1, 1)


# --- OffsetFetch v8-9 -----------------------------------------------------------------------------

@pytest.mark.parametrize("version", [8, 9])
async def test_one_offset_fetch_answers_several_groups_each_with_its_own_offsets(broker, version) -> None:
    assert await commit(broker, "billing", {(TOPIC, 0): 5, (TOPIC, 1): 7}) == [0, 0]
    assert await commit(broker, "shipping", {(TOPIC, 1): 3, (OTHER, 0): 9}) == [0, 0]
    response = await call(broker, offset_fetch, version, {"groups": [
        fetch_group("billing", {TOPIC: [0, 1]}),
        fetch_group("shipping", None),                  # every committed offset
        fetch_group("nobody", {TOPIC: [0]}),            # unknown: no offsets, no error (as Kafka)
    ], "require_stable": False})
    by_id = {g.group_id: g for g in response.groups}
    assert [g.group_id for g in response.groups] == ["billing", "shipping", "nobody"]
    assert all(g.error_code == ErrorCode.NONE for g in response.groups)
    assert offsets_of(by_id["billing"]) == {(TOPIC, 0): (5, "m5", 0), (TOPIC, 1): (7, "m7", 0)}
    assert offsets_of(by_id["shipping"]) == {(OTHER, 0): (9, "m9", 0), (TOPIC, 1): (3, "m3", 0)}
    assert offsets_of(by_id["nobody"]) == {(TOPIC, 0): (-1, "", 0)}


async def test_v9_checks_the_member_of_a_consumer_protocol_group(broker) -> None:
    joined = await consumer_join(broker, "modern")
    member, epoch = joined.member_id, joined.member_epoch
    assert await commit(broker, "modern", {(TOPIC, 0): 4}, member_id=member, generation=epoch, version=9) == [0]

    async def fetched(member_id, member_epoch) -> Msg:
        response = await call(broker, offset_fetch, 9, {"groups": [
            fetch_group("modern", {TOPIC: [0]}, member_id, member_epoch)]})
        return response.groups[0]

    assert offsets_of(await fetched(member, epoch)) == {(TOPIC, 0): (4, "m4", 0)}
    assert offsets_of(await fetched(None, -1)) == {(TOPIC, 0): (4, "m4", 0)}     # admin clients name nobody
    stale = await fetched(member, epoch + 1)
    assert (stale.error_code, stale.topics) == (ErrorCode.STALE_MEMBER_EPOCH, [])
    assert (await fetched("someone-else", epoch)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await fetched(None, epoch)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_v9_does_not_check_members_of_classic_groups_or_unknown_ids(broker) -> None:
    assert await commit(broker, "classic", {(TOPIC, 0): 2}) == [0]
    response = await call(broker, offset_fetch, 9, {"groups": [
        fetch_group("classic", {TOPIC: [0]}, "whoever", 12),
        fetch_group("unknown", {TOPIC: [0]}, "whoever", 12)]})
    assert [g.error_code for g in response.groups] == [ErrorCode.NONE, ErrorCode.NONE]
    assert offsets_of(response.groups[0]) == {(TOPIC, 0): (2, "m2", 0)}
    assert offsets_of(response.groups[1]) == {(TOPIC, 0): (-1, "", 0)}


async def test_v8_refuses_each_group_the_client_may_not_describe_on_its_own(secured) -> None:
    for resource_type, name in ((ResourceType.GROUP, "open"), (ResourceType.TOPIC, TOPIC), (ResourceType.TOPIC, OTHER)):
        await allow(secured, resource_type, name, Operation.READ, user="bob")
    assert await commit(secured, "open", {(TOPIC, 0): 1, (OTHER, 0): 2}, session=BOB) == [0, 0]
    await allow(secured, ResourceType.GROUP, "open", Operation.DESCRIBE)
    await allow(secured, ResourceType.TOPIC, TOPIC, Operation.DESCRIBE)
    response = await call(secured, offset_fetch, 8, {"groups": [
        fetch_group("open", {TOPIC: [0], OTHER: [0]}), fetch_group("closed", {TOPIC: [0]}),
        fetch_group("open", None)]}, ALICE)
    named, closed, everything = response.groups
    assert named.error_code == ErrorCode.NONE
    assert offsets_of(named) == {(TOPIC, 0): (1, "m1", 0), (OTHER, 0): (-1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED)}
    assert (closed.error_code, closed.topics) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    assert offsets_of(everything) == {(TOPIC, 0): (1, "m1", 0)}    # topics it may not describe left out


@pytest.mark.parametrize("version", [1, 7])
async def test_single_group_versions_still_answer_as_before(broker, version) -> None:
    assert await commit(broker, "legacy", {(TOPIC, 1): 6}) == [0]
    response = await call(broker, offset_fetch, version, {
        "group_id": "legacy", "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}]})
    assert response.error_code == ErrorCode.NONE
    assert offsets_of(response) == {(TOPIC, 0): (-1, "", 0), (TOPIC, 1): (6, "m6", 0)}


# --- ListGroups v5 --------------------------------------------------------------------------------

async def groups_of_every_kind(broker) -> None:
    assert await commit(broker, "classic", {(TOPIC, 0): 1}) == [0]
    await consumer_join(broker, "modern")
    await share_heartbeat(broker, "queue", str(uuid.uuid4()))
    await share_heartbeat(broker, "idle-queue", member := str(uuid.uuid4()))
    await share_heartbeat(broker, "idle-queue", member, -1)     # left: Empty


async def listed(broker, version: int, states=(), types=()) -> list[tuple]:
    response = await call(broker, list_groups, version, {"states_filter": list(states), "types_filter": list(types)})
    assert response.error_code == ErrorCode.NONE
    return [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in response.groups]


async def test_list_groups_v5_shows_every_kind_with_its_type(broker) -> None:
    await groups_of_every_kind(broker)
    assert await listed(broker, 5) == [("classic", "", "Empty", "classic"), ("idle-queue", "share", "Empty", "share"),
                                       ("modern", "consumer", "Stable", "consumer"),
                                       ("queue", "share", "Stable", "share")]
    assert [g[0] for g in await listed(broker, 5, types=["Share"])] == ["idle-queue", "queue"]
    assert [g[0] for g in await listed(broker, 5, types=["consumer", "classic"])] == ["classic", "modern"]
    assert [g[0] for g in await listed(broker, 5, states=["stable"], types=["share"])] == ["queue"]
    assert [g[0] for g in await listed(broker, 5, states=["EMPTY"])] == ["classic", "idle-queue"]
    assert await listed(broker, 5, types=["streams"]) == []
    assert [g[0] for g in await listed(broker, 0)] == ["classic", "idle-queue", "modern", "queue"]


async def test_a_share_member_that_went_silent_is_gone_from_the_listing(broker, core) -> None:
    await share_heartbeat(broker, "queue", str(uuid.uuid4()))
    core.clock.advance(broker.shares.settings.session_timeout_ms + 1)
    assert await listed(broker, 5) == [("queue", "share", "Empty", "share")]


# --- ConsumerGroupDescribe v1 ---------------------------------------------------------------------

async def test_consumer_group_describe_v1_names_each_member_a_consumer_member(broker) -> None:
    joined = await consumer_join(broker, "modern")
    for version, member_type in ((0, -1), (1, 1)):
        response = await call(broker, consumer_group_describe, version, {"group_ids": ["modern"],
                                                                         "include_authorized_operations": False})
        group = response.groups[0]
        assert group.error_code == ErrorCode.NONE
        assert [(m.member_id, m.member_type) for m in group.members] == [(joined.member_id, member_type)]


# --- ShareGroupDescribe ---------------------------------------------------------------------------

async def test_share_group_describe_shows_members_and_their_assignments(broker, core) -> None:
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    await share_heartbeat(broker, "queue", first, topics=(TOPIC,))
    joined = await share_heartbeat(broker, "queue", second, topics=(TOPIC, OTHER))
    await consumer_join(broker, "modern")
    response = await call(broker, share_group_describe, 1, {
        "group_ids": ["queue", "modern", "nobody", ""], "include_authorized_operations": True})
    queue, modern, nobody, empty = response.groups
    assert (queue.error_code, queue.group_id, queue.group_state, queue.assignor_name) == \
        (ErrorCode.NONE, "queue", "Stable", "simple")
    assert queue.group_epoch == queue.assignment_epoch == 2
    assert queue.authorized_operations != -2147483648
    ids = {name: uuid.UUID(hex=(await core.registry.get_topic(TopicName.of(name))).topic_id) for name in (TOPIC, OTHER)}
    members = {m.member_id: m for m in queue.members}
    assert members[second].member_epoch == joined.member_epoch
    assert members[second].subscribed_topic_names == [OTHER, TOPIC]
    assert [(t.topic_id, t.topic_name, t.partitions) for t in members[second].assignment.topic_partitions] == \
        [(ids[OTHER], OTHER, [0]), (ids[TOPIC], TOPIC, [0, 1])]
    assert [(t.topic_name, t.partitions) for t in members[first].assignment.topic_partitions] == [(TOPIC, [0, 1])]
    assert (modern.error_code, nobody.error_code, empty.error_code) == \
        (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.INVALID_GROUP_ID)

    await share_heartbeat(broker, "queue", second, -1)
    core.clock.advance(broker.shares.settings.session_timeout_ms + 1)     # the first one went silent
    response = await call(broker, share_group_describe, 1, {"group_ids": ["queue"],
                                                           "include_authorized_operations": False})
    assert (response.groups[0].group_state, response.groups[0].members) == ("Empty", [])
    assert response.groups[0].authorized_operations == -2147483648


async def test_share_group_describe_needs_describe_on_the_group(secured) -> None:
    await allow(secured, ResourceType.GROUP, "queue", Operation.READ, user="bob")
    await allow(secured, ResourceType.TOPIC, TOPIC, Operation.READ, user="bob")
    await share_heartbeat(secured, "queue", str(uuid.uuid4()), session=BOB)
    request = {"group_ids": ["queue"], "include_authorized_operations": False}
    denied = await call(secured, share_group_describe, 1, request, ALICE)
    assert denied.groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    await allow(secured, ResourceType.GROUP, "queue", Operation.DESCRIBE)
    assert (await call(secured, share_group_describe, 1, request, ALICE)).groups[0].error_code == ErrorCode.NONE

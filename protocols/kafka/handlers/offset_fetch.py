"""OffsetFetch (key 9), versions 0-9.

Behaviour: the group's committed offsets, metadata strings and (v5+) committed leader epochs,
whatever the group's state; -1, "" and -1 for a partition without one. v2+ may ask for every
committed offset (null topics). v7's require_stable is accepted: there are no pending
transactional commits to wait for. v0-1 report a group error on every partition, v2-7 in the
top-level error code. v0 (Kafka read those from ZooKeeper) answers UNKNOWN_TOPIC_OR_PARTITION for
partitions that do not exist.
v8 (KIP-709) asks for several groups in one request and answers each with its own error code.
v9 (KIP-848) may name the asking member: in a consumer-protocol group a member that is not in the
group is UNKNOWN_MEMBER_ID and one at another epoch STALE_MEMBER_EPOCH, as in Kafka; no member
(null id, epoch < 0: admin clients, and librdkafka's consumers) and classic groups are not checked.
With ACLs enforced (SASL on), as in Kafka 2.8: the group needs DESCRIBE (GROUP_AUTHORIZATION_FAILED,
answered as any group error); then a named partition of a topic without DESCRIBE is answered
TOPIC_AUTHORIZATION_FAILED (offset -1) and not looked up, and asking for all (null topics) leaves
such topics out.
"""

from core.errors import CoreError, InvalidName, UnknownTopic
from core.groups.values import OffsetAndMetadata
from core.names import TopicName
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, check, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.offset_fetch import OFFSET_FETCH as API

Row = tuple[tuple[str, int], OffsetAndMetadata | None, ErrorCode]   # (topic, index), committed, error


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if ctx.version >= 8:
        groups = []
        for group in request.groups:
            code, rows = await _fetch(ctx, group.group_id, _asked(group.topics), group.member_id, group.member_epoch)
            groups.append({"group_id": group.group_id, "error_code": code, "topics": _topics(rows)})
        return {"throttle_time_ms": 0, "groups": groups}
    asked = _asked(request.topics)
    code, rows = await _fetch(ctx, request.group_id, asked, None, -1)
    if code != ErrorCode.NONE and ctx.version < 2:   # v0-1 have no group error: each partition carries it
        rows = [(tp, None, code) for tp in asked or []]
        code = ErrorCode.NONE
    return {"throttle_time_ms": 0, "error_code": code, "topics": _topics(rows)}


def _asked(topics) -> list[tuple[str, int]] | None:
    return None if topics is None else [(t.name, index) for t in topics for index in t.partition_indexes]


async def _fetch(ctx: RequestContext, group_id: str, asked: list | None, member_id: str | None,
                 member_epoch: int) -> tuple[ErrorCode, list[Row]]:
    """One group's answer: its error (then no rows) or a row per partition."""
    if not await check(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    describable = None   # None: every topic
    if enforced(ctx) and asked is not None:
        describable = await authorized_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in asked))
    key = group_key(ctx, group_id)
    try:
        await coordinator(ctx).validate_offset_fetch(key, member_id, member_epoch)
        found = await coordinator(ctx).fetch_offsets(
            key, asked if describable is None else [tp for tp in asked if tp[0] in describable])
    except CoreError as exc:
        return kafka_code(exc), []
    if asked is None and enforced(ctx):   # all offsets: only those of topics the client may describe
        shown = await authorized_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in found))
        found = {tp: committed for tp, committed in found.items() if tp[0] in shown}
    rows = []
    for tp in (asked if asked is not None else sorted(found)):
        code = ErrorCode.NONE
        if describable is not None and tp[0] not in describable:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif ctx.version == 0 and not await _exists(ctx, tp):
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        rows.append((tp, found.get(tp) if code == ErrorCode.NONE else None, code))
    return ErrorCode.NONE, rows


def _topics(rows: list[Row]) -> list[dict]:
    topics: dict[str, list] = {}
    for (topic, index), committed, code in rows:
        topics.setdefault(topic, []).append({
            "partition_index": index,
            "committed_offset": committed.offset if committed is not None else -1,
            "committed_leader_epoch": committed.leader_epoch if committed is not None else -1,
            "metadata": committed.metadata if committed is not None else "",
            "error_code": code,
        })
    return [{"name": name, "partitions": partitions} for name, partitions in topics.items()]


async def _exists(ctx: RequestContext, tp: tuple[str, int]) -> bool:
    try:
        info = await ctx.core.registry.get_topic(TopicName.of(tp[0], ctx.tenant, ctx.namespace))
    except (UnknownTopic, InvalidName):
        return False
    return 0 <= tp[1] < info.partitions

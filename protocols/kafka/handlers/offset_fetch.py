"""OffsetFetch (key 9), versions 0-7.

Behaviour: the group's committed offsets, metadata strings and (v5+) committed leader epochs,
whatever the group's state; -1, "" and -1 for a partition without one. v2+ may ask for every committed offset (null topics). v7's
require_stable is accepted: there are no pending transactional commits to wait for. v0-1 report a
group error on every partition, v2+ in the top-level error code. v0 (Kafka read those from
ZooKeeper) answers UNKNOWN_TOPIC_OR_PARTITION for partitions that do not exist.
With ACLs enforced (SASL on), as in Kafka 2.8: the group needs DESCRIBE (GROUP_AUTHORIZATION_FAILED,
answered as any group error); then a named partition of a topic without DESCRIBE is answered
TOPIC_AUTHORIZATION_FAILED (offset -1) and not looked up, and asking for all (null topics) leaves
such topics out.
"""

from core.errors import CoreError, InvalidName, UnknownTopic
from core.names import TopicName
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, check, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.offset_fetch import OFFSET_FETCH as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    asked = None if request.topics is None else [(t.name, index) for t in request.topics for index in t.partition_indexes]
    if not await check(ctx, Operation.DESCRIBE, ResourceType.GROUP, request.group_id):
        return _group_error(ErrorCode.GROUP_AUTHORIZATION_FAILED, asked, ctx.version)
    describable = None   # None: every topic
    if enforced(ctx) and asked is not None:
        describable = await authorized_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in asked))
    try:
        found = await coordinator(ctx).fetch_offsets(
            group_key(ctx, request.group_id),
            asked if describable is None else [tp for tp in asked if tp[0] in describable])
    except CoreError as exc:
        return _group_error(kafka_code(exc), asked, ctx.version)
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
    return _response(rows, ErrorCode.NONE)


def _group_error(code: ErrorCode, asked: list | None, version: int) -> dict:
    """Kafka's answer to a refusal of the whole group: v2+ in the top-level error code, v0-1 on
    every asked partition."""
    if version >= 2:
        return {"throttle_time_ms": 0, "error_code": code, "topics": []}
    return _response([(tp, None, code) for tp in asked or []], ErrorCode.NONE)


def _response(rows, error_code: ErrorCode) -> dict:
    topics: dict[str, list] = {}
    for (topic, index), committed, code in rows:
        topics.setdefault(topic, []).append({
            "partition_index": index,
            "committed_offset": committed.offset if committed is not None else -1,
            "committed_leader_epoch": committed.leader_epoch if committed is not None else -1,
            "metadata": committed.metadata if committed is not None else "",
            "error_code": code,
        })
    return {"throttle_time_ms": 0, "error_code": error_code,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]}


async def _exists(ctx: RequestContext, tp: tuple[str, int]) -> bool:
    try:
        info = await ctx.core.registry.get_topic(TopicName.of(tp[0], ctx.tenant, ctx.namespace))
    except (UnknownTopic, InvalidName):
        return False
    return 0 <= tp[1] < info.partitions

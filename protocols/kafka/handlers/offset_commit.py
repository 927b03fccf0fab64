"""OffsetCommit (key 8), versions 0-8.

Behaviour: offsets are stored as core cursors named after the group, with the metadata string
(null stored as ""), and are durable before the response. Partitions of unknown topics fail with
UNKNOWN_TOPIC_OR_PARTITION on their own; the group decides for the rest: members of the current
generation may commit (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, and
REBALANCE_IN_PROGRESS while the group completes a rebalance), and a commit with generation -1 and
no member id (manually assigned consumers, admin tools) is accepted while the group is Empty,
creating it if need be. v0 commits are not checked against the group, as Kafka's (stored in
ZooKeeper) were not. Metadata over 4096 characters is OFFSET_METADATA_TOO_LARGE.
Gaps: the v1 commit timestamp and the v2-4 retention time are ignored: committed offsets never
expire (Kafka drops an Empty group's offsets after offsets.retention.minutes); the committed
leader epoch is not stored (OffsetFetch answers -1).
"""

from core.errors import CoreError
from core.groups.values import OffsetAndMetadata
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.offset_commit import OFFSET_COMMIT as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    offsets = {(topic.name, p.partition_index): OffsetAndMetadata(p.committed_offset, p.committed_metadata or "")
               for topic in request.topics for p in topic.partitions}
    try:
        errors = await coordinator(ctx).commit_offsets(
            group_key(ctx, request.group_id), offsets, member_id=request.member_id,
            instance_id=request.group_instance_id, generation=request.generation_id,
            check_membership=ctx.version >= 1)
    except CoreError as exc:      # the group id itself (too long to store)
        errors = {tp: exc for tp in offsets}
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": _code(errors.get((topic.name, p.partition_index)))}
            for p in topic.partitions]}
        for topic in request.topics]}


def _code(error: CoreError | None) -> ErrorCode:
    return ErrorCode.NONE if error is None else kafka_code(error)

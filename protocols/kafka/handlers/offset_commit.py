"""OffsetCommit (key 8), versions 0-9.

Behaviour: offsets are stored as core cursors named after the group, with the metadata string
(null stored as "") and, from v6, the committed leader epoch; durable before the response. Partitions of unknown topics fail with
UNKNOWN_TOPIC_OR_PARTITION on their own; the group decides for the rest: members of the current
generation may commit (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, and
REBALANCE_IN_PROGRESS while the group completes a rebalance), and a commit with generation -1 and
no member id (manually assigned consumers, admin tools) is accepted while the group is Empty,
creating it if need be. A member of a consumer-protocol group (KIP-848) commits at its member
epoch (sent as the generation, from v9: an older version is UNSUPPORTED_VERSION, as in Kafka), or
at an older one of its epochs for partitions it still holds (KIP-1251's relief for a commit that
crossed an epoch change); otherwise STALE_MEMBER_EPOCH, an unknown member UNKNOWN_MEMBER_ID.
v0 commits are not checked against the group, as Kafka's (stored in ZooKeeper) were not. Metadata over 4096 characters is OFFSET_METADATA_TOO_LARGE.
With ACLs enforced (SASL on), as in Kafka 2.8: without READ on the group every partition is
GROUP_AUTHORIZATION_FAILED; then each topic needs READ (TOPIC_AUTHORIZATION_FAILED, before the
existence check), and only the allowed partitions reach the group.
Committed offsets expire with their group (offsets.retention.minutes, core/groups/coordinator.py).
Gaps: the v1 commit timestamp and the v2-4 retention time are ignored.
"""

from collections.abc import Callable

from core.errors import CoreError
from core.groups.values import OffsetAndMetadata
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, check, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.offset_commit import OFFSET_COMMIT as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return _response(request, lambda tp: ErrorCode.GROUP_AUTHORIZATION_FAILED)
    readable = await authorized_names(ctx, Operation.READ, ResourceType.TOPIC,
                                      (t.name for t in request.topics)) if enforced(ctx) else None
    offsets = {(topic.name, p.partition_index):
               OffsetAndMetadata(p.committed_offset, p.committed_metadata or "", p.committed_leader_epoch)
               for topic in request.topics for p in topic.partitions
               if readable is None or topic.name in readable}
    errors: dict = {}
    if offsets or readable is None:   # as Kafka: the group is not consulted when nothing may be committed
        try:
            errors = await coordinator(ctx).commit_offsets(
                group_key(ctx, request.group_id), offsets, member_id=request.member_id,
                instance_id=request.group_instance_id, generation=request.generation_id,
                check_membership=ctx.version >= 1, epoch_aware=ctx.version >= 9)
        except CoreError as exc:      # the group id itself (too long to store)
            errors = {tp: exc for tp in offsets}

    def code(tp: tuple[str, int]) -> ErrorCode:
        if tp not in offsets:   # a topic the client may not read
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        error = errors.get(tp)
        return ErrorCode.NONE if error is None else kafka_code(error)
    return _response(request, code)


def _response(request: Msg, code: Callable[[tuple[str, int]], ErrorCode]) -> dict:
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": code((topic.name, p.partition_index))}
            for p in topic.partitions]}
        for topic in request.topics]}

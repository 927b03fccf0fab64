"""ShareGroupHeartbeat (key 76), version 1: share group membership (KIP-932).

Behaviour: a member joins with epoch 0 (under its own member id, or one the broker makes up when
it sends none) and its subscribed topic names, heartbeats with its epoch, leaves with epoch -1
(what it holds in any share partition of the group is released). Every member is assigned every
partition of the topics it subscribes to (core/shares/share_group.py says why); the assignment
goes out, by topic id, whenever it changed (a topic created or grown). Members silent for
group.share.session.timeout.ms are dropped. Errors: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
GROUP_MAX_SIZE_REACHED, INVALID_REQUEST (a join without topics), INVALID_GROUP_ID, and
GROUP_ID_NOT_FOUND for an id a classic or consumer group holds. With ACLs enforced (SASL on), the
group needs READ (GROUP_AUTHORIZATION_FAILED).
Gaps: membership is not persisted (after a restart members join again; what they acknowledged is
kept); the heartbeat goes to the coordinator of the group id, and the share partitions live where
they are fetched.
"""

from core.errors import CoreError
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import client_host, group_key, wire_assignment
from protocols.kafka.schema.share_group_heartbeat import SHARE_GROUP_HEARTBEAT as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized to read the group")
    shares = ctx.broker.shares
    try:
        answer, topic_ids = await shares.heartbeat(
            group_key(ctx, request.group_id), member_id=request.member_id, epoch=request.member_epoch,
            topics=request.subscribed_topic_names, rack=request.rack_id,
            client_id=ctx.header.client_id or "", client_host=client_host(ctx))
    except CoreError as exc:
        return _error(kafka_code(exc), str(exc))
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "member_id": answer.member_id,
            "member_epoch": answer.epoch, "heartbeat_interval_ms": shares.settings.heartbeat_interval_ms,
            "assignment": wire_assignment(answer.assignment, topic_ids)}


def _error(code: ErrorCode, message: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "member_epoch": 0,
            "heartbeat_interval_ms": 0}

"""ShareAcknowledge (key 79), version 1: a share group member's acknowledgements on their own (KIP-932).

Behaviour: within the member's share session (epoch 0 is refused: there is nothing to acknowledge
in a session not yet open, INVALID_SHARE_SESSION_EPOCH; -1 closes the session after the
acknowledgements and releases what the member still holds), each batch's records are accepted (1),
released (2), rejected (3) or marked as gaps (0), one type for the range or one per offset, and
persisted before the answer. A record not acquired by this member makes its partition
INVALID_RECORD_STATE. With ACLs enforced (SASL on), the group needs READ.
"""

from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.share_acknowledge import SHARE_ACKNOWLEDGE as API
from protocols.kafka.share_sessions import (CLOSE_EPOCH, NO_LEADER_CHANGE, OPEN_EPOCH, acknowledge, key_of,
                                            release_member, sessions)


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not request.group_id or not request.member_id:
        return _error(ErrorCode.INVALID_REQUEST, "a share acknowledgement needs a group id and a member id")
    if not await check(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized to read the group")
    key, member, epoch = key_of(ctx, request.group_id), request.member_id, request.share_session_epoch
    registry = sessions(ctx)
    if epoch == OPEN_EPOCH:
        return _error(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "no share session is open at epoch 0")
    code = registry.check(key, member, epoch)
    if code != ErrorCode.NONE:
        return _error(code, f"share session of member {member}: epoch {epoch}")
    codes = await acknowledge(ctx, key, member, request.topics)
    if epoch == CLOSE_EPOCH:
        registry.close(key, member)
        release_member(ctx, key, member)
    else:
        registry.get(key, member).next_epoch()
    by_topic: dict = {}
    for (topic_id, index), code in sorted(codes.items()):
        by_topic.setdefault(topic_id, []).append({"partition_index": index, "error_code": code,
                                                  "current_leader": NO_LEADER_CHANGE})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "responses": [{"topic_id": t, "partitions": parts} for t, parts in by_topic.items()],
            "node_endpoints": []}


def _error(code: ErrorCode, message: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": [],
            "node_endpoints": []}

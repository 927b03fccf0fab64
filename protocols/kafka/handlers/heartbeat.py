"""Heartbeat (key 12), versions 0-4.

Behaviour: keeps the member's session alive; REBALANCE_IN_PROGRESS tells a member of a group that
is rebalancing to join again (the session is still renewed), ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID
/ FENCED_INSTANCE_ID as Kafka's coordinator answers them. With ACLs enforced (SASL on), the group
needs READ (GROUP_AUTHORIZATION_FAILED), as in Kafka.
Gaps: none known.
"""

from core.errors import GroupError
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.heartbeat import HEARTBEAT as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    try:
        await coordinator(ctx).heartbeat(group_key(ctx, request.group_id), member_id=request.member_id,
                                         instance_id=request.group_instance_id, generation=request.generation_id)
    except GroupError as exc:
        return {"throttle_time_ms": 0, "error_code": kafka_code(exc)}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE}

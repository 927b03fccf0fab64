"""SyncGroup (key 14), versions 0-5.

Behaviour: the leader's request carries every member's assignment (members it leaves out get an
empty one); each member's response comes once the leader's has arrived, with its own assignment.
A member of a Stable group gets its current assignment at once. From v5 the protocol type and
name are mandatory and must be the group's (INCONSISTENT_GROUP_PROTOCOL otherwise). With ACLs
enforced (SASL on), after that check the group needs READ (GROUP_AUTHORIZATION_FAILED), as in Kafka.
Gaps: none known.
"""

from core.errors import GroupError
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.sync_group import SYNC_GROUP as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if ctx.version >= 5 and (request.protocol_type is None or request.protocol_name is None):
        return _error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if not await check(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    try:
        result = await coordinator(ctx).sync(
            group_key(ctx, request.group_id),
            member_id=request.member_id,
            instance_id=request.group_instance_id,
            generation=request.generation_id,
            protocol_type=request.protocol_type,
            protocol_name=request.protocol_name,
            assignments={a.member_id: a.assignment for a in request.assignments},
        )
    except GroupError as exc:
        return _error(kafka_code(exc))
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name, "assignment": result.assignment}


def _error(code: ErrorCode) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "protocol_type": None, "protocol_name": None,
            "assignment": b""}

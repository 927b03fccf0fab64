"""LeaveGroup (key 13), versions 0-4.

Behaviour: the members leave at once and the group rebalances without them. v3+ names a batch of
members, each by member id or (empty member id) by group instance id, and answers per member; v0-2
name one member and answer with its error. With ACLs enforced (SASL on), the group needs READ
(GROUP_AUTHORIZATION_FAILED for the whole request, no members), as in Kafka.
Gaps: none known.
"""

from core.errors import GroupError
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.leave_group import LEAVE_GROUP as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "members": []}
    if ctx.version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    try:
        errors = await coordinator(ctx).leave(group_key(ctx, request.group_id), leaving)
    except GroupError as exc:
        return {"throttle_time_ms": 0, "error_code": kafka_code(exc), "members": []}
    codes = [ErrorCode.NONE if error is None else kafka_code(error) for error in errors]
    if ctx.version < 3:
        return {"throttle_time_ms": 0, "error_code": codes[0]}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "members": [{"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
                        for (member_id, instance_id), code in zip(leaving, codes)]}

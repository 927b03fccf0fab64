"""DescribeGroups (key 15), versions 0-5.

Behaviour: each group's state, protocol type, and, when Stable, its chosen protocol and every
member's metadata and assignment (members of a group that is not Stable are listed without them).
An unknown group is described as Dead with no error, as in Kafka before v6. With ACLs enforced
(SASL on), each group needs DESCRIBE (GROUP_AUTHORIZATION_FAILED). With
include_authorized_operations (v3+), a described group carries the bit field of the group
operations (READ, DELETE, DESCRIBE) the client may do; with SASL off, all of them.
"""

from core.errors import CoreError
from protocols.kafka.authorization import Operation, ResourceType, authorized_operations, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.describe_groups import DESCRIBE_GROUPS as API

NOT_REQUESTED = -2147483648


async def handle(request: Msg, ctx: RequestContext) -> dict:
    groups = []
    for group_id in request.groups:
        if not await check(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_error(ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id))
            continue
        try:
            summary = await coordinator(ctx).describe(group_key(ctx, group_id))
        except CoreError as exc:
            groups.append(_error(kafka_code(exc), group_id))
            continue
        operations = NOT_REQUESTED
        if request.include_authorized_operations:
            operations = await authorized_operations(ctx, ResourceType.GROUP, group_id)
        groups.append({
            "error_code": ErrorCode.NONE,
            "group_id": group_id,
            "group_state": summary.state,
            "protocol_type": summary.protocol_type,
            "protocol_data": summary.protocol_name,
            "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                         "client_host": m.client_host, "member_metadata": m.metadata,
                         "member_assignment": m.assignment} for m in summary.members],
            "authorized_operations": operations,
        })
    return {"throttle_time_ms": 0, "groups": groups}


def _error(code: ErrorCode, group_id: str) -> dict:
    return {"error_code": code, "group_id": group_id, "group_state": "", "protocol_type": "", "protocol_data": "",
            "members": []}

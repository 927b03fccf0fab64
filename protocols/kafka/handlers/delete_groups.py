"""DeleteGroups (key 42), versions 0-2.

Behaviour: deletes Empty groups and their committed offsets. A group with members is
NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND; each group is answered once. With ACLs
enforced (SASL on), each group needs DELETE (GROUP_AUTHORIZATION_FAILED), as in Kafka.
Gaps: none known.
"""

from core.errors import CoreError
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.delete_groups import DELETE_GROUPS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    results = []
    for group_id in dict.fromkeys(request.groups_names):
        if not await check(ctx, Operation.DELETE, ResourceType.GROUP, group_id):
            results.append({"group_id": group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
            continue
        try:
            await coordinator(ctx).delete_group(group_key(ctx, group_id))
            code = ErrorCode.NONE
        except CoreError as exc:
            code = kafka_code(exc)
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time_ms": 0, "results": results}

"""ListGroups (key 16), versions 0-4.

Behaviour: the groups of the client's tenant/namespace: those in memory and those with committed
offsets (Empty after a restart), with their protocol type; v4 adds each group's state and filters
by states (names compared without regard to case). With ACLs enforced (SASL on), as in Kafka:
DESCRIBE on the cluster lists every group, otherwise only the groups the client may DESCRIBE.
Gaps: none known.
"""

from protocols.kafka.authorization import Operation, ResourceType, check, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.groups import coordinator
from protocols.kafka.schema.list_groups import LIST_GROUPS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    overviews = await coordinator(ctx).list_groups(ctx.tenant, ctx.namespace, request.states_filter)
    if not await check_cluster(ctx, Operation.DESCRIBE):
        overviews = [o for o in overviews if await check(ctx, Operation.DESCRIBE, ResourceType.GROUP, o.group_id)]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "groups": [{"group_id": o.group_id, "protocol_type": o.protocol_type, "group_state": o.state}
                       for o in overviews]}

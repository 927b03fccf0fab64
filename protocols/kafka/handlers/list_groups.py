"""ListGroups (key 16), versions 0-4.

Behaviour: the groups of the client's tenant/namespace: those in memory and those with committed
offsets (Empty after a restart), with their protocol type; v4 adds each group's state and filters
by states (names compared without regard to case).
Gaps: none known.
"""

from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.groups import coordinator
from protocols.kafka.schema.list_groups import LIST_GROUPS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    overviews = await coordinator(ctx).list_groups(ctx.tenant, ctx.namespace, request.states_filter)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "groups": [{"group_id": o.group_id, "protocol_type": o.protocol_type, "group_state": o.state}
                       for o in overviews]}

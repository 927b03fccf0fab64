"""ListGroups (key 16), versions 0-5.

Behaviour: the groups of the client's tenant/namespace: classic and consumer-protocol groups in
memory and those with committed offsets (Empty after a restart), and share groups, with their
protocol type ("share" for share groups); v4 adds each group's state and filters by states, v5
each group's type (classic, consumer, share) and filters by types (names compared without regard
to case; an unknown name matches nothing, as in Kafka). Every version lists every type, as Kafka
does. With ACLs enforced (SASL on), as in Kafka: DESCRIBE on the cluster lists every group,
otherwise only the groups the client may DESCRIBE.
Gaps: share groups are known from their members (core/shares keeps membership in memory): after a
restart a share group is listed again once a member has joined it.
"""

from protocols.kafka.authorization import Operation, ResourceType, check, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.groups import coordinator
from protocols.kafka.schema.list_groups import LIST_GROUPS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    states = {s.lower() for s in request.states_filter}
    types = {t.lower() for t in request.types_filter}
    overviews = await coordinator(ctx).list_groups(ctx.tenant, ctx.namespace)
    overviews += ctx.broker.shares.list_groups(ctx.tenant, ctx.namespace)
    overviews = [o for o in sorted(overviews, key=lambda o: o.group_id)
                 if (not states or o.state.lower() in states) and (not types or o.group_type in types)]
    if not await check_cluster(ctx, Operation.DESCRIBE, audit=False):
        overviews = [o for o in overviews
                     if await check(ctx, Operation.DESCRIBE, ResourceType.GROUP, o.group_id, audit=False)]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "groups": [{"group_id": o.group_id, "protocol_type": o.protocol_type, "group_state": o.state,
                        "group_type": o.group_type} for o in overviews]}

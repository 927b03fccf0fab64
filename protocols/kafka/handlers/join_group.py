"""JoinGroup (key 11), versions 0-7.

Behaviour: core.groups' coordinator with Kafka's rules. The response is sent when the rebalance
completes: every known member joined again, or the rebalance timeout passed (v0 has none: the
session timeout serves). A new group first waits the initial rebalance delay (500 ms here, 3 s in
Kafka; GroupSettings) for more members. The handler awaits, which holds up only this connection
(Kafka clients talk to the coordinator on a connection of its own), never the others. From v4 a
member without an instance id joining with an empty member id gets MEMBER_ID_REQUIRED and a
member id to join with (KIP-394); a static member (v5+, KIP-345) that restarts gets its old
place, and its assignment without a rebalance when the group is Stable. With ACLs enforced (SASL
on), joining needs READ on the group (GROUP_AUTHORIZATION_FAILED, empty member id), as in Kafka.
Gaps: group.max.size is unlimited; DescribeGroups' client host is empty.
"""

from core.errors import GroupError
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import client_host, coordinator, group_key
from protocols.kafka.schema.join_group import JOIN_GROUP as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    version = ctx.version
    if not await check(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, "", version)
    try:
        result = await coordinator(ctx).join(
            group_key(ctx, request.group_id),
            member_id=request.member_id,
            instance_id=request.group_instance_id,
            client_id=ctx.header.client_id or "",
            client_host=client_host(ctx),
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            require_known_member_id=version >= 4 and request.group_instance_id is None,
        )
    except GroupError as exc:
        member_id = exc.member_id if exc.member_id is not None else request.member_id
        return _error(kafka_code(exc), member_id, version)
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "generation_id": result.generation,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name if version >= 7 else (result.protocol_name or ""),
        "leader": result.leader_id,
        "member_id": result.member_id,
        "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id, "metadata": m.metadata}
                    for m in result.members],
    }


def _error(code: ErrorCode, member_id: str, version: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "generation_id": -1, "protocol_type": None,
            "protocol_name": None if version >= 7 else "", "leader": "", "member_id": member_id, "members": []}

"""ConsumerGroupDescribe (key 69), versions 0-1: KIP-848 consumer groups in full.

Behaviour: each group's state (Empty, Assigning, Reconciling, Stable), group epoch, assignment
epoch, chosen server assignor, and every member with its epoch, rack, client, subscribed topics,
current assignment and target assignment; v1 adds the member's type (KIP-1099), always 1
(consumer): classic members cannot join a consumer-protocol group here (no online migration).
A classic group or an unknown one is GROUP_ID_NOT_FOUND, as in Kafka. With ACLs enforced (SASL
on), each group needs DESCRIBE (GROUP_AUTHORIZATION_FAILED); include_authorized_operations reports
the group operations allowed.
"""

import uuid

from core.errors import CoreError
from protocols.kafka.authorization import Operation, ResourceType, authorized_operations, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, described_assignment, group_key
from protocols.kafka.schema.consumer_group_describe import CONSUMER_GROUP_DESCRIBE as API

NOT_REQUESTED = -2147483648
CONSUMER_MEMBER = 1    # KIP-1099's member types: 0 classic, 1 consumer


async def handle(request: Msg, ctx: RequestContext) -> dict:
    groups = []
    for group_id in request.group_ids:
        if not await check(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized"))
            continue
        try:
            summary = await coordinator(ctx).describe_consumer_group(group_key(ctx, group_id))
        except CoreError as exc:
            groups.append(_error(group_id, kafka_code(exc), str(exc)))
            continue
        operations = NOT_REQUESTED
        if request.include_authorized_operations:
            operations = await authorized_operations(ctx, ResourceType.GROUP, group_id)
        ids: dict[str, uuid.UUID | None] = {}
        members = []
        for m in summary.members:
            members.append({"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack,
                            "member_epoch": m.epoch, "client_id": m.client_id, "client_host": m.client_host,
                            "subscribed_topic_names": list(m.topics), "subscribed_topic_regex": m.regex,
                            "assignment": await described_assignment(ctx, m.assigned, ids),
                            "target_assignment": await described_assignment(ctx, m.target, ids),
                            "member_type": CONSUMER_MEMBER})
        groups.append({"error_code": ErrorCode.NONE, "group_id": group_id, "group_state": summary.state,
                       "group_epoch": summary.group_epoch, "assignment_epoch": summary.assignment_epoch,
                       "assignor_name": summary.assignor, "members": members, "authorized_operations": operations})
    return {"throttle_time_ms": 0, "groups": groups}


def _error(group_id: str, code: ErrorCode, message: str) -> dict:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []}

"""ShareGroupDescribe (key 77), version 1: KIP-932 share groups in full.

Behaviour: each share group's state (Empty or Stable), group epoch, assignment epoch (the group
epoch: assignments are worked out at each heartbeat, there is no target to catch up with),
assignor ("simple", Kafka's name for its share assignor; core/shares/share_group.py says how ours
assigns) and every member with its epoch, rack, client, subscribed topics and assignment (topic
id, name, partitions). Members whose session ran out are dropped first. An id no share group holds
(a classic or consumer group, or none) is GROUP_ID_NOT_FOUND and an empty id INVALID_GROUP_ID, as
in Kafka. With ACLs enforced (SASL on), each group needs DESCRIBE (GROUP_AUTHORIZATION_FAILED);
include_authorized_operations reports the group operations allowed.
Gaps: share-group membership is kept in memory: after a restart a group is unknown
(GROUP_ID_NOT_FOUND) until a member joins it again.
"""

import uuid

from core.errors import CoreError
from protocols.kafka.authorization import Operation, ResourceType, authorized_operations, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import described_assignment, group_key
from protocols.kafka.schema.share_group_describe import SHARE_GROUP_DESCRIBE as API

NOT_REQUESTED = -2147483648
ASSIGNOR = "simple"


async def handle(request: Msg, ctx: RequestContext) -> dict:
    groups = []
    for group_id in request.group_ids:
        if not group_id:
            groups.append(_error(group_id, ErrorCode.INVALID_GROUP_ID, "the group id must not be empty"))
            continue
        if not await check(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized"))
            continue
        try:
            group = ctx.broker.shares.describe(group_key(ctx, group_id))
        except CoreError as exc:
            groups.append(_error(group_id, kafka_code(exc), str(exc)))
            continue
        operations = NOT_REQUESTED
        if request.include_authorized_operations:
            operations = await authorized_operations(ctx, ResourceType.GROUP, group_id)
        ids: dict[str, uuid.UUID | None] = {}
        members = []
        for m in list(group.members.values()):
            members.append({"member_id": m.member_id, "rack_id": m.rack, "member_epoch": m.epoch,
                            "client_id": m.client_id, "client_host": m.client_host,
                            "subscribed_topic_names": sorted(m.topics),
                            "assignment": await described_assignment(ctx, m.assignment, ids)})
        groups.append({"error_code": ErrorCode.NONE, "group_id": group_id, "group_state": group.state,
                       "group_epoch": group.group_epoch, "assignment_epoch": group.group_epoch,
                       "assignor_name": ASSIGNOR, "members": members, "authorized_operations": operations})
    return {"throttle_time_ms": 0, "groups": groups}


def _error(group_id: str, code: ErrorCode, message: str) -> dict:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []}

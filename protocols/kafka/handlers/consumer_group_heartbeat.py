"""ConsumerGroupHeartbeat (key 68), versions 0-1: Kafka's consumer group protocol (KIP-848).

Behaviour: the broker assigns the partitions (core/groups/consumer_group.py). A member joins with
epoch 0 (v1: under its own member id, as KIP-1082 has it; v0: the broker makes one up), sends its
subscribed topic names and/or regex (v1; matched in full against the namespace's topics with
Python's `re` where Kafka uses RE2J), rack, rebalance timeout and server assignor (`uniform`, the
default, `range`, `averagely`, `circle`, `consistent-hash`, `machine-room`) whenever they change,
and gets its member epoch, the heartbeat interval and, when it changed, the partitions it may
consume (by topic id). Partitions move only after their old owner gave them up (its next
heartbeat's owned partitions). Errors as Kafka answers them: FENCED_MEMBER_EPOCH,
UNKNOWN_MEMBER_ID, UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR,
GROUP_MAX_SIZE_REACHED, INVALID_REGULAR_EXPRESSION, INVALID_REQUEST, and GROUP_ID_NOT_FOUND for a
classic group with members (an Empty one becomes a consumer group). The room of a partition for
`machine-room` is the rack of the broker leading it. With ACLs enforced (SASL on), the group needs
READ (GROUP_AUTHORIZATION_FAILED).
Gaps: classic members cannot join a consumer group (nor the other way round) while it has members;
an unknown group with an epoch other than 0 is UNKNOWN_MEMBER_ID (Kafka: GROUP_ID_NOT_FOUND).
"""

import uuid

from core.errors import CoreError
from core.names import TopicName
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.cluster_view import brokers, partition_leader
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import by_topic, client_host, coordinator, group_key
from protocols.kafka.schema.consumer_group_heartbeat import CONSUMER_GROUP_HEARTBEAT as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized to read the group")
    member_id = request.member_id
    if member_id == "" and request.member_epoch == 0 and ctx.version == 0:
        member_id = str(uuid.uuid4())      # v0: the coordinator names new members
    owned = None
    if request.topic_partitions is not None:
        owned = [(t.topic_id.hex, index) for t in request.topic_partitions for index in t.partitions]
    racks = {node.node_id: node.rack for node in brokers(ctx)}

    def partition_rack(topic: TopicName, index: int) -> str | None:
        return racks.get(partition_leader(ctx, topic, index))

    try:
        answer, topic_ids = await coordinator(ctx).consumer_heartbeat(
            group_key(ctx, request.group_id), member_id=member_id, member_epoch=request.member_epoch,
            instance_id=request.instance_id, rack=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
            topics=request.subscribed_topic_names, regex=request.subscribed_topic_regex,
            assignor=request.server_assignor, owned=owned,
            client_id=ctx.header.client_id or "", client_host=client_host(ctx), partition_rack=partition_rack)
    except CoreError as exc:
        return _error(kafka_code(exc), str(exc))
    assignment = None
    if answer.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": uuid.UUID(hex=topic_ids[topic]), "partitions": indexes}
                                           for topic, indexes in by_topic(answer.assignment).items()
                                           if topic in topic_ids]}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "member_id": answer.member_id,
            "member_epoch": answer.epoch, "heartbeat_interval_ms": answer.heartbeat_interval_ms,
            "assignment": assignment}


def _error(code: ErrorCode, message: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "member_epoch": 0,
            "heartbeat_interval_ms": 0}

"""OffsetDelete (key 47), version 0.

Behaviour: deletes a group's committed offsets. An Empty group loses any of them; a live consumer
group keeps those of topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC) and loses the
rest; a live group of another protocol type refuses (NON_EMPTY_GROUP). Unknown topics answer
UNKNOWN_TOPIC_OR_PARTITION, an unknown group GROUP_ID_NOT_FOUND (for the whole request).
With ACLs enforced (SASL on), as in Kafka 2.8: without DELETE on the group the whole request is
GROUP_AUTHORIZATION_FAILED; then each topic needs READ (TOPIC_AUTHORIZATION_FAILED, before the
existence check), and only the allowed partitions reach the group.
Gaps: none known.
"""

from core.errors import CoreError
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, check, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.consumer_protocol import consumed_topics
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.offset_delete import OFFSET_DELETE as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check(ctx, Operation.DELETE, ResourceType.GROUP, request.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0, "topics": []}
    readable = await authorized_names(ctx, Operation.READ, ResourceType.TOPIC,
                                      (t.name for t in request.topics)) if enforced(ctx) else None
    asked = [(topic.name, p.partition_index) for topic in request.topics for p in topic.partitions
             if readable is None or topic.name in readable]
    refused = {(topic.name, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
               for topic in request.topics for p in topic.partitions
               if readable is not None and topic.name not in readable}

    def consumed(protocol_type: str | None, protocol_name: str | None, metadata: list[bytes]) -> set[str] | None:
        try:
            return consumed_topics(protocol_type, metadata)
        except ValueError:
            return {topic for topic, _ in asked}   # unreadable subscriptions: assume it consumes all

    try:
        errors = await coordinator(ctx).delete_offsets(group_key(ctx, request.group_id), asked, consumed)
    except CoreError as exc:
        return {"error_code": kafka_code(exc), "throttle_time_ms": 0, "topics": []}
    codes = refused | {tp: ErrorCode.NONE if error is None else kafka_code(error) for tp, error in errors.items()}
    topics: dict[str, list] = {}
    for (topic, index), code in codes.items():
        topics.setdefault(topic, []).append({"partition_index": index, "error_code": code})
    return {"error_code": ErrorCode.NONE, "throttle_time_ms": 0,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]}

"""OffsetDelete (key 47), version 0.

Behaviour: deletes a group's committed offsets. An Empty group loses any of them; a live consumer
group keeps those of topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC) and loses the
rest; a live group of another protocol type refuses (NON_EMPTY_GROUP). Unknown topics answer
UNKNOWN_TOPIC_OR_PARTITION, an unknown group GROUP_ID_NOT_FOUND (for the whole request).
Gaps: none known.
"""

from core.errors import CoreError
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.consumer_protocol import consumed_topics
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.offset_delete import OFFSET_DELETE as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    asked = [(topic.name, p.partition_index) for topic in request.topics for p in topic.partitions]

    def consumed(protocol_type: str | None, protocol_name: str | None, metadata: list[bytes]) -> set[str] | None:
        try:
            return consumed_topics(protocol_type, metadata)
        except ValueError:
            return {topic for topic, _ in asked}   # unreadable subscriptions: assume it consumes all

    try:
        errors = await coordinator(ctx).delete_offsets(group_key(ctx, request.group_id), asked, consumed)
    except CoreError as exc:
        return {"error_code": kafka_code(exc), "throttle_time_ms": 0, "topics": []}
    topics: dict[str, list] = {}
    for (topic, index), error in errors.items():
        topics.setdefault(topic, []).append(
            {"partition_index": index, "error_code": ErrorCode.NONE if error is None else kafka_code(error)})
    return {"error_code": ErrorCode.NONE, "throttle_time_ms": 0,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]}

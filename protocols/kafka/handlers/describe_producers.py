"""DescribeProducers (key 61), version 0.

Behaviour: for each asked partition, the idempotent and transactional producers its state knows
(the producer state rebuilt from the log tail when the partition opens, then kept as batches
arrive): id, epoch, last sequence, the max timestamp of its last batch, and the first offset of its
open transaction (-1: none). An unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION. With ACLs
enforced (SASL on), each topic needs READ, checked before its existence (TOPIC_AUTHORIZATION_FAILED),
as in Kafka.
Gaps: coordinator_epoch is always -1 (markers carry no coordinator epoch here).
"""

from core.errors import CoreError
from core.names import TopicName
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.schema.describe_producers import DESCRIBE_PRODUCERS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    readable = await authorized_names(ctx, Operation.READ, ResourceType.TOPIC,
                                      (t.name for t in request.topics)) if enforced(ctx) else None
    topics = []
    for topic in request.topics:
        partitions = []
        topics.append({"name": topic.name, "partitions": partitions})
        for index in topic.partition_indexes:
            answer = {"partition_index": index, "error_code": ErrorCode.NONE, "error_message": None,
                      "active_producers": []}
            partitions.append(answer)
            if readable is not None and topic.name not in readable:
                answer["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                partition = await ctx.core.partition(TopicName.of(topic.name, ctx.tenant, ctx.namespace), index)
            except CoreError as exc:
                answer.update(error_code=kafka_code(exc), error_message=str(exc))
                continue
            answer["active_producers"] = [
                {"producer_id": p.producer_id, "producer_epoch": p.epoch, "last_sequence": p.last_sequence,
                 "last_timestamp": p.last_timestamp, "coordinator_epoch": -1,
                 "current_txn_start_offset": p.transaction_start}
                for p in partition.producers.summaries()]
    return {"throttle_time_ms": 0, "topics": topics}

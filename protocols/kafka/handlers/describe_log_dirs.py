"""DescribeLogDirs (key 35), versions 0-2.

Behaviour: one log dir, the gateway's data directory, holding every partition; each asked
partition's size is its stored bytes (offset lag 0: nothing is ever copied between dirs). A null
topic list means every topic of the client's tenant/namespace; unknown topics and partitions are
left out, as Kafka leaves out what a dir does not hold. With ACLs enforced (SASL on), the request
needs DESCRIBE on the cluster, else the answer lists no log dir at all, as in Kafka.
Gaps: sizes come from each partition's log, so describing everything opens every partition
(they close again when idle); Kafka also lists, with no partitions, topics that were not asked.
"""

from core.errors import CoreError
from core.registry import TopicInfo
from protocols.kafka.admin.topics import find_topic
from protocols.kafka.authorization import Operation, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.schema.describe_log_dirs import DESCRIBE_LOG_DIRS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check_cluster(ctx, Operation.DESCRIBE):
        return {"throttle_time_ms": 0, "results": []}
    if request.topics is None:
        names = await ctx.core.registry.list_topics(ctx.tenant, ctx.namespace)
        asked = [(name, None) for name in names]
    else:
        asked = [(topic.topic, list(topic.partition_index)) for topic in request.topics]
    result = {"error_code": ErrorCode.NONE, "log_dir": ctx.broker.settings.log_dir, "topics": []}
    for name, indexes in asked:
        info = await find_topic(ctx, name)
        if info is None:
            continue
        try:
            partitions = await _partitions(info, indexes, ctx)
        except CoreError as exc:
            result.update(error_code=kafka_code(exc), topics=[])
            break
        if partitions:
            result["topics"].append({"name": name, "partitions": partitions})
    return {"throttle_time_ms": 0, "results": [result]}


async def _partitions(info: TopicInfo, indexes: list[int] | None, ctx: RequestContext) -> list[dict]:
    wanted = range(info.partitions) if indexes is None else sorted(i for i in set(indexes) if 0 <= i < info.partitions)
    described = []
    for index in wanted:
        partition = await ctx.core.partition(info.name, index)
        described.append({"partition_index": index, "partition_size": partition.log.size_bytes,
                          "offset_lag": 0, "is_future_key": False})
    return described

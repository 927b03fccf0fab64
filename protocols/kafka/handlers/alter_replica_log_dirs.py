"""AlterReplicaLogDirs (key 34), versions 0-2.

Behaviour: the broker has one log dir, the gateway's data directory (what DescribeLogDirs reports),
and every replica already lives there: moving one to it is done at once (NONE), as is a partition
the broker does not host, as Kafka answers both; any other path is LOG_DIR_NOT_FOUND. With ACLs
enforced (SASL on) the request needs ALTER on the cluster, else every partition is
CLUSTER_AUTHORIZATION_FAILED, as in Kafka.
Gaps: none known (there is nothing to move between dirs).
"""

import os

from protocols.kafka.authorization import Operation, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.alter_replica_log_dirs import ALTER_REPLICA_LOG_DIRS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    allowed = await check_cluster(ctx, Operation.ALTER)
    ours = os.path.normpath(ctx.broker.settings.log_dir)
    results: dict[str, list[dict]] = {}
    for log_dir in request.dirs:
        if not allowed:
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        elif os.path.isabs(log_dir.path) and os.path.normpath(log_dir.path) == ours:
            code = ErrorCode.NONE
        else:
            code = ErrorCode.LOG_DIR_NOT_FOUND
        for topic in log_dir.topics:
            results.setdefault(topic.name, []).extend(
                {"partition_index": index, "error_code": code} for index in topic.partitions)
    return {"throttle_time_ms": 0,
            "results": [{"topic_name": name, "partitions": partitions} for name, partitions in results.items()]}

"""ListPartitionReassignments (key 46), version 0.

Behaviour: no reassignment is ever in progress on a single broker, so the answer lists none,
whatever partitions are asked about (Kafka too lists only partitions being reassigned). With ACLs
enforced (SASL on), the request needs DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED
with each asked partition listed bare, as Kafka's error answer does.
Gaps: the refusal's message is "Cluster authorization failed." (Kafka's quotes its internal
request description).
"""

from protocols.kafka import acl_wire
from protocols.kafka.authorization import Operation, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.list_partition_reassignments import LIST_PARTITION_REASSIGNMENTS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check_cluster(ctx, Operation.DESCRIBE):
        code, message = acl_wire.CLUSTER_AUTHORIZATION_FAILED
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "topics": [
            {"name": topic.name, "partitions": [{"partition_index": index, "replicas": [], "adding_replicas": [],
                                                 "removing_replicas": []} for index in topic.partition_indexes]}
            for topic in request.topics or ()]}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": []}

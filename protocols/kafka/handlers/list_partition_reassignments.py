"""ListPartitionReassignments (key 46), version 0.

Behaviour: the partitions being moved are those whose bundle an AlterPartitionReassignments placed
on a broker that does not hold it yet (core/cluster/placements.py); each is listed with replicas =
[target, current owner], adding = [target], removing = [current owner] (the owner it came from while
nobody holds it), as Kafka lists a reassignment in flight. Asked for nothing in particular (null
topics), every partition of the client's namespace in such a bundle is listed; asked for named
partitions, those of them that are moving (unknown ones are left out, as Kafka does). One process
never has a reassignment in progress. With ACLs enforced (SASL on), the request needs DESCRIBE on
the cluster, else CLUSTER_AUTHORIZATION_FAILED with each asked partition listed bare, as Kafka's
error answer does.
Gaps: the refusal's message is "Cluster authorization failed." (Kafka's quotes its internal
request description).
"""

from core.cluster.bundles import partition_bundle
from protocols.kafka import acl_wire
from protocols.kafka.admin.topics import find_topic
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
    topics = []
    cluster = ctx.core.cluster
    moves = {} if cluster is None else await cluster.moves()
    if moves:
        if request.topics is None:
            names = await ctx.core.registry.list_topics(ctx.tenant, ctx.namespace)
            asked = [(name, None) for name in sorted(names)]
        else:
            asked = [(topic.name, topic.partition_indexes) for topic in request.topics]
        for name, indexes in asked:
            info = await find_topic(ctx, name)
            if info is None:
                continue
            partitions = []
            for index in range(info.partitions) if indexes is None else indexes:
                bundle = partition_bundle(info.name.tenant, info.name.namespace, info.name.topic, index)
                if 0 <= index < info.partitions and bundle in moves:
                    placement, holder = moves[bundle]
                    source = holder if holder is not None else placement.source
                    removing = [] if source is None else [source]
                    partitions.append({"partition_index": index, "replicas": [placement.broker, *removing],
                                       "adding_replicas": [placement.broker], "removing_replicas": removing})
            if partitions:
                topics.append({"name": name, "partitions": partitions})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": topics}

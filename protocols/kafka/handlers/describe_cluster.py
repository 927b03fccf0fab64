"""DescribeCluster (key 60), version 0.

Behaviour: the live brokers and the controller (the cluster's leader broker) as Metadata names them
(one process: this broker alone); the cluster id is the configured one. Asked for the cluster's
authorized operations, it answers the bit field of the cluster operations the client may do, or 0
without DESCRIBE on the cluster, as Kafka 2.8; with SASL off (no ACLs enforced) every operation
Kafka defines on a cluster, as a Kafka broker without an authorizer does.
Gaps: none known.
"""

from protocols.kafka.authorization import CLUSTER_NAME, Operation, ResourceType, authorized_operations, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.cluster_view import brokers, controller_id
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.describe_cluster import DESCRIBE_CLUSTER as API

NOT_PROVIDED = -2147483648


async def handle(request: Msg, ctx: RequestContext) -> dict:
    settings = ctx.broker.settings
    operations = NOT_PROVIDED
    if request.include_cluster_authorized_operations:
        operations = (await authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
                      if await check_cluster(ctx, Operation.DESCRIBE, audit=False) else 0)
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "cluster_id": settings.cluster_id,
        "controller_id": controller_id(ctx),
        "brokers": [{"broker_id": n.node_id, "host": n.host, "port": n.port, "rack": n.rack} for n in brokers(ctx)],
        "cluster_authorized_operations": operations,
    }

"""DescribeCluster (key 60), version 0.

Behaviour: this broker is the whole cluster: the only broker and the controller; the cluster id
is the configured one. Asked for the cluster's authorized operations, it answers every operation
Kafka defines on a cluster, as a Kafka broker without an authorizer does.
Gaps: none known.
"""

from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.describe_cluster import DESCRIBE_CLUSTER as API

NOT_PROVIDED = -2147483648
# Kafka's AclOperation codes of the operations a CLUSTER resource supports.
ALTER, DESCRIBE, CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 7, 8, 5, 9, 10, 11, 12
CLUSTER_OPERATIONS = sum(1 << op for op in (ALTER, DESCRIBE, CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
                                            ALTER_CONFIGS, IDEMPOTENT_WRITE))


async def handle(request: Msg, ctx: RequestContext) -> dict:
    settings = ctx.broker.settings
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "cluster_id": settings.cluster_id,
        "controller_id": settings.node_id,
        "brokers": [{"broker_id": settings.node_id, "host": settings.host, "port": settings.port,
                     "rack": settings.rack}],
        "cluster_authorized_operations":
            CLUSTER_OPERATIONS if request.include_cluster_authorized_operations else NOT_PROVIDED,
    }

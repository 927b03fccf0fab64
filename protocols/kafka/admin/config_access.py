"""Who may describe or change a config resource, as Kafka 2.8's DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs decide it: a topic needs the operation on the topic, a broker (or broker
logger) resource needs it on the cluster."""

from __future__ import annotations

from protocols.kafka.admin.resources import TOPIC
from protocols.kafka.authorization import Operation, ResourceType, check, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.errors import ErrorCode


async def config_refusal(ctx: RequestContext, operation: Operation, resource_type: int, name: str) -> ErrorCode | None:
    """None when `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS) is allowed on the resource, else
    the error Kafka answers for it."""
    if resource_type == TOPIC:
        allowed = await check(ctx, operation, ResourceType.TOPIC, name)
        return None if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return None if await check_cluster(ctx, operation) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED

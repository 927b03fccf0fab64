"""AlterConfigs (key 33), versions 0-2.

Behaviour: a topic resource's explicit configs are replaced by exactly the given set (configs not
named go back to their defaults, as in Kafka). Kafka's codes: a null value (INVALID_REQUEST), an
unknown topic (UNKNOWN_TOPIC_OR_PARTITION), an unknown config name (INVALID_CONFIG), a value its
parser rejects (INVALID_REQUEST). A broker resource must name this broker or be "" (the
cluster-wide default; else INVALID_REQUEST): its dynamic configs (the broker-level defaults of
topic configs, e.g. log.retention.ms) are replaced by exactly the given set, persisted and applied
to every topic without its own value at once; the gateway's own settings are static
(INVALID_REQUEST, "Cannot update these configs dynamically"). validate_only checks without applying.
A BROKER_LOGGER or unknown resource type fails the whole request with INVALID_REQUEST, as in Kafka.
With ACLs enforced (SASL on), a topic needs ALTER_CONFIGS on it (TOPIC_AUTHORIZATION_FAILED), a
broker resource ALTER_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED); no message, as Kafka.
Gaps: an unknown broker config name is INVALID_CONFIG (Kafka stores custom names); Kafka's other
dynamic broker configs (thread pools, listeners, SSL, quotas of replication) are not served; topic
configs this gateway does not honour are listed read-only in DescribeConfigs and refused here with
INVALID_CONFIG.
"""

from protocols.kafka.admin.alter import (alter_each, null_values_error, replace_broker_configs, replace_topic_configs,
                                        resource_response)
from protocols.kafka.admin.resources import BROKER, BROKER_LOGGER, TOPIC
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.alter_configs import ALTER_CONFIGS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    refused = _refused_type(request.resources)
    if refused is not None:
        return {"throttle_time_ms": 0, "responses": [
            _response(r, ErrorCode.INVALID_REQUEST, refused) for r in request.resources]}
    responses = await alter_each(request.resources, ctx,
                                 lambda resource: _alter(resource, request.validate_only, ctx))
    return {"throttle_time_ms": 0, "responses": responses}


def _refused_type(resources: list) -> str | None:
    for resource in resources:
        if resource.resource_type == BROKER_LOGGER:
            return "AlterConfigs is deprecated and does not support the resource type BROKER_LOGGER"
        if resource.resource_type not in (TOPIC, BROKER):
            return "Unexpected resource type UNKNOWN"
    return None


async def _alter(resource: Msg, validate_only: bool, ctx: RequestContext) -> None:
    null_error = null_values_error(c.name for c in resource.configs if c.value is None)
    if null_error is not None:
        raise null_error
    configs = {config.name: config.value for config in resource.configs}
    if resource.resource_type == TOPIC:
        await replace_topic_configs(ctx, resource.resource_name, configs, validate_only)
    else:
        await replace_broker_configs(ctx, resource.resource_name, configs, validate_only)


_response = resource_response

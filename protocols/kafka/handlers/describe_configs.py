"""DescribeConfigs (key 32), versions 0-4.

Behaviour: a topic resource (type 2) lists every topic config under Kafka's names: the value set
on the topic (source DYNAMIC_TOPIC_CONFIG), else the broker-level one set at run time for this
broker (DYNAMIC_BROKER_CONFIG) or cluster-wide (DYNAMIC_DEFAULT_BROKER_CONFIG), else the default
(DEFAULT_CONFIG), with synonyms (v1+: each of those levels that is set, highest first), type and
documentation (v3+, when asked). An illegal topic name is INVALID_TOPIC_EXCEPTION, an unknown
topic UNKNOWN_TOPIC_OR_PARTITION. A broker resource (type 4) named with this broker's id lists its
configs as a Kafka 2.8 broker does (admin/configs.py): the gateway's settings, read-only,
STATIC_BROKER_CONFIG when the configuration sets them and DEFAULT_CONFIG otherwise, and the
broker-level defaults of the topic configs, dynamic (not read-only); named "" it lists the
cluster-wide dynamic defaults that are set; another id is INVALID_REQUEST. configuration_keys filters
by name. v0's is_default is true for DEFAULT_CONFIG values. A resource type Kafka does not know
fails the whole request with INVALID_REQUEST, as Kafka's does. With ACLs enforced (SASL on), a
topic needs DESCRIBE_CONFIGS on it (TOPIC_AUTHORIZATION_FAILED), a broker or broker logger resource
DESCRIBE_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED), with Kafka's default messages.
Gaps: BROKER_LOGGER resources (type 8) are INVALID_REQUEST (Kafka lists its log4j loggers).
"""

from collections.abc import Iterable

from core.errors import InvalidName
from core.names import TopicName
from protocols.kafka.admin.config_access import config_refusal
from protocols.kafka.admin.configs import (BrokerLevels, ConfigEntry, broker_config_entries, cluster_default_entries,
                                          topic_config_entries)
from protocols.kafka.admin.errors import ApiError
from protocols.kafka.admin.resources import BROKER, BROKER_LOGGER, TOPIC, is_this_broker
from protocols.kafka.admin.topics import find_topic
from protocols.kafka.authorization import Operation
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.describe_configs import DESCRIBE_CONFIGS as API

# Kafka answers a refused resource with its error's default message.
_AUTHORIZATION_MESSAGES = {ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
                           ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed."}


async def handle(request: Msg, ctx: RequestContext) -> dict:
    unexpected = next((r for r in request.resources if r.resource_type not in (TOPIC, BROKER, BROKER_LOGGER)), None)
    if unexpected is not None:
        message = f"Unexpected resource type UNKNOWN for resource {unexpected.resource_name}"
        return {"throttle_time_ms": 0, "results": [
            _result(r, ErrorCode.INVALID_REQUEST, message) for r in request.resources]}
    results = []
    for resource in request.resources:
        refusal = await config_refusal(ctx, Operation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name)
        if refusal is not None:
            results.append(_result(resource, refusal, _AUTHORIZATION_MESSAGES[refusal]))
            continue
        try:
            entries = await _entries(resource, ctx)
        except ApiError as err:
            results.append(_result(resource, err.code, err.message))
            continue
        wanted = set(resource.configuration_keys or ())
        result = _result(resource, ErrorCode.NONE, None)
        result["configs"] = [entry.described(request.include_synonyms, request.include_documentation)
                             for entry in entries if not wanted or entry.name in wanted]
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


async def _entries(resource: Msg, ctx: RequestContext) -> Iterable[ConfigEntry]:
    if resource.resource_type == TOPIC:
        try:
            TopicName.of(resource.resource_name, ctx.tenant, ctx.namespace)
        except InvalidName as exc:
            raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
        info = await find_topic(ctx, resource.resource_name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return topic_config_entries(info.configs, BrokerLevels.of(ctx.core.broker_configs))
    if resource.resource_type == BROKER:
        settings = ctx.broker.settings
        levels = BrokerLevels.of(ctx.core.broker_configs)
        if is_this_broker(resource.resource_name, settings.node_id, default_allowed=True):
            return broker_config_entries(settings, levels)
        return cluster_default_entries(levels)
    raise ApiError(ErrorCode.INVALID_REQUEST, "BROKER_LOGGER resources are not supported by this broker")


def _result(resource: Msg, code: ErrorCode, message: str | None) -> dict:
    return {"error_code": code, "error_message": message, "resource_type": resource.resource_type,
            "resource_name": resource.resource_name, "configs": []}

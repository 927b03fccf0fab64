"""IncrementalAlterConfigs (key 44), versions 0-1.

Behaviour: each operation changes one config of a resource: SET (0) a value, DELETE (1) back to
the default, APPEND (2) / SUBTRACT (3) items of a list config (cleanup.policy), starting from its
current or default value. The resulting explicit set is then checked and stored as AlterConfigs
does. Kafka's codes: a name given twice, a null value for other than DELETE, APPEND/SUBTRACT on a
config that is not a list, or an operation id Kafka does not define (INVALID_REQUEST); an
unknown topic (UNKNOWN_TOPIC_OR_PARTITION); an unknown config name (INVALID_CONFIG); a bad value
(INVALID_REQUEST). A broker resource names this broker's id or "" (the cluster-wide default):
the operations apply to its dynamic configs (the broker-level topic defaults such as
log.retention.ms), which are then stored as AlterConfigs does; setting one of the gateway's own
settings is INVALID_REQUEST, as Kafka answers for a non-dynamic config. An unknown resource
type fails the whole request with INVALID_REQUEST. With ACLs enforced (SASL on), a topic needs
ALTER_CONFIGS on it (TOPIC_AUTHORIZATION_FAILED), a broker or broker logger resource ALTER_CONFIGS
on the cluster (CLUSTER_AUTHORIZATION_FAILED); no message, as in Kafka.
Gaps: BROKER_LOGGER resources (log levels) are INVALID_REQUEST (Kafka changes log4j levels); an
unknown operation id is INVALID_REQUEST for its resource (Kafka fails the whole request with
UNKNOWN_SERVER_ERROR).
"""

from collections import Counter

from core.topic_config import TOPIC_CONFIGS
from core.broker_configs import DYNAMIC
from protocols.kafka.admin.alter import (alter_each, broker_scope, replace_broker_configs, replace_topic_configs,
                                        resource_response)
from protocols.kafka.admin.configs import TOPIC_CONFIG_TYPES, ConfigType
from protocols.kafka.admin.errors import ApiError
from protocols.kafka.admin.resources import BROKER, BROKER_LOGGER, TOPIC
from protocols.kafka.admin.topics import existing_topic
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.incremental_alter_configs import INCREMENTAL_ALTER_CONFIGS as API

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if any(r.resource_type not in (TOPIC, BROKER, BROKER_LOGGER) for r in request.resources):
        return {"throttle_time_ms": 0, "responses": [
            _response(r, ErrorCode.INVALID_REQUEST, "Unexpected resource type UNKNOWN") for r in request.resources]}
    responses = await alter_each(request.resources, ctx,
                                 lambda resource: _alter(resource, request.validate_only, ctx))
    return {"throttle_time_ms": 0, "responses": responses}


async def _alter(resource: Msg, validate_only: bool, ctx: RequestContext) -> None:
    _check_operations(resource.configs)
    if resource.resource_type == TOPIC:
        info = await existing_topic(ctx, resource.resource_name)
        configs = dict(info.configs)
        for op in resource.configs:
            _apply(op, configs, op.name)
        await replace_topic_configs(ctx, resource.resource_name, configs, validate_only)
    elif resource.resource_type == BROKER:
        configs = ctx.core.broker_configs.get(broker_scope(ctx, resource.resource_name))
        for op in resource.configs:
            _apply(op, configs, DYNAMIC.get(op.name, op.name))
        await replace_broker_configs(ctx, resource.resource_name, configs, validate_only)
    else:
        raise ApiError(ErrorCode.INVALID_REQUEST, "BROKER_LOGGER resources are not supported by this broker")


def _check_operations(ops: list) -> None:
    duplicates = sorted(name for name, count in Counter(op.name for op in ops).items() if count > 1)
    if duplicates:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys : {','.join(duplicates)}")
    unknown = [op.config_operation for op in ops if op.config_operation not in OP_NAMES]
    if unknown:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown operation type ID: {unknown[0]}")
    nulls = [f"{OP_NAMES[op.config_operation]}:{op.name}" for op in ops
             if op.value is None and op.config_operation != DELETE]
    if nulls:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")


def _apply(op: Msg, configs: dict[str, str], topic_config: str) -> None:
    """Apply one operation to `configs`; `topic_config` names the topic config op.name is or is the
    broker-level default of (what decides the default and whether it is a list)."""
    if op.config_operation == SET:
        configs[op.name] = op.value
    elif op.config_operation == DELETE:
        configs.pop(op.name, None)
    else:
        verb = "append" if op.config_operation == APPEND else "subtract"
        key = TOPIC_CONFIGS.get(topic_config)
        if key is None:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {op.name}")
        if TOPIC_CONFIG_TYPES.get(topic_config) != ConfigType.LIST:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Config value {verb} is not allowed for config key: {op.name}")
        items = configs.get(op.name, key.default).split(",")
        changes = op.value.split(",")
        if op.config_operation == APPEND:
            items += changes
        else:
            for item in changes:   # a multiset difference: each named item goes once
                if item in items:
                    items.remove(item)
        configs[op.name] = ",".join(items)


_response = resource_response

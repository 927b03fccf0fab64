"""Applying a new set of configs to a resource, shared by AlterConfigs and IncrementalAlterConfigs.

A topic's explicit configs are replaced as a whole (Kafka stores them that way); the checks come
in Kafka's order with Kafka's codes: an unknown topic, then unknown names (INVALID_CONFIG), then
bad values (INVALID_REQUEST, as Kafka reports a value its parser rejects). A broker resource's
dynamic configs (the broker-level topic defaults, core/broker_configs.py) are replaced as a whole
too, for this broker (its id) or cluster-wide (""); the gateway's own settings are static, and
changing one is refused as Kafka refuses a non-dynamic config.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from core.broker_configs import CLUSTER_DEFAULT, DYNAMIC
from core.broker_configs import validate as validate_broker_configs
from core.errors import CoreError, InvalidConfig
from core.system_topics import refuse_change
from core.topic_config import TOPIC_CONFIGS
from protocols.kafka.admin.config_access import config_refusal
from protocols.kafka.admin.configs import STATIC_BROKER_CONFIG_NAMES
from protocols.kafka.admin.errors import ApiError
from protocols.kafka.admin.resources import BROKER, TOPIC, is_this_broker, resource_text
from protocols.kafka.admin.topics import existing_topic
from protocols.kafka.authorization import Operation
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.errors import ErrorCode

log = logging.getLogger("gateway.kafka")


def check_topic_configs(resource: str, configs: Mapping[str, str]) -> None:
    for name in configs:
        if name not in TOPIC_CONFIGS:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
    for name, value in configs.items():
        key = TOPIC_CONFIGS[name]
        if key.read_only:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Topic config {name} cannot be changed on this broker")
        try:
            key.parse(value)
        except InvalidConfig as exc:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid config value for resource {resource}: "
                                                      f"{name}: {exc}") from None


async def replace_topic_configs(ctx: RequestContext, name: str, configs: Mapping[str, str],
                                validate_only: bool) -> None:
    info = await existing_topic(ctx, name)
    check_topic_configs(resource_text(TOPIC, name), configs)
    try:
        refuse_change(info.name.topic)
        await ctx.core.alter_topic_configs(info.name, dict(configs), replace_all=True, validate_only=validate_only)
    except CoreError as exc:
        raise ApiError.of(exc) from None
    if not validate_only:
        log.info("topic %s configs set to %s", info.name, dict(configs))


def broker_scope(ctx: RequestContext, name: str) -> str:
    """The level a BROKER resource names: this broker's id, or "" for the cluster-wide default."""
    this = is_this_broker(name, ctx.broker.settings.node_id, default_allowed=True)
    return ctx.core.broker_configs.broker_id if this else CLUSTER_DEFAULT


async def replace_broker_configs(ctx: RequestContext, name: str, configs: Mapping[str, str],
                                 validate_only: bool) -> None:
    scope = broker_scope(ctx, name)
    resource = resource_text(BROKER, name)
    static = sorted(n for n in configs if n not in DYNAMIC and n in _KNOWN_BROKER_NAMES)
    if static:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid config value for resource {resource}: "
                                                  f"Cannot update these configs dynamically: Set({', '.join(static)})")
    unknown = sorted(n for n in configs if n not in DYNAMIC)
    if unknown:
        raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {', '.join(unknown)}")
    try:
        validate_broker_configs(configs)
    except InvalidConfig as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid config value for resource {resource}: {exc}") from None
    if validate_only:
        return
    try:
        await ctx.core.alter_broker_configs(scope, dict(configs))
    except CoreError as exc:
        raise ApiError.of(exc) from None
    log.info("broker configs of %s set to %s", resource, dict(configs))


# Every broker-level name DescribeConfigs lists: the gateway's settings and the topic configs' synonyms.
_KNOWN_BROKER_NAMES = STATIC_BROKER_CONFIG_NAMES | {key.broker_synonym for key in TOPIC_CONFIGS.values()}


def null_values_error(names: Iterable[str]) -> ApiError | None:
    names = list(names)
    if not names:
        return None
    return ApiError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(names)}")


def resource_response(resource, code, message: str | None) -> dict:
    """One resource's answer in AlterConfigs and IncrementalAlterConfigs (the same shape in both)."""
    return {"error_code": code, "error_message": message, "resource_type": resource.resource_type,
            "resource_name": resource.resource_name}


async def alter_each(resources: list, ctx: RequestContext, alter) -> list[dict]:
    """Authorize (ALTER_CONFIGS) then apply `alter(resource)` to each resource, answering each on its own."""
    responses = []
    for resource in resources:
        refusal = await config_refusal(ctx, Operation.ALTER_CONFIGS, resource.resource_type, resource.resource_name)
        if refusal is not None:
            responses.append(resource_response(resource, refusal, None))
            continue
        try:
            await alter(resource)
        except ApiError as err:
            responses.append(resource_response(resource, err.code, err.message))
            continue
        responses.append(resource_response(resource, ErrorCode.NONE, None))
    return responses

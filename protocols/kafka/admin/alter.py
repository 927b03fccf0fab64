"""Applying a new set of configs to a resource, shared by AlterConfigs and IncrementalAlterConfigs.

A topic's explicit configs are replaced as a whole (Kafka stores them that way); the checks come
in Kafka's order with Kafka's codes: an unknown topic, then unknown names (INVALID_CONFIG), then
bad values (INVALID_REQUEST, as Kafka reports a value its parser rejects). This broker's configs
are static: changing any is refused as Kafka refuses a non-dynamic config.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from core.errors import CoreError, InvalidConfig
from core.topic_config import TOPIC_CONFIGS
from protocols.kafka.admin.config_access import config_refusal
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
        await ctx.core.alter_topic_configs(info.name, dict(configs), replace_all=True, validate_only=validate_only)
    except CoreError as exc:
        raise ApiError.of(exc) from None
    if not validate_only:
        log.info("topic %s configs set to %s", info.name, dict(configs))


def refuse_broker_changes(ctx: RequestContext, name: str, changed: Iterable[str]) -> None:
    is_this_broker(name, ctx.broker.settings.node_id, default_allowed=False)
    changed = sorted(set(changed))
    if changed:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid config value for resource {resource_text(BROKER, name)}: "
                                                  f"Cannot update these configs dynamically: Set({', '.join(changed)})")


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

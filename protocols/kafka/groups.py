"""What the group APIs' handlers share: the coordinator of this broker's core, group keys."""

from __future__ import annotations

from core.groups.coordinator import GroupCoordinator, coordinator_for
from core.groups.settings import GroupSettings
from core.groups.store import GroupKey
from protocols.kafka.broker import RequestContext

_GROUP_DEFAULTS = GroupSettings()


def coordinator(ctx: RequestContext) -> GroupCoordinator:
    return coordinator_for(ctx.core, group_settings(ctx))


def group_settings(ctx: RequestContext) -> GroupSettings:
    """The coordinator's settings; the broker settings may override the initial rebalance delay
    (Kafka's group.initial.rebalance.delay.ms) with a `group_initial_rebalance_delay_ms` field."""
    delay = getattr(ctx.broker.settings, "group_initial_rebalance_delay_ms", None)
    if delay is None:
        return _GROUP_DEFAULTS
    return GroupSettings(initial_rebalance_delay_ms=delay)


def group_key(ctx: RequestContext, group_id: str) -> GroupKey:
    return GroupKey(ctx.tenant, ctx.namespace, group_id)


def client_host(ctx: RequestContext) -> str:
    """The member's host as DescribeGroups shows it ("/1.2.3.4" in Kafka). Empty: the request
    context does not carry the peer's address."""
    return ""

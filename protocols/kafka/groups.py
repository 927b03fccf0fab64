"""What the group APIs' handlers share: the coordinator of this broker, group keys."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from core.groups.coordinator import GroupCoordinator
from core.groups.store import GroupKey
from protocols.kafka.broker import RequestContext


def coordinator(ctx: RequestContext) -> GroupCoordinator:
    return ctx.broker.groups


def group_key(ctx: RequestContext, group_id: str) -> GroupKey:
    return GroupKey(ctx.tenant, ctx.namespace, group_id)


def client_host(ctx: RequestContext) -> str:
    """The member's host as DescribeGroups shows it: "/1.2.3.4" as in Kafka, empty when unknown."""
    host = ctx.session.client_host
    return f"/{host}" if host else ""


def by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """Partitions grouped by topic, as the consumer protocol lists them: topics and indexes in order."""
    grouped: dict[str, list[int]] = defaultdict(list)
    for topic, index in sorted(partitions):
        grouped[topic].append(index)
    return grouped

"""What the group APIs' handlers share: the coordinator of this broker, group keys."""

from __future__ import annotations

import uuid
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


def wire_assignment(assignment: Iterable[tuple[str, int]] | None, topic_ids: dict[str, str]) -> dict | None:
    """A heartbeat answer's assignment (consumer and share groups): partitions by topic id; topics
    whose id is not known (deleted meanwhile) are left out. None: unchanged since the last answer."""
    if assignment is None:
        return None
    return {"topic_partitions": [{"topic_id": uuid.UUID(hex=topic_ids[topic]), "partitions": indexes}
                                 for topic, indexes in by_topic(assignment).items() if topic in topic_ids]}

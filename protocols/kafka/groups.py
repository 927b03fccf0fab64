"""What the group APIs' handlers share: the coordinator of this broker, group keys."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable

from core.errors import CoreError
from core.groups.coordinator import GroupCoordinator
from core.groups.store import GroupKey
from core.names import TopicName
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


async def described_assignment(ctx: RequestContext, partitions: Iterable[tuple[str, int]],
                               ids: dict[str, uuid.UUID | None]) -> dict:
    """An assignment as the describe APIs (consumer and share groups) show it: by topic, with id
    and name; `ids` caches topic ids across members. Topics deleted meanwhile are left out."""
    listed = []
    for topic, indexes in by_topic(partitions).items():
        if topic not in ids:
            try:
                info = await ctx.core.registry.get_topic(TopicName.of(topic, ctx.tenant, ctx.namespace))
                ids[topic] = uuid.UUID(hex=info.topic_id)
            except CoreError:
                ids[topic] = None
        if ids[topic] is not None:
            listed.append({"topic_id": ids[topic], "topic_name": topic, "partitions": indexes})
    return {"topic_partitions": listed}

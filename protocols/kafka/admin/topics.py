"""Topic look-ups as the admin APIs need them: a name the client sent, resolved in its tenant and
namespace, where an illegal name is just a topic that does not exist."""

from __future__ import annotations

from core.errors import InvalidName, UnknownTopic
from core.names import TopicName
from core.registry import TopicInfo
from protocols.kafka.admin.errors import ApiError
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.errors import ErrorCode


def topic_name(ctx: RequestContext, name: str | None) -> TopicName | None:
    try:
        return TopicName.of(name or "", ctx.tenant, ctx.namespace)
    except InvalidName:
        return None


async def find_topic(ctx: RequestContext, name: str | None) -> TopicInfo | None:
    topic = topic_name(ctx, name)
    if topic is None:
        return None
    try:
        return await ctx.core.registry.get_topic(topic)
    except UnknownTopic:
        return None


async def existing_topic(ctx: RequestContext, name: str | None) -> TopicInfo:
    """The topic, or UNKNOWN_TOPIC_OR_PARTITION in Kafka's words."""
    info = await find_topic(ctx, name)
    if info is None:
        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
    return info

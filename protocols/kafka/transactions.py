"""What the transaction APIs' handlers share: transactional-id keys and Kafka's error code per version."""

from __future__ import annotations

from core.errors import CoreError, InvalidName, UnknownTopic
from core.names import TopicName
from core.transactions.errors import ProducerFenced
from core.transactions.store import TxnKey
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code


def txn_key(ctx: RequestContext, transactional_id: str) -> TxnKey:
    return TxnKey(ctx.tenant, ctx.namespace, transactional_id)


def txn_code(exc: CoreError, version: int, fenced_since: int | None) -> ErrorCode:
    """A fenced producer gets PRODUCER_FENCED from the version that introduced it (KIP-588),
    INVALID_PRODUCER_EPOCH before."""
    if isinstance(exc, ProducerFenced) and fenced_since is not None and version >= fenced_since:
        return ErrorCode.PRODUCER_FENCED
    return kafka_code(exc)


async def partition_exists(ctx: RequestContext, topic: str, index: int) -> bool:
    try:
        info = await ctx.core.registry.get_topic(TopicName.of(topic, ctx.tenant, ctx.namespace))
    except (UnknownTopic, InvalidName):
        return False
    return 0 <= index < info.partitions

"""Retention across protocols: what may go from a partition besides its time and size retention.

A partition's records go by its retention (retention.ms / retention.bytes, enforced by the core's
sweep). A subscription's acknowledgements move only its own cursor. "Delete once consumed" exists
only as the explicit topic setting `retention.consumed=true`, and then it counts every subscription
of the partition: every cursor under /cursors/<topic>/<partition>/, which is where Kafka groups
keep their committed offsets and AMQP queues their positions. Nothing at or above the lowest of
them is deleted, and only whole ledgers go (the log start moves to a ledger boundary or to that
position, whichever is lower).
"""

from __future__ import annotations

from core.clock import Clock
from core.cursor import Cursor
from core.names import TopicName
from core.partition import Partition
from storage.api import MetadataStore


async def lowest_consumed(metadata: MetadataStore, clock: Clock, topic: TopicName, index: int) -> int | None:
    """The lowest committed position over every subscription of the partition (None: it has none)."""
    lowest = None
    for name in await metadata.children(f"/cursors/{topic.path}/{index}"):
        cursor = await Cursor.load(metadata, clock, topic, index, name)
        if cursor.exists and (lowest is None or cursor.committed_offset < lowest):
            lowest = cursor.committed_offset
    return lowest


async def delete_consumed(metadata: MetadataStore, clock: Clock, topic: TopicName, partition: Partition) -> None:
    """With retention.consumed set: drop what every subscription of the partition consumed."""
    if not partition.config.retention_consumed:
        return
    lowest = await lowest_consumed(metadata, clock, topic, partition.index)
    if lowest is not None and lowest > partition.log_start_offset:
        await partition.delete_records_before(min(lowest, partition.high_watermark))

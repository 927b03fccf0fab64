"""Backlog quotas: how far behind the slowest subscription of a partition may fall, in bytes.

A namespace policy (core/policies.py: `backlog_quota_bytes`, `backlog_quota_action`), as Pulsar's
backlog quota. A subscription is any cursor of the partition: a Kafka group's committed offset or
an AMQP queue's position (core/retention.py finds them). Its backlog is the bytes stored from its
position to the end, estimated from the ledger list (no read). The core's retention sweep checks
every open partition of a namespace with a quota, and when the slowest subscription is over it:

- refuse_producers (Pulsar's producer_exception): appends to the partition fail with
  BacklogQuotaExceeded (Kafka: POLICY_VIOLATION for that partition; AMQP: the publish is refused,
  a basic.nack under publisher confirms) until a later check finds it within the quota again;
- drop_oldest (Pulsar's consumer_backlog_eviction): the oldest records go, up to where the slowest
  subscription's backlog fits; subscriptions behind the new log start skip what went (Kafka
  consumers reset by auto.offset.reset, AMQP queues go on from the log start).

A partition without subscriptions has no backlog. Checks run at the sweep's interval, so a fast
producer may overshoot the quota by what it writes in one interval.
"""

from __future__ import annotations

import logging

from core.clock import Clock
from core.names import TopicName
from core.partition import Partition
from core.retention import lowest_consumed
from storage.api import MetadataStore

log = logging.getLogger("gateway.core.backlog_quota")


async def enforce_backlog_quota(metadata: MetadataStore, clock: Clock, topic: TopicName, partition: Partition) -> None:
    policies = partition.meter.policies    # the namespace's, as this process last read them
    quota = policies.backlog_quota_bytes
    lowest = None if quota is None else await lowest_consumed(metadata, clock, topic, partition.index)
    backlog = 0 if lowest is None else partition.log.bytes_from(max(lowest, partition.log_start_offset))
    if quota is None or backlog <= quota:
        if partition.refusal is not None:
            log.info("%s-%d is within its backlog quota again", topic, partition.index)
        partition.refusal = None
        return
    if policies.backlog_quota_action == "drop_oldest":
        partition.refusal = None
        await partition.delete_records_before(_fitting_start(partition, quota))
        return
    if partition.refusal is None:
        log.info("%s-%d refuses producers: backlog of %d bytes over its quota of %d",
                 topic, partition.index, backlog, quota)
    partition.refusal = f"backlog quota of {quota} bytes exceeded on {topic}-{partition.index}"


def _fitting_start(partition: Partition, quota: int) -> int:
    """The lowest offset from which at most `quota` bytes are stored (binary search over offsets)."""
    low, high = partition.log_start_offset, partition.high_watermark
    while low < high:
        middle = (low + high) // 2
        if partition.log.bytes_from(middle) <= quota:
            high = middle
        else:
            low = middle + 1
    return low

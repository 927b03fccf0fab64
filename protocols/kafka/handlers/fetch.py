"""Fetch (key 1), versions 0-12.

Behaviour: reads whole batches from each partition's fetch offset (a fetch inside a batch returns
that batch), stopping before the batch that would cross the partition or the response byte limit;
only the response's first batch may exceed them (KIP-74, v3+; v0-2 have hard limits). Waits up to max_wait_ms for min_bytes, woken by the next append to any partition asked for (one
future watched by all of them); a partition the consumer has caught up with is not read at all.
Out-of-range offsets get OFFSET_OUT_OF_RANGE with the log start offset. read_committed (v4+,
isolation_level 1) reads only batches below the last stable offset (the first offset of the oldest
open transaction, else the high watermark), waits for that offset to move, and lists the aborted
transactions (producer id, first offset) with records in the range returned, so the consumer drops
them; read_uncommitted returns everything up to the high watermark. Control batches (transaction
markers) are returned as stored: consumers skip them.
Leader epochs (KIP-320): a current_leader_epoch (v9+) older than the partition's is
FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (the client refreshes its metadata); a
last_fetched_epoch (v12+, sent by followers) whose epoch ended before the fetch offset gets that
epoch's end as diverging_epoch and no records.
Fetch sessions (KIP-227): answered as "no session" (session id 0), so clients keep sending full
fetch requests, which the protocol allows.
Follower fetching (KIP-392, v11+): in a cluster, the owner of a partition answers a consumer
whose rack_id names a rack other than its own, and holding a read-only broker, with that broker as
preferred_read_replica (one per partition, spread by hash) and no records, at once; the consumer
then fetches there (core/replicas.py). A read-only broker serves fetches of any partition from the
shared storage, up to what the owner acknowledged (read_committed: up to the last stable offset of
the transactions it learned from the log); a fetch offset past its high watermark waits for it to
catch up (it trails the owner by about explicit_lac_ms) instead of being out of range.
With ACLs enforced (SASL on), as in Kafka 2.8: a consumer needs READ on each topic, checked before
the topic's existence (TOPIC_AUTHORIZATION_FAILED); a follower fetch (replica_id >= 0) needs
CLUSTER_ACTION on the cluster, else every partition is TOPIC_AUTHORIZATION_FAILED.
Gaps: incremental fetch sessions.
"""

import asyncio
import time
import zlib

from core.cluster.members import READ_ONLY
from core.errors import CoreError, OffsetOutOfRange
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, check_cluster, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.schema.fetch import FETCH as API
from protocols.kafka.topic_names import topic_name

MAX_WAIT_MS = 30_000
READ_COMMITTED = 1


async def handle(request: Msg, ctx: RequestContext) -> dict:
    deadline = time.monotonic() + min(max(request.max_wait_ms, 0), MAX_WAIT_MS) / 1000
    wanted = []
    readable = await _readable_topics(request, ctx)
    client = ctx.session.client
    committed = _read_committed(request)
    replicas = _read_replicas(request, ctx)
    redirects: dict[tuple[str, int], int] = {}     # (topic, partition) -> the read-only broker to fetch from
    for topic in request.topics:
        denied = readable is not None and topic.topic not in readable
        if client is not None and not denied:   # for the admin API's view of assign()-mode consumers
            client.fetched(topic.topic, [asked.partition for asked in topic.partitions])
        for asked in topic.partitions:
            if denied:
                wanted.append((topic.topic, asked, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                partition = await ctx.core.readable(topic_name(topic.topic, ctx.tenant, ctx.namespace),
                                                    asked.partition)
            except CoreError as exc:
                partition = exc
            if replicas and not isinstance(partition, CoreError):
                redirects[(topic.topic, asked.partition)] = _preferred_replica(replicas, topic.topic, asked.partition)
            wanted.append((topic.topic, asked, partition))
    while True:
        answers, total = await _read_all(request, wanted, ctx.version >= 3, redirects)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or remaining <= 0 or redirects:   # a consumer sent elsewhere: at once
            break
        waiting = [p for _, asked, p in wanted
                   if not isinstance(p, (Exception, ErrorCode))
                   and (p.last_stable_offset if committed else p.high_watermark) <= asked.fetch_offset]
        if not waiting or not await _next_append(waiting, remaining):
            break
    responses: dict[str, list] = {}
    for name, answer in answers:
        responses.setdefault(name, []).append(answer)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0,
            "responses": [{"topic": name, "partitions": parts} for name, parts in responses.items()]}


async def _next_append(partitions: list, timeout_s: float) -> bool:
    """Wait for the next append to any of `partitions` (True), or the timeout (False): one future
    watched by every partition and one timer, not a task per partition."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()
    timer = loop.call_later(timeout_s, _expire, waiter)
    for partition in partitions:
        partition.watch(waiter)
    try:
        return await waiter
    finally:
        timer.cancel()
        for partition in partitions:
            partition.unwatch(waiter)


def _read_replicas(request: Msg, ctx: RequestContext) -> list[int]:
    """The read-only brokers in the consumer's rack, when it names one this broker is not in."""
    cluster = ctx.core.cluster
    rack = request.rack_id if ctx.version >= 11 else None
    if cluster is None or not rack or rack == cluster.local.rack or cluster.local.role == READ_ONLY:
        return []
    return [broker.id for broker in cluster.brokers() if broker.role == READ_ONLY and broker.rack == rack]


def _preferred_replica(replicas: list[int], topic: str, index: int) -> int:
    return replicas[zlib.crc32(f"{topic}-{index}".encode()) % len(replicas)]


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(False)


async def _readable_topics(request: Msg, ctx: RequestContext) -> set[str] | None:
    """The topics this fetch may read; None: all of them (no ACLs to consult)."""
    if not enforced(ctx):
        return None
    names = [topic.topic for topic in request.topics]
    if request.replica_id >= 0:   # a follower: all or nothing
        return set(names) if await check_cluster(ctx, Operation.CLUSTER_ACTION) else set()
    return await authorized_names(ctx, Operation.READ, ResourceType.TOPIC, names)


def _read_committed(request: Msg) -> bool:
    return request.isolation_level == READ_COMMITTED   # absent before v4: decoded as its default, 0


async def _read_all(request: Msg, wanted: list, soft_limits: bool,
                    redirects: dict[tuple[str, int], int]) -> tuple[list, int]:
    committed = _read_committed(request)
    budget = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    answers = []
    for name, asked, partition in wanted:
        answer = {"partition_index": asked.partition, "error_code": ErrorCode.NONE, "high_watermark": -1,
                  "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None, "records": b""}
        answers.append((name, answer))
        if isinstance(partition, ErrorCode):
            answer["error_code"] = partition
            continue
        if isinstance(partition, CoreError):
            answer["error_code"] = kafka_code(partition)
            continue
        try:
            partition.check_leader_epoch(asked.current_leader_epoch)
        except CoreError as exc:
            answer["error_code"] = kafka_code(exc)
            continue
        high_watermark, stable, start = partition.high_watermark, partition.last_stable_offset, partition.log_start_offset
        answer.update(high_watermark=high_watermark, last_stable_offset=stable, log_start_offset=start,
                      aborted_transactions=[] if committed else None)
        replica = redirects.get((name, asked.partition))
        if replica is not None:
            answer["preferred_read_replica"] = replica
            continue
        if asked.last_fetched_epoch >= 0:
            epoch, end_offset = partition.log.epoch_end(asked.last_fetched_epoch)
            if epoch != asked.last_fetched_epoch or end_offset < asked.fetch_offset:
                answer["diverging_epoch"] = {"epoch": epoch, "end_offset": end_offset}
                continue
        if asked.fetch_offset == (stable if committed else high_watermark) and asked.fetch_offset >= start:
            continue   # caught up: nothing to read (every fetch of a waiting consumer)
        if partition.read_only and asked.fetch_offset > high_watermark:
            continue   # a replica behind the owner: nothing yet (the wait below covers it)
        limit = min(asked.partition_max_bytes, budget - total)
        min_one = total == 0 and soft_limits
        if limit <= 0 and not min_one:
            continue
        try:
            if committed:
                result = await partition.read_committed(asked.fetch_offset, max(limit, 1), min_one=min_one)
            else:
                result = await partition.read(asked.fetch_offset, max(limit, 1), min_one=min_one)
        except OffsetOutOfRange:
            answer["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
            continue
        except CoreError as exc:
            answer["error_code"] = kafka_code(exc)
            continue
        answer.update(records=result.records, high_watermark=result.high_watermark,
                      last_stable_offset=partition.last_stable_offset, log_start_offset=result.log_start_offset)
        if committed:
            answer.update(last_stable_offset=result.last_stable_offset,
                          aborted_transactions=[{"producer_id": t.producer_id, "first_offset": t.first_offset}
                                                for t in result.aborted])
        total += len(result.records)
    return answers, total

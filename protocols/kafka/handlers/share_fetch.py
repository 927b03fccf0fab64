"""ShareFetch (key 78), version 1: a share group member's fetch (KIP-932).

Behaviour: within the member's share session (protocols/kafka/share_sessions.py: epoch 0 opens
it, -1 closes it, the partitions named are added, the forgotten ones dropped) the piggybacked
acknowledgements are applied and persisted first (ACCEPT 1, RELEASE 2, REJECT 3, GAP 0, one type
for a range or one per offset; a record not acquired by this member makes the partition's
AcknowledgeErrorCode INVALID_RECORD_STATE and settles nothing of that batch). Then up to
max_records records are acquired across the session's partitions (core/shares/share_partition.py),
each locked for the group's record lock duration (AcquisitionLockTimeoutMs); the response holds
the stored batches that contain them, as they are, and the acquired ranges with their delivery
counts: the client hands out only the records in those ranges. With nothing to acquire, the fetch
waits up to max_wait_ms for an append or a release. Acknowledgements with epoch 0 are
INVALID_REQUEST, as in Kafka. With ACLs enforced (SASL on), the group and each topic need READ.
Gaps: min_bytes and batch_size are not used (an answer goes out as soon as something is acquired);
partitions are never NOT_LEADER_OR_FOLLOWER: in a cluster the broker that is asked serves the
share partition.
"""

import asyncio
import time

from core.errors import CoreError
from protocols.kafka.authorization import Operation, ResourceType, check
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.schema.share_fetch import SHARE_FETCH as API
from protocols.kafka.share_sessions import (CLOSE_EPOCH, NO_LEADER_CHANGE, OPEN_EPOCH, acknowledge, key_of,
                                            release_member, sessions, share_partition)

MAX_WAIT_MS = 30_000
DEFAULT_MAX_RECORDS = 500      # when the request says 0 or less while fetching


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not request.group_id or not request.member_id:
        return _error(ErrorCode.INVALID_REQUEST, "a share fetch needs a group id and a member id")
    if not await check(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized to read the group")
    key, member, epoch = key_of(ctx, request.group_id), request.member_id, request.share_session_epoch
    registry = sessions(ctx)
    code = registry.check(key, member, epoch)
    if code != ErrorCode.NONE:
        return _error(code, f"share session of member {member}: epoch {epoch}")
    if epoch == OPEN_EPOCH and any(p.acknowledgement_batches for t in request.topics for p in t.partitions):
        return _error(ErrorCode.INVALID_REQUEST, "acknowledgements cannot open a share session")
    deadline = time.monotonic() + min(max(request.max_wait_ms, 0), MAX_WAIT_MS) / 1000
    ack_codes = await acknowledge(ctx, key, member, request.topics)
    if epoch == CLOSE_EPOCH:
        registry.close(key, member)
        release_member(ctx, key, member)
        return _answer(ctx, {ident: {"acknowledge_error_code": c} for ident, c in ack_codes.items()})
    if epoch == OPEN_EPOCH:
        session, replaced = registry.open(key, member)
        if replaced:
            release_member(ctx, key, member)
    else:
        session = registry.get(key, member)
        session.next_epoch()
    for topic in request.forgotten_topics_data:
        session.partitions.difference_update((topic.topic_id, index) for index in topic.partitions)
    session.partitions.update((t.topic_id, p.partition_index) for t in request.topics for p in t.partitions)

    answers: dict = {ident: {"acknowledge_error_code": c} for ident, c in ack_codes.items()}
    shares = []
    for topic_id, index in sorted(session.partitions):
        name = await registry.topic(ctx, topic_id)
        if name is not None and not await check(ctx, Operation.READ, ResourceType.TOPIC, name.topic):
            answers.setdefault((topic_id, index), {})["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        share = await share_partition(ctx, key, topic_id, index)
        if isinstance(share, ErrorCode):
            answers.setdefault((topic_id, index), {})["error_code"] = share
        else:
            shares.append(((topic_id, index), share))
    max_records = request.max_records if request.max_records > 0 else DEFAULT_MAX_RECORDS
    max_bytes = max(request.max_bytes, 1)
    while shares:
        left = max_records
        for ident, share in shares:
            if left <= 0:
                break
            try:
                fetched = await share.fetch(member, left, max_bytes)
            except CoreError as exc:
                answers.setdefault(ident, {})["error_code"] = kafka_code(exc)
                continue
            if fetched.acquired:
                left -= sum(last - first + 1 for first, last, _ in fetched.acquired)
                answer = answers.setdefault(ident, {})
                answer["records"] = fetched.records
                answer["acquired_records"] = [{"first_offset": f, "last_offset": l, "delivery_count": c}
                                              for f, l, c in fetched.acquired]
        remaining = deadline - time.monotonic()
        if left < max_records or remaining <= 0 or not await _next_change(ctx, shares, remaining):
            break
    return _answer(ctx, answers)


async def _next_change(ctx: RequestContext, shares: list, timeout_s: float) -> bool:
    """Wait for an append to, a release in, or a lock running out in any of the share partitions
    (True), or the timeout (False)."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()
    locks = [d for _, share in shares if (d := share.next_lock_deadline()) is not None]
    if locks:
        timeout_s = min(timeout_s, max(0.0, (min(locks) - ctx.core.clock.now_ms()) / 1000))
    partitions = [await ctx.core.partition(share.cursor.topic, share.cursor.partition) for _, share in shares]
    timer = loop.call_later(timeout_s, lambda: waiter.done() or waiter.set_result(bool(locks)))
    for partition in partitions:
        partition.watch(waiter)
    for _, share in shares:
        share.watch(waiter)
    try:
        return await waiter
    finally:
        timer.cancel()
        for partition in partitions:
            partition.unwatch(waiter)
        for _, share in shares:
            share.unwatch(waiter)


def _answer(ctx: RequestContext, answers: dict) -> dict:
    by_topic: dict = {}
    for (topic_id, index), answer in sorted(answers.items()):
        by_topic.setdefault(topic_id, []).append({
            "partition_index": index,
            "error_code": answer.get("error_code", ErrorCode.NONE),
            "acknowledge_error_code": answer.get("acknowledge_error_code", ErrorCode.NONE),
            "current_leader": NO_LEADER_CHANGE,
            "records": answer.get("records", b""),          # never null: the client reads a length
            "acquired_records": answer.get("acquired_records", []),
        })
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "acquisition_lock_timeout_ms": ctx.broker.shares.settings.record_lock_duration_ms,
            "responses": [{"topic_id": t, "partitions": parts} for t, parts in by_topic.items()],
            "node_endpoints": []}


def _error(code: ErrorCode, message: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []}

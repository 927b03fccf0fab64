"""Produce (key 0), versions 0-9.

Behaviour: every partition's batches are validated (framing, magic 2, CRC-32C, max.message.bytes)
and queued for storage while the request is handled, so their offsets follow request order; the
response is sent once all of them are durable (acks=1 and acks=all mean the same here: fsynced on
the ack quorum). acks=0 gets no response. Batches are stored as sent, compression included.
With ACLs enforced (SASL on), each topic needs WRITE (TOPIC_AUTHORIZATION_FAILED, decided once per
topic per request, before the existence check), as in Kafka 2.8; an idempotent producer needs no
more here (since KIP-679 Kafka checks IDEMPOTENT_WRITE in InitProducerId only).
Transactions: a transactional batch (attributes bit 4) is accepted only in a request naming the
producer's transactional id (else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka
answers), only as the partition's single batch (INVALID_RECORD), and only for a partition added to
the ongoing transaction of that producer id and epoch: INVALID_PRODUCER_ID_MAPPING for another
producer id, INVALID_PRODUCER_EPOCH for another epoch, INVALID_TXN_STATE for a partition not in the
transaction (KIP-890's check). In a cluster, when another broker coordinates the transactional id,
that check reads the id's stored transaction once per producer, epoch and partition, and holds
until a marker for that producer lands on the partition. With ACLs enforced, the transactional id needs WRITE
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Sequence checks apply as for any idempotent producer.
Internal topics (__consumer_offsets) are refused with INVALID_TOPIC_EXCEPTION, as in Kafka, and so
are the core's system topics (core/system_topics.py).
Delayed delivery: on a topic with delayed.delivery.enable=true, records with a deliver-at-ms or
deliver-after-ms header are held until due (core/delayed/produce.py); a malformed value is
INVALID_RECORD. The base offset answered is that of the records stored at once (-1 if all were held).
Idempotence: a batch ahead of its producer's next sequence (one before it has not arrived) is
OUT_OF_ORDER_SEQUENCE_NUMBER, as in Kafka, except for a while after an append to that partition was
refused or failed (a storage failure being repaired), when it is NOT_ENOUGH_REPLICAS, retriable and
not stored; a producer this partition has no state for must start at sequence 0, else (when records
may have gone by retention) UNKNOWN_PRODUCER_ID with the log start offset. core/producer_state.py
says why both differ from Kafka.
Mirror topics (mirror.source set, protocols/kafka/mirror): a replicator (client id
"gateway-replicator", with ACLs also CLUSTER_ACTION) stores each batch at its own base offset (core
Partition.append_mirrored) and only into mirrors; any other producer gets INVALID_REQUEST there.
Gaps: message format v0/v1 batches (magic < 2) are refused with INVALID_RECORD.
"""

import inspect

from core.delayed import produce as delayed
from core.errors import CoreError, InvalidRecord, UnknownProducerId
from core.records import batch as record_batch
from core.system_topics import SYSTEM_TOPICS
from protocols.kafka.authorization import Operation, ResourceType, check, check_cluster, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.consumer_offsets import INTERNAL_TOPICS
from protocols.kafka.errors import kafka_code
from protocols.kafka.mirror.client import REPLICATOR_CLIENT_ID
from protocols.kafka.schema.produce import PRODUCE as API
from protocols.kafka.topic_names import topic_name
from protocols.kafka.transactions import txn_key


async def handle(request: Msg, ctx: RequestContext):
    started: list[tuple[dict, object]] = []
    responses = []
    writable: dict[str, bool] | None = {} if enforced(ctx) else None   # None: no ACLs to consult
    refused = await _transactional_refusal(request, ctx)
    mirroring: list[bool] = []     # decided once per request, when a mirror topic comes up
    for topic in request.topic_data:
        partitions = []
        responses.append({"name": topic.name, "partition_responses": partitions})
        allowed = writable is None or await _may_write(ctx, topic.name, writable)
        internal = topic.name in INTERNAL_TOPICS or topic.name in SYSTEM_TOPICS
        for data in topic.partition_data:
            answer = {"index": data.index, "error_code": ErrorCode.NONE, "base_offset": -1}
            partitions.append(answer)
            if refused is not None:
                answer["error_code"] = refused
                continue
            if not allowed:
                answer["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if internal:
                answer["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
                continue
            if request.acks not in (-1, 0, 1):
                answer["error_code"] = ErrorCode.INVALID_REQUIRED_ACKS
                continue
            try:
                name = topic_name(topic.name, ctx.tenant, ctx.namespace)
                partition = await ctx.core.partition(name, data.index)
                header = None if request.transactional_id is None else \
                    await _transactional_header(ctx, request.transactional_id, topic.name, data)
                if header is not None:
                    # Checked with no await before the append: the transaction cannot end in between.
                    ctx.broker.transactions.check_produce(txn_key(ctx, request.transactional_id), header.producer_id,
                                                          header.producer_epoch, (topic.name, data.index))
                if ctx.header.client_id == REPLICATOR_CLIENT_ID and await _is_replicator(ctx, mirroring):
                    pending = partition.append_mirrored(data.records or b"")
                elif partition.config.delayed_delivery:     # the only per-partition cost for other topics
                    pending = delayed.start_append(ctx.core, name, partition, data.records or b"")
                else:
                    pending = partition.start_append(data.records or b"")
                started.append((answer, partition, pending))
            except UnknownProducerId as exc:   # the Java client reads the log start to decide to reset
                answer["error_code"] = kafka_code(exc)
                answer["log_start_offset"] = partition.log_start_offset
            except CoreError as exc:
                answer["error_code"] = kafka_code(exc)
    return _complete(request.acks, responses, started)


async def _transactional_refusal(request: Msg, ctx: RequestContext) -> ErrorCode | None:
    """The code every partition gets when transactional batches come without a transactional id
    (or with one the principal may not write), as Kafka decides it for the whole request."""
    if request.transactional_id is None:
        if any(_transactional(data.records) for topic in request.topic_data for data in topic.partition_data):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return None
    if not await check(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return None


async def _is_replicator(ctx: RequestContext, decided: list[bool]) -> bool:
    """A replicator names itself by its client id and, with ACLs enforced, needs CLUSTER_ACTION, as
    Kafka's replica fetchers do; without it, it is a client like any other."""
    if not decided:
        decided.append(await check_cluster(ctx, Operation.CLUSTER_ACTION, audit=False))
    return decided[0]


def _transactional(records) -> bool:
    """Bit 4 of the first batch's attributes (the low byte of the int16), without unpacking it."""
    return records is not None and len(records) >= record_batch.HEADER_SIZE \
        and bool(records[record_batch.ATTRIBUTES_OFFSET + 1] & 0x10)


def _first_header(data) -> record_batch.BatchHeader | None:
    records = data.records
    if records is None or len(records) < record_batch.HEADER_SIZE:
        return None   # the partition's own validation answers for it
    return record_batch.read_header(records)


async def _transactional_header(ctx: RequestContext, transactional_id: str, topic: str,
                                data) -> record_batch.BatchHeader | None:
    """The header of a transactional batch, which must be alone; for an id another broker
    coordinates, its stored transaction is read here (raises if the batch may not be written)."""
    header = _first_header(data)
    if header is None or not header.is_transactional:
        return None
    if header.size_bytes != len(data.records):
        raise InvalidRecord("a transactional produce carries exactly one batch per partition")
    await ctx.broker.transactions.prepare_produce(txn_key(ctx, transactional_id), header.producer_id,
                                                  header.producer_epoch, (topic, data.index))
    return header


async def _may_write(ctx: RequestContext, name: str, decided: dict[str, bool]) -> bool:
    allowed = decided.get(name)
    if allowed is None:
        allowed = decided[name] = await check(ctx, Operation.WRITE, ResourceType.TOPIC, name)
    return allowed


async def _complete(acks: int, responses: list, started: list) -> dict | None:
    # Every append is already queued; awaiting them one by one costs no more time than a gather
    # and no task per partition.
    unexpected: BaseException | None = None
    try:
        for answer, partition, pending in started:
            try:
                answer["base_offset"] = await pending
                answer["log_start_offset"] = partition.log_start_offset
            except CoreError as exc:
                answer["error_code"] = kafka_code(exc)
            except Exception as exc:
                unexpected = unexpected or exc
    finally:   # cancelled (the connection went away): close what was never awaited, quietly
        for _, _, pending in started:
            if inspect.iscoroutine(pending):
                pending.close()
    if unexpected is not None:
        raise unexpected
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time_ms": 0}

"""TxnOffsetCommit (key 28), versions 0-3.

Behaviour: stages consumer offsets in the producer's ongoing transaction; they reach the group
(core group offset storage) only if the transaction commits. The group must have been added with
AddOffsetsToTxn (else INVALID_TXN_STATE). Partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION and metadata over offset.metadata.max.bytes OFFSET_METADATA_TOO_LARGE on
their own; the transaction decides for the rest: a fenced or unknown producer is
INVALID_PRODUCER_EPOCH (as Kafka answers this API at every version), CONCURRENT_TRANSACTIONS while
the previous transaction completes.
With ACLs enforced (SASL on), as in Kafka 2.8: WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (GROUP_AUTHORIZATION_FAILED), READ on
each topic (TOPIC_AUTHORIZATION_FAILED), for every partition.
v3 (KIP-447) names the consumer's member id and generation: as in Kafka, a member id the group
does not have is UNKNOWN_MEMBER_ID and another generation ILLEGAL_GENERATION, for every partition
not refused already (-1 and "" skip the checks, as manually assigned consumers send).
Gaps: a v3 group_instance_id is not checked (FENCED_INSTANCE_ID is never answered here).
"""

from core.errors import CoreError
from core.groups.consumer_group import ConsumerGroup
from core.groups.values import OffsetAndMetadata
from core.transactions.errors import InvalidProducerIdMapping, ProducerFenced
from protocols.kafka.authorization import Operation, ResourceType, authorized_names, check, enforced
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.groups import coordinator, group_key
from protocols.kafka.schema.txn_offset_commit import TXN_OFFSET_COMMIT as API
from protocols.kafka.transactions import partition_exists, txn_key


async def handle(request: Msg, ctx: RequestContext) -> dict:
    wanted = [(topic.name, p.partition_index) for topic in request.topics for p in topic.partitions]
    if not await check(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return _response(request, {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in wanted})
    if not await check(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return _response(request, {tp: ErrorCode.GROUP_AUTHORIZATION_FAILED for tp in wanted})
    readable = await authorized_names(ctx, Operation.READ, ResourceType.TOPIC,
                                      (t.name for t in request.topics)) if enforced(ctx) else None
    limit = ctx.broker.groups.settings.offset_metadata_max_bytes
    codes: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    for topic in request.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if readable is not None and topic.name not in readable:
                codes[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not await partition_exists(ctx, *tp):
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata) > limit:
                codes[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                offsets[tp] = OffsetAndMetadata(p.committed_offset, metadata, p.committed_leader_epoch)
    refused = _member_refusal(request, ctx)
    if offsets and refused is not None:
        codes.update((tp, refused) for tp in offsets)
    elif offsets:
        code = ErrorCode.NONE
        try:
            await ctx.broker.transactions.stage_offsets(txn_key(ctx, request.transactional_id), request.producer_id,
                                                        request.producer_epoch, request.group_id, offsets)
        except (ProducerFenced, InvalidProducerIdMapping):
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        except CoreError as exc:
            code = kafka_code(exc)
        codes.update((tp, code) for tp in offsets)
    return _response(request, codes)


def _member_refusal(request: Msg, ctx: RequestContext) -> ErrorCode | None:
    if ctx.version < 3 or (request.member_id == "" and request.generation_id < 0):
        return None
    group = coordinator(ctx).group(group_key(ctx, request.group_id))   # None: no member has joined
    if request.member_id != "" and (group is None or not group.has_member(request.member_id)):
        return ErrorCode.UNKNOWN_MEMBER_ID
    if request.generation_id >= 0 and request.generation_id != _generation(group, request.member_id):
        return ErrorCode.ILLEGAL_GENERATION
    return None


def _generation(group, member_id: str) -> int:
    """What a member commits at: the group's generation, or its own epoch in a consumer-protocol group."""
    if group is None:
        return 0
    if isinstance(group, ConsumerGroup):
        return group.members[member_id].epoch if group.has_member(member_id) else -1
    return group.generation


def _response(request: Msg, codes: dict[tuple[str, int], ErrorCode]) -> dict:
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": codes[(topic.name, p.partition_index)]}
            for p in topic.partitions]}
        for topic in request.topics]}

"""Finding stored messages, whichever protocol wrote them: by partition + offset, by time range, by
key, by a header's value, or by any predicate a protocol builds (an AMQP message-id).

What is indexed: an offset (the managed log's ledger list leads to the entry holding it) and a
start time (the log's timestamp index, `Partition.offset_for_timestamp`). Keys, headers and
predicates have no index: they are found by reading forward from the start offset (the offset asked
for, the start time's offset, or the log start), batch by batch, within a byte budget per call.
The answer says where each partition's scan stopped, so a caller goes on from there.

Nothing here runs on a produce or fetch path: it reads through `Partition.read` like a consumer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from core.names import TopicName
from core.partition import storage_errors
from core.records.batch import read_header, split_batches
from core.records.decoder import DecodedRecord, decode_batch

READ_BYTES = 1 << 20            # read this much of a partition at a time
DEFAULT_SCAN_BYTES = 64 << 20   # per call and partition: the most a key or header search reads
MAX_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class MessageQuery:
    partition: int | None = None       # None: every partition of the topic
    offset: int | None = None          # the first offset to look at
    start_ms: int | None = None        # records with timestamp >= start_ms ...
    end_ms: int | None = None          # ... and < end_ms
    key: bytes | None = None
    header: tuple[str, bytes] | None = None   # a header with this name and value
    matches: Callable[[DecodedRecord], bool] | None = None   # any other condition
    limit: int = 20
    scan_bytes: int = DEFAULT_SCAN_BYTES

    def wants(self, record: DecodedRecord) -> bool:
        if self.start_ms is not None and record.timestamp_ms < self.start_ms:
            return False
        if self.end_ms is not None and record.timestamp_ms >= self.end_ms:
            return False
        if self.key is not None and record.key != self.key:
            return False
        if self.header is not None and self.header not in record.headers:
            return False
        return self.matches is None or self.matches(record)


@dataclass(frozen=True, slots=True)
class FoundMessage:
    partition: int
    record: DecodedRecord


@dataclass(slots=True)
class QueryResult:
    messages: list[FoundMessage] = field(default_factory=list)
    next_offsets: dict[int, int] = field(default_factory=dict)   # partition -> where its scan stopped
    complete: bool = True       # False: a budget or the limit stopped a scan before the log end


async def find_messages(core, topic: TopicName, query: MessageQuery) -> QueryResult:
    info = await core.registry.get_topic(topic)
    partitions = range(info.partitions) if query.partition is None else [query.partition]
    result = QueryResult()
    for index in partitions:
        partition = await core.partition(topic, index)
        offset = await _start(partition, query)
        budget = query.scan_bytes
        while offset < partition.high_watermark and len(result.messages) < query.limit:
            if budget <= 0:
                result.complete = False
                break
            # From the log itself: an operator's query is no consumer's dispatch (Partition.read meters that).
            with storage_errors():
                entries = await partition.log.read(offset, READ_BYTES)
            records = b"".join(entry.payload for entry in entries)
            if not records:
                break
            budget -= len(records)
            offset, past_end = _collect(index, records, offset, query, result)
            if past_end:
                break
        if len(result.messages) >= query.limit and offset < partition.high_watermark:
            result.complete = False
        result.next_offsets[index] = offset
    return result


async def _start(partition, query: MessageQuery) -> int:
    start = partition.log_start_offset
    if query.offset is not None:
        start = max(start, query.offset)
    if query.start_ms is not None:
        found = await partition.offset_for_timestamp(query.start_ms)
        start = max(start, found[0] if found is not None else partition.high_watermark)
    return start


def _collect(index: int, records: bytes, offset: int, query: MessageQuery, result: QueryResult) -> tuple[int, bool]:
    """Add the wanted records of these batches; (the offset to read next, whether the time range is over)."""
    for batch in split_batches(records):
        header = read_header(batch)
        next_offset = header.base_offset + header.next_offset_delta
        if header.is_control or next_offset <= offset:
            offset = max(offset, next_offset)
            continue
        if query.end_ms is not None and header.base_timestamp >= query.end_ms and \
                header.max_timestamp >= query.end_ms:
            return offset, True   # timestamps only grow from here, as far as producers keep time
        _, decoded = decode_batch(batch)
        for record in decoded:
            if record.offset < offset:
                continue
            offset = record.offset + 1
            if query.wants(record):
                result.messages.append(FoundMessage(index, record))
                if len(result.messages) >= query.limit:
                    return offset, False
        offset = max(offset, next_offset)
    return offset, False

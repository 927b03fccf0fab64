"""Records on the peer links (core/cluster/peers.py): the records of a request or an answer travel
in its payload as one uncompressed RecordBatch (core/records), their keys, values and headers as
they are, while the head says what they are for. Anything with a record's timestamp_ms, key, value
and headers can be packed (a queue's messages too)."""

from __future__ import annotations

from collections.abc import Sequence

from core.errors import RequestRefused
from core.records.batch import CorruptBatch, InvalidBatch, split_batches
from core.records.builder import Record, build_batch
from core.records.decoder import DecodedRecord, decode_batch


def pack(records: Sequence) -> bytes:
    return build_batch(records) if records else b""


def unpack(payload: bytes) -> list[DecodedRecord]:
    """The records packed in `payload`; RequestRefused if it is not what `pack` makes."""
    if not payload:
        return []
    try:
        return [record for batch in split_batches(payload) for record in decode_batch(batch)[1]]
    except (CorruptBatch, InvalidBatch, ValueError) as exc:
        raise RequestRefused(f"records from a peer do not decode: {exc}") from None


def unpack_records(payload: bytes) -> list[Record]:
    return [Record(record.timestamp_ms, record.key, record.value, record.headers) for record in unpack(payload)]

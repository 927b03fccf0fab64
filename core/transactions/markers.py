"""Transaction markers: the control batch that ends a producer's transaction on a partition.

A marker is a RecordBatch v2 (layout in core/records/batch.py) with attributes 0x30 (bit 4
transactional, bit 5 control, no compression), the producer's id and epoch, baseSequence -1 and
exactly one record whose key and value are (big-endian):

    key    version int16 = 0, type int16 (0 ABORT, 1 COMMIT)
    value  version int16 = 0, coordinatorEpoch int32

Consumers never see control records as messages; read_committed consumers use them to drop the
records of aborted transactions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from core.records import batch as record_batch
from core.records.builder import Record, build_batch
from core.records.decoder import decode_batch

ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_MAX_MARKER_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class Marker:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int = 0


def build_marker(marker: Marker, timestamp_ms: int) -> bytes:
    record = Record(timestamp_ms, key=_KEY.pack(0, COMMIT if marker.commit else ABORT),
                    value=_VALUE.pack(0, marker.coordinator_epoch))
    return build_batch([record], producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                       base_sequence=-1, is_transactional=True, is_control=True)


def read_marker(batch: bytes | memoryview) -> Marker | None:
    """The marker a control batch holds; None for a control batch of another type (or unreadable)."""
    header = record_batch.read_header(batch)
    try:
        _, records = decode_batch(bytes(batch), max_decompressed_bytes=_MAX_MARKER_BYTES)
    except (ValueError, struct.error):   # a damaged control batch ends nothing: treated as absent
        return None
    if not records or records[0].key is None or len(records[0].key) < _KEY.size:
        return None
    _, kind = _KEY.unpack_from(records[0].key)
    if kind not in (ABORT, COMMIT):
        return None
    value = records[0].value or b""
    coordinator_epoch = _VALUE.unpack_from(value)[1] if len(value) >= _VALUE.size else 0
    return Marker(header.producer_id, header.producer_epoch, kind == COMMIT, coordinator_epoch)

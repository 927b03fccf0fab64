"""The records of a queue topic's log, as its readers (delivery, limits, priorities, restart) need them.

A read returns whole batches; the data batches are decoded (bounded), control batches (Kafka
transaction markers) are passed over, and a damaged batch is skipped, never served: the caller may
log it.
"""

from __future__ import annotations

from collections.abc import Callable

from core.records.batch import BatchHeader, read_header, split_batches
from core.records.decoder import DecodedRecord, decode_batch

MAX_DECODE_BYTES = 256 << 20      # the largest AMQP message, decompressed


def data_records(raw: bytes | memoryview, *, wanted: Callable[[BatchHeader, memoryview], bool] | None = None,
                 on_damaged: Callable[[BatchHeader, Exception], None] | None = None,
                 on_control: Callable[[BatchHeader], None] | None = None,
                 ) -> tuple[list[DecodedRecord], int]:
    """The records of the data batches in `raw` that `wanted` accepts (default: all), and the
    offset just past the last batch read (0 when there is none)."""
    records: list[DecodedRecord] = []
    next_offset = 0
    for batch in split_batches(raw):
        header = read_header(batch)
        next_offset = max(next_offset, header.base_offset + header.last_offset_delta + 1)
        if header.is_control:
            if on_control is not None:
                on_control(header)
            continue
        if wanted is not None and not wanted(header, batch):
            continue
        try:
            _, decoded = decode_batch(batch, max_decompressed_bytes=MAX_DECODE_BYTES)
        except Exception as exc:
            if on_damaged is not None:
                on_damaged(header, exc)
            continue
        records.extend(decoded)
    return records, next_offset

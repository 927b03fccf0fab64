"""Pulsar messages as the core's records, and records as Pulsar messages.

    Pulsar (MessageMetadata / SingleMessageMetadata)   record
    payload (null_value: null)                         value
    partition_key                                      key
    properties                                         headers, UTF-8 values
    publish_time                                       timestamp
    producer_name, sequence_id                         headers pulsar.producer, pulsar.sequence
    event_time                                         header pulsar.event_time (decimal ms)
    ordering_key                                       header queue.group: the core's message group,
                                                       what key-shared dispatch keeps in order

A record written by another protocol reads as a message of producer "kafka" (or whoever the
header names) with the record's key, headers (values decoded as UTF-8, invalid bytes replaced)
and timestamp. Headers of the other protocols (amqp.*, queue.*) are not shown as properties.
"""

from __future__ import annotations

from core.queues.attributes import GROUP
from core.records.builder import Record
from protocols.pulsar.codec.batch import Message, set_key
from protocols.pulsar.codec.pulsar_wire_pb2 import KeyValue, MessageMetadata

PRODUCER = "pulsar.producer"
SEQUENCE = "pulsar.sequence"
EVENT_TIME = "pulsar.event_time"
FOREIGN_PRODUCER = "kafka"
_HIDDEN_PREFIXES = ("pulsar.", "amqp.", "queue.")


def to_record(message: Message, publish_time: int, producer: str, sequence_id: int) -> Record:
    headers: list[tuple[str, bytes | None]] = [(k, v.encode("utf-8")) for k, v in message.properties]
    headers.append((PRODUCER, producer.encode("utf-8")))
    headers.append((SEQUENCE, str(sequence_id).encode("ascii")))
    if message.event_time:
        headers.append((EVENT_TIME, str(message.event_time).encode("ascii")))
    if message.ordering_key is not None:
        headers.append((GROUP, message.ordering_key))
    return Record(publish_time, message.key, message.value, tuple(headers))


def to_metadata(timestamp_ms: int, key: bytes | None, value: bytes | None,
                headers: tuple[tuple[str, bytes | None], ...], offset: int) -> MessageMetadata:
    """The metadata a consumer receives for a record (its sequence id: the offset, unless a Pulsar
    producer's own is stored)."""
    metadata = MessageMetadata(producer_name=FOREIGN_PRODUCER, sequence_id=offset, publish_time=max(timestamp_ms, 0))
    for name, raw in headers:
        if name == PRODUCER and raw is not None:
            metadata.producer_name = raw.decode("utf-8", "replace")
        elif name == SEQUENCE and raw is not None and raw.isdigit():
            metadata.sequence_id = int(raw)
        elif name == EVENT_TIME and raw is not None and raw.isdigit():
            metadata.event_time = int(raw)
        elif name == GROUP and raw is not None:
            metadata.ordering_key = raw
        elif not name.startswith(_HIDDEN_PREFIXES):
            metadata.properties.append(KeyValue(key=name, value=(raw or b"").decode("utf-8", "replace")))
    if key is not None:
        set_key(metadata, key)
    if value is None:
        metadata.null_value = True
    return metadata

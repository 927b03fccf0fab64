"""Sequences of idempotent producers that a partition's log does not show, kept in the metadata store.

A batch whose records were all or partly held for delayed delivery (core/delayed/produce.py)
leaves in the log at most the records stored at once, numbered from the batch's base sequence. A
partition relearning its producers from the log (after a restart or a failover) would then believe
the producer stopped short of the batch's last sequence and refuse its next batch as out of order.
So such a batch, once stored and held and before it is acknowledged, is noted, one node per
producer and partition, each note replacing the last:

    /producer-notes/<topic id>/<partition>/<producer id> = "<epoch> <first seq> <count> <base offset> <at>"

`base offset` is what the produce answered (-1: every record was held) and `at` the partition's end
offset when the batch came. Relearning applies a note unless the producer stored a later batch
(core/producer_state.py `relearn_note`). Notes older than the tail a partition relearns from are
deleted then: that producer is treated as new, as every producer older than that tail is.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.api import BadVersion, MetadataStore, NoNode

ROOT = "/producer-notes"


@dataclass(frozen=True, slots=True)
class ProducerNote:
    producer_id: int
    epoch: int
    first_seq: int
    count: int
    base_offset: int
    at: int


class ProducerNotes:
    """One partition's notes."""

    def __init__(self, metadata: MetadataStore, topic_id: str, partition: int) -> None:
        self._metadata = metadata
        self._path = f"{ROOT}/{topic_id}/{partition}"

    async def save(self, note: ProducerNote) -> None:
        value = f"{note.epoch} {note.first_seq} {note.count} {note.base_offset} {note.at}"
        await self._metadata.put(f"{self._path}/{note.producer_id}", value.encode())

    async def load(self, since_offset: int) -> list[ProducerNote]:
        """The notes made at or after `since_offset`; older ones are deleted."""
        notes = []
        for name in await self._metadata.children(self._path):
            path = f"{self._path}/{name}"
            node = await self._metadata.get(path)
            if node is None:
                continue
            epoch, first_seq, count, base_offset, at = (int(part) for part in node.value.decode().split())
            if at < since_offset:
                try:
                    await self._metadata.delete(path, node.version)
                except (NoNode, BadVersion):   # replaced by a newer note meanwhile: kept
                    pass
                continue
            notes.append(ProducerNote(int(name), epoch, first_seq, count, base_offset, at))
        return notes

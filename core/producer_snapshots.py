"""Snapshots of a partition's idempotent producers, so that opening it reads only the log after one.

Without them a partition that opens (a restart, a failover, a bundle move) learns its producers from
the tail of its log, up to 64 MiB of it read back from the bookies before it takes a write: the time
a partition is unavailable after a fault then grows with its log. As Kafka keeps a producer snapshot
per segment, the partition stores here what it knows of its producers at an offset every few MiB,
and opening reads the newest snapshot and then only the log from that offset on:

    /producer-snapshots/<topic id>/<partition> = JSON {"offset": S, "complete": bool,
        "producers": [[producer id, epoch, last timestamp, [[first seq, last seq, base offset], ...]], ...],
        "transactions": [[producer id, first offset], ...]}

A snapshot at S holds exactly the batches below S: it is taken when an append is queued (S is the
log's next offset then) and stored only once that append, and so every one before it, is durable;
if the append fails, it is dropped. `complete` carries over whether the state was learned from
offset 0 (core/producer_state.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from storage.api import MetadataStore

ROOT = "/producer-snapshots"
MAX_PRODUCERS = 10_000   # beyond this a snapshot is not taken: the log's tail says it all the same


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    offset: int
    complete: bool
    producers: list      # [producer id, epoch, last timestamp, [[first seq, last seq, base offset], ...]]
    transactions: list   # [producer id, first offset of its open transaction]

    def to_bytes(self) -> bytes:
        return json.dumps({"offset": self.offset, "complete": self.complete, "producers": self.producers,
                           "transactions": self.transactions}, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> "ProducerSnapshot":
        doc = json.loads(raw)
        return cls(int(doc["offset"]), bool(doc["complete"]), doc["producers"], doc["transactions"])


class ProducerSnapshots:
    """One partition's newest snapshot, in the metadata store (written through the owner's guard)."""

    def __init__(self, metadata: MetadataStore, topic_id: str, partition: int) -> None:
        self._metadata = metadata
        self._path = f"{ROOT}/{topic_id}/{partition}"

    async def save(self, snapshot: ProducerSnapshot) -> None:
        await self._metadata.put(self._path, snapshot.to_bytes())

    async def load(self) -> ProducerSnapshot | None:
        node = await self._metadata.get(self._path)
        if node is None:
            return None
        try:
            return ProducerSnapshot.from_bytes(node.value)
        except (ValueError, KeyError, TypeError):   # unreadable: the log's tail is scanned instead
            return None

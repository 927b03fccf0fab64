"""A partition's aborted transactions: (producer id, first offset, last offset) per abort marker, the
last offset being the marker's. read_committed fetches return the ones overlapping what they read,
and consumers drop that producer's records inside each range (Kafka's .txnindex, kept in memory).

Ordered by last offset, since markers are appended in order. It survives a restart two ways:
each entry is stored in the metadata store once its marker is durable (AbortedIndexStore below), and
the tail of the log is scanned when the partition opens (Partition.load_producer_states), which also
recovers an entry whose marker was written but not yet stored. The stored entries are what lets a
read_committed consumer far behind the tail still skip aborted data without scanning the whole log.

    /txn-aborted/<topic id>/<partition>/<last offset, 20 digits>   "<producer id> <first offset>"

Keyed by topic id, so a topic deleted and created again under the same name starts empty.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from storage.api import MetadataStore, NoNode

ROOT = "/txn-aborted"


@dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    last_offset: int
    first_offset: int
    producer_id: int


class AbortedIndex:
    def __init__(self) -> None:
        self._entries: list[AbortedTxn] = []
        self._lasts: list[int] = []

    def add(self, producer_id: int, first_offset: int, last_offset: int) -> None:
        entry = AbortedTxn(last_offset=last_offset, first_offset=first_offset, producer_id=producer_id)
        at = bisect.bisect_right(self._lasts, last_offset)
        self._entries.insert(at, entry)
        self._lasts.insert(at, last_offset)

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, end): last >= start and first < end."""
        at = bisect.bisect_left(self._lasts, start)
        return [entry for entry in self._entries[at:] if entry.first_offset < end]

    def trim_before(self, log_start_offset: int) -> None:
        """Forget transactions wholly below the log start (their records are gone)."""
        at = bisect.bisect_left(self._lasts, log_start_offset)
        if at:
            del self._entries[:at], self._lasts[:at]

    def __len__(self) -> int:
        return len(self._entries)


class AbortedIndexStore:
    """One partition's stored aborted transactions."""

    def __init__(self, metadata: MetadataStore, topic_id: str, partition: int) -> None:
        self._metadata = metadata
        self._path = f"{ROOT}/{topic_id}/{partition}"

    async def save(self, entry: AbortedTxn) -> None:
        await self._metadata.put(f"{self._path}/{entry.last_offset:020d}",
                                 f"{entry.producer_id} {entry.first_offset}".encode())

    async def load(self, log_start_offset: int) -> list[AbortedTxn]:
        """The stored entries still in the log; those wholly below its start are deleted."""
        entries = []
        for name in await self._metadata.children(self._path):
            path = f"{self._path}/{name}"
            if int(name) < log_start_offset:
                try:
                    await self._metadata.delete(path)
                except NoNode:
                    pass
                continue
            node = await self._metadata.get(path)
            if node is None:
                continue
            producer_id, first_offset = (int(part) for part in node.value.decode().split())
            entries.append(AbortedTxn(last_offset=int(name), first_offset=first_offset, producer_id=producer_id))
        return entries

"""The ledger client: create, open (with recovery), read and delete ledgers on a set of bookies.

It speaks to bookies through the EntryStore interface, so the same code drives the in-process bookie
of the embedded default and remote bookies over TCP (storage/bookie/remote.py). Writing and
ensemble changes are in handle.py, recovery in recovery.py, placement in placement.py.

Reads go to a replica of the entry's write set; when it has not answered within
`speculative_read_timeout_s` the next replica is asked too, and the first answer wins (a slow or
paused bookie costs that timeout, not a request timeout). A replica that answers CorruptEntry (its
copy failed its checksum, or it lost part of its journal) is read around, and noted as lacking
entries of that ledger (missing.py), so the auditor copies its share back once the ledger is closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from storage.api import CorruptEntry, EntryStore, MetadataStore, NoNode, NoSuchEntry, NoSuchLedger, StorageError
from storage.ledger.bookies import BookieDirectory, StaticBookies
from storage.ledger.handle import LENGTH as _LENGTH
from storage.ledger.handle import LedgerHandle, ledger_path
from storage.ledger.metadata import LedgerMetadata, LedgerState
from storage.ledger.placement import choose_ensemble
from storage.ledger import missing, recovery

log = logging.getLogger("gateway.storage.ledger")

DEFAULT_SPECULATIVE_READ_TIMEOUT_S = 0.1


class LedgerClient:
    """Creates and opens ledgers on the bookies of a directory (or a fixed mapping of them).

    `ensemble_size`, `write_quorum` and `ack_quorum` are the defaults of `create`; `quorum_for(log
    name)` may give a log's own (per-namespace settings)."""

    def __init__(self, metadata: MetadataStore, bookies: Mapping[str, EntryStore] | BookieDirectory, *,
                 ensemble_size: int = 1, write_quorum: int = 1, ack_quorum: int = 1,
                 min_racks_per_write_quorum: int = 1,
                 quorum_for: Callable[[str], tuple[int, int, int] | None] | None = None,
                 speculative_read_timeout_s: float = DEFAULT_SPECULATIVE_READ_TIMEOUT_S,
                 explicit_lac_s: float = 0.0) -> None:
        """`explicit_lac_s`: how long after its adds complete an idle writer sends its LAC on its
        own (0: never; readers without recovery then see up to the second-to-last entry)."""
        self.metadata = metadata
        self.bookies: BookieDirectory = StaticBookies(bookies) if isinstance(bookies, Mapping) else bookies
        self.default_quorum = (ensemble_size, write_quorum, ack_quorum)
        self.min_racks_per_write_quorum = min_racks_per_write_quorum
        self._quorum_for = quorum_for
        self._speculative_s = speculative_read_timeout_s
        self.explicit_lac_s = explicit_lac_s
        self._noted_damaged: set[tuple[int, str]] = set()     # (ledger, bookie) noted for repair
        self._notes: set[asyncio.Task] = set()

    def bookie(self, bookie_id: str) -> EntryStore:
        return self.bookies.entry_store(bookie_id)

    async def read_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        node = await self.metadata.get(ledger_path(ledger_id))
        if node is None:
            raise NoSuchLedger(str(ledger_id))
        return LedgerMetadata.from_json(node.value), node.version

    async def create(self, *, ensemble_size: int | None = None, write_quorum: int | None = None,
                     ack_quorum: int | None = None, properties: dict[str, str] | None = None) -> LedgerHandle:
        quorum = self.default_quorum
        if self._quorum_for is not None and properties and "log" in properties:
            quorum = self._quorum_for(properties["log"]) or quorum
        e, w, a = (ensemble_size or quorum[0], write_quorum or quorum[1], ack_quorum or quorum[2])
        ensemble = choose_ensemble(e, w, self.bookies.candidates(), min_racks=self.min_racks_per_write_quorum)
        metadata = LedgerMetadata(e, w, a, ((0, ensemble),), properties=dict(properties or {}),
                                  ctime_ms=int(time.time() * 1000))
        ledger_id = await self.metadata.next_id("ledger")
        version = await self.metadata.create(ledger_path(ledger_id), metadata.to_json())
        return LedgerHandle(self, ledger_id, metadata, version, writable=True, lac=-1)

    async def open(self, ledger_id: int, *, recover: bool = True) -> LedgerHandle:
        metadata, version = await self.read_metadata(ledger_id)
        if metadata.state is LedgerState.CLOSED:
            return LedgerHandle(self, ledger_id, metadata, version, writable=False, lac=metadata.last_entry_id,
                                length=metadata.length)
        if not recover:
            lacs = await asyncio.gather(*(self._lac_of(b, ledger_id) for b in metadata.ensembles[-1][1]))
            return LedgerHandle(self, ledger_id, metadata, version, writable=False, lac=max(lacs, default=-1))
        return await recovery.recover(self, ledger_id, metadata, version)

    async def _lac_of(self, bookie_id: str, ledger_id: int) -> int:
        """A replica's LAC; -1 when it has none or cannot answer (the others may)."""
        try:
            return await self.bookie(bookie_id).last_add_confirmed(ledger_id)
        except StorageError:
            return -1

    async def read_entries(self, metadata: LedgerMetadata, ledger_id: int, first: int, last: int,
                           max_bytes: int) -> list[memoryview]:
        """Entries first..last as the writer gave them (the length prefix stripped)."""
        if metadata.ensemble_size != metadata.write_quorum:
            return await self._read_striped(metadata, ledger_id, first, last, max_bytes)
        # Every bookie of a fragment's ensemble holds all its entries: one ranged read per fragment.
        out: list[memoryview] = []
        total = 0
        fragments = metadata.ensembles
        for index, (fragment_first, ensemble) in enumerate(fragments):
            fragment_last = fragments[index + 1][0] - 1 if index + 1 < len(fragments) else last
            start, end = max(first, fragment_first), min(last, fragment_last)
            if start > end:
                continue
            raws = await self._first_answer(ensemble, start, "read_range", ledger_id, start, end, max_bytes - total)
            out.extend(memoryview(raw)[_LENGTH.size:] for raw in raws)
            total += sum(len(raw) for raw in raws)
            if total >= max_bytes or len(raws) < end - start + 1:
                break
        return out

    async def read_scattered(self, metadata: LedgerMetadata, ledger_id: int, entry_ids: list[int]) -> list[memoryview]:
        """The entries named, in that order: one request per set of bookies holding some of them."""
        groups: dict[tuple[str, ...], list[int]] = {}
        for entry_id in entry_ids:
            groups.setdefault(metadata.write_set(entry_id), []).append(entry_id)
        answers = await asyncio.gather(*(self._first_answer(replicas, ids[0], "read_entries", ledger_id, ids)
                                         for replicas, ids in groups.items()))
        found = {entry_id: memoryview(raw)[_LENGTH.size:]
                 for ids, raws in zip(groups.values(), answers) for entry_id, raw in zip(ids, raws)}
        return [found[entry_id] for entry_id in entry_ids]

    async def _read_striped(self, metadata: LedgerMetadata, ledger_id: int, first: int, last: int,
                            max_bytes: int) -> list[memoryview]:
        out: list[memoryview] = []
        total = 0
        for entry_id in range(first, last + 1):
            out.append((await self._read_raw(metadata, ledger_id, entry_id))[_LENGTH.size:])
            total += len(out[-1])
            if total >= max_bytes:
                break
        return out

    async def _read_raw(self, metadata: LedgerMetadata, ledger_id: int, entry_id: int) -> memoryview:
        return memoryview(await self._first_answer(metadata.write_set(entry_id), entry_id, "read",
                                                   ledger_id, entry_id))

    async def _first_answer(self, replicas: tuple[str, ...], spread: int, method: str, *args):
        """Ask one replica (chosen by `spread`, so reads share the load); ask the next one too when it
        fails, or has not answered within the speculative timeout. The first answer wins."""
        if len(replicas) == 1:     # nothing to speculate with (the embedded default)
            return await self._call(replicas[0], method, *args)
        order = [replicas[(spread + i) % len(replicas)] for i in range(len(replicas))]
        error: BaseException = NoSuchEntry(f"ledger {args[0]}: no replica")
        running: dict[asyncio.Future, str] = {}
        try:
            while order or running:
                if order:
                    bookie_id = order.pop(0)
                    running[asyncio.ensure_future(self._call(bookie_id, method, *args))] = bookie_id
                done, _ = await asyncio.wait(running, timeout=self._speculative_s if order else None,
                                             return_when=asyncio.FIRST_COMPLETED)
                for finished in done:
                    bookie_id = running.pop(finished)
                    if finished.exception() is None:
                        return finished.result()
                    error = finished.exception()
                    if isinstance(error, CorruptEntry):
                        self._note_damaged_copy(args[0], bookie_id, error)
        finally:
            for pending in running:
                pending.cancel()
        raise error

    def _note_damaged_copy(self, ledger_id: int, bookie_id: str, error: CorruptEntry) -> None:
        """Once per ledger and replica: the note is a metadata write, made beside the read."""
        if (ledger_id, bookie_id) in self._noted_damaged:
            return
        self._noted_damaged.add((ledger_id, bookie_id))
        log.warning("bookie %s holds a damaged copy of ledger %d (%s): read from another replica, "
                    "noted for repair", bookie_id, ledger_id, error)

        async def note() -> None:
            try:
                await missing.note(self.metadata, ledger_id, bookie_id)
            except StorageError as exc:
                log.warning("could not note bookie %s for repair of ledger %d: %s", bookie_id, ledger_id, exc)
                self._noted_damaged.discard((ledger_id, bookie_id))
        task = asyncio.create_task(note(), name=f"note-damaged-{ledger_id}-{bookie_id}")
        self._notes.add(task)
        task.add_done_callback(self._notes.discard)

    async def _call(self, bookie_id: str, method: str, *args):
        return await getattr(self.bookie(bookie_id), method)(*args)

    async def delete(self, ledger_id: int) -> None:
        """Delete the ledger's metadata and its entries on every bookie that can be reached; a bookie
        that cannot keeps them as garbage."""
        try:
            metadata, _ = await self.read_metadata(ledger_id)
        except NoSuchLedger:
            return
        holders = {bookie_id for _, ensemble in metadata.ensembles for bookie_id in ensemble}
        results = await asyncio.gather(*(self._call(b, "delete_ledger", ledger_id) for b in sorted(holders)),
                                       return_exceptions=True)
        for bookie_id, result in zip(sorted(holders), results):
            if isinstance(result, BaseException):
                log.info("ledger %d: bookie %s did not delete its entries: %s", ledger_id, bookie_id, result)
        try:
            await self.metadata.delete(ledger_path(ledger_id))
        except NoNode:
            pass


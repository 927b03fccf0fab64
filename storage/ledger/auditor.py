"""The auditor: notices lost bookies and brings their ledgers back to Qw copies on the others.

One auditor is active per cluster (every gateway in replicated mode runs one; they contend for the
lease /auditor/lock, storage/metadata/lease.py, and the others stand by). The active one, every
`interval_s`:

1. Reads the bookies of every ledger (a CLOSED ledger's are cached: only this auditor changes them),
   unless the last pass found all well and no bookie has left the registry since.
2. A bookie that holds fragments and is not registered (/bookies-available) is *gone*; the time it
   was first seen gone is kept at /auditor/lost/<bookie id> {"since_ms"}, so a restarted or new
   auditor goes on counting from there. Once gone for longer than `grace_s` it is *lost*. (A bookie
   restarted with a wiped disk is refused by its cookie check and never registers again under its
   id: it is lost like a dead one, and a new bookie on that machine gets a new id.)
3. Every ledger with a fragment on a lost bookie is under-replicated: its marker
   /underreplicated/<ledger id> {"lost": [...]} is written before anything is copied and deleted
   once its metadata no longer names a lost bookie. They make the work list visible and durable: a
   newly active auditor (the lost-since times being kept) finds the same ledgers, finishes them and
   clears the markers that no longer apply.
4. Each CLOSED under-replicated ledger is re-replicated (storage/ledger/rereplication.py), copying
   through one throttle of `bytes_per_s`. OPEN ledgers wait until they are closed.
5. A bookie that a writer noted as possibly lacking entries (/missing-copies, storage/ledger/missing.py)
   gets its share of the closed ledger copied back once it is registered; such ledgers count as
   under-replicated until then.

Wall-clock time is used for "lost since" because it is shared by processes on several machines;
a clock that jumps only shortens or lengthens one grace period.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from storage.api import MetadataStore, NodeExists, NoNode, NotEnoughBookies, StorageError
from storage.ledger import missing
from storage.ledger.metadata import LedgerMetadata, LedgerState
from storage.ledger.rereplication import Outcome, Throttle, refill, rereplicate_ledger
from storage.metadata.lease import Lease

if TYPE_CHECKING:
    from storage.ledger.client import LedgerClient

log = logging.getLogger("gateway.storage.auditor")

LOCK_PATH = "/auditor/lock"
LOST_DIR = "/auditor/lost"
UNDERREPLICATED_DIR = "/underreplicated"
LEDGERS_DIR = "/ledgers"


@dataclass(frozen=True, slots=True)
class AuditorSettings:
    grace_s: float = 30.0          # a bookie unregistered this long is lost
    interval_s: float = 5.0        # how often the ledgers are checked
    bytes_per_s: int = 32 << 20    # re-replication throttle (0: unlimited)


@dataclass(slots=True)
class AuditorStats:
    """What the auditor reports (read by the gateway's metrics at scrape time)."""

    active: bool = False
    lost_bookies: frozenset[str] = frozenset()          # lost, and still named by some ledger
    underreplicated_ledgers: int = 0
    rereplicated_bytes: int = 0
    rereplicated_ledgers: int = 0
    passes: int = 0
    failures: dict[str, int] = field(default_factory=dict)   # why a ledger could not be re-replicated


def _marker_path(ledger_id: int) -> str:
    return f"{UNDERREPLICATED_DIR}/{ledger_id}"


class Auditor:
    def __init__(self, metadata: MetadataStore, client: "LedgerClient", settings: AuditorSettings = AuditorSettings(),
                 *, wall_clock: Callable[[], float] = time.time) -> None:
        self._metadata = metadata
        self._client = client
        self.settings = settings
        self._wall_clock = wall_clock
        self.lease = Lease(metadata, LOCK_PATH, retry_interval_s=min(settings.interval_s, 1.0))
        self.stats = AuditorStats()
        self._throttle = Throttle(settings.bytes_per_s)
        self._closed_ledgers: dict[int, frozenset[str]] = {}   # bookies of CLOSED ledgers
        self._reported: dict[int, str] = {}                    # the last failure logged, per ledger
        self._passes_begun = 0
        self._quiet_live: frozenset[str] | None = None   # the registered bookies at the last pass that found all well
        self._gone_named = True     # after the last pass: does some ledger name a bookie that is not registered?
        self._pass_done = asyncio.Condition()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="auditor")

    async def run(self) -> None:
        """Contend for the auditor lease and audit while holding it. Cancelling this is a crash:
        the lease goes with the metadata session; close() gives it up at once."""
        await self.lease.run(self._audit_forever)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.lease.release()
        self.stats.active = False

    async def wait_until_replicated(self, timeout_s: float) -> None:
        """Wait for a pass, begun after this call, that found no ledger naming an unregistered bookie and
        nothing under-replicated (TimeoutError otherwise). For tests and tools."""
        begun_before = self._passes_begun
        async with self._pass_done:
            await asyncio.wait_for(self._pass_done.wait_for(
                lambda: self.stats.passes > begun_before and not self._gone_named
                and self.stats.underreplicated_ledgers == 0), timeout_s)

    # --- the active auditor -------------------------------------------------------------------

    async def _audit_forever(self) -> None:
        log.info("auditor active: lost-bookie grace %.0f s, re-replication at most %s bytes/s",
                 self.settings.grace_s, self.settings.bytes_per_s or "unlimited")
        self._closed_ledgers.clear()   # another auditor may have changed them meanwhile
        self._quiet_live = None
        self.stats.active = True
        try:
            while True:
                try:
                    await self.audit_once()
                except StorageError as exc:
                    log.warning("audit pass failed: %s", exc)
                await asyncio.sleep(self.settings.interval_s)
        finally:
            self.stats.active = False

    async def audit_once(self) -> None:
        self._passes_begun += 1
        live = frozenset(b.bookie_id for b in self._client.bookies.candidates())
        notes = await missing.noted(self._metadata)
        if not notes and self._quiet_live is not None and live >= self._quiet_live:
            # The last pass found every ledger on registered bookies, and none has left since: new
            # ensembles only take registered bookies, so no ledger can name a missing one now.
            await self._pass_finished(gone_named=False)
            return
        bookies_of = await self._bookies_of_ledgers()
        named = frozenset().union(*bookies_of.values())
        lost = await self._lost_bookies(named - live)
        if lost != self.stats.lost_bookies:
            if lost:
                log.warning("lost bookies (unregistered for over %.0f s): %s", self.settings.grace_s,
                            ", ".join(sorted(lost)))
            self.stats.lost_bookies = lost
        under = sorted(ledger_id for ledger_id, bookies in bookies_of.items() if bookies & lost)
        await self._update_markers(under, lost)
        self.stats.underreplicated_ledgers = len(set(under) | set(notes))
        for ledger_id in under:
            if await self._rereplicate(ledger_id, lost) and ledger_id not in notes:
                self.stats.underreplicated_ledgers -= 1
        for ledger_id, (bookies, version) in sorted(notes.items()):
            if await self._refill(ledger_id, bookies, version, live, bookies_of.get(ledger_id)):
                self.stats.underreplicated_ledgers -= 1
        self._quiet_live = live if not named - live and self.stats.underreplicated_ledgers == 0 else None
        await self._pass_finished(gone_named=bool(named - live))

    async def _pass_finished(self, *, gone_named: bool) -> None:
        self.stats.passes += 1
        async with self._pass_done:
            self._gone_named = gone_named
            self._pass_done.notify_all()

    async def _bookies_of_ledgers(self) -> dict[int, frozenset[str]]:
        found: dict[int, frozenset[str]] = {}
        for name in await self._metadata.children(LEDGERS_DIR):
            ledger_id = int(name)
            cached = self._closed_ledgers.get(ledger_id)
            if cached is not None:
                found[ledger_id] = cached
                continue
            node = await self._metadata.get(f"{LEDGERS_DIR}/{name}")
            if node is None:
                continue
            metadata = LedgerMetadata.from_json(node.value)
            found[ledger_id] = self._remember(ledger_id, metadata)
        for ledger_id in set(self._closed_ledgers) - set(found):
            del self._closed_ledgers[ledger_id]   # deleted
        return found

    def _remember(self, ledger_id: int, metadata: LedgerMetadata) -> frozenset[str]:
        bookies = frozenset(b for _, ensemble in metadata.ensembles for b in ensemble)
        if metadata.state is LedgerState.CLOSED:
            self._closed_ledgers[ledger_id] = bookies
        return bookies

    async def _lost_bookies(self, gone: set[str]) -> frozenset[str]:
        """The gone bookies past their grace period; records when each was first seen gone."""
        now_ms = int(self._wall_clock() * 1000)
        lost = set()
        recorded = set(await self._metadata.children(LOST_DIR))
        for bookie_id in recorded - gone:
            await self._delete_quietly(f"{LOST_DIR}/{bookie_id}")   # registered again, or no longer named
        for bookie_id in gone:
            path = f"{LOST_DIR}/{bookie_id}"
            node = await self._metadata.get(path)
            if node is None:
                log.info("bookie %s is not registered; lost unless it returns within %.0f s", bookie_id,
                         self.settings.grace_s)
                try:
                    await self._metadata.create(path, json.dumps({"since_ms": now_ms}).encode())
                except NodeExists:
                    pass
                since_ms = now_ms
            else:
                since_ms = json.loads(node.value)["since_ms"]
            if now_ms - since_ms >= self.settings.grace_s * 1000:
                lost.add(bookie_id)
        return frozenset(lost)

    async def _update_markers(self, under: list[int], lost: frozenset[str]) -> None:
        """Write a marker for every under-replicated ledger; drop the markers of the others (deleted,
        re-replicated, or their bookie registered again before anything was copied)."""
        marked = {int(name) for name in await self._metadata.children(UNDERREPLICATED_DIR)}
        for ledger_id in marked - set(under):
            await self._delete_quietly(_marker_path(ledger_id))
        for ledger_id in under:
            if ledger_id not in marked:
                log.info("ledger %d is under-replicated", ledger_id)
                try:
                    await self._metadata.create(_marker_path(ledger_id),
                                                json.dumps({"lost": sorted(lost)}).encode())
                except NodeExists:
                    pass

    async def _rereplicate(self, ledger_id: int, lost: frozenset[str]) -> bool:
        """True once the ledger names no lost bookie any more (its marker is then deleted)."""
        try:
            outcome, metadata = await rereplicate_ledger(self._client, ledger_id, set(lost), self._throttle,
                                                         self._count_copied)
        except NotEnoughBookies as exc:
            self._failed("no_replacement", ledger_id, exc)
            return False
        except StorageError as exc:
            self._failed("copy_failed", ledger_id, exc)
            return False
        if outcome is Outcome.NOT_CLOSED:
            return False   # its marker stays: re-replicated once closed
        if outcome is Outcome.REPLICATED:
            self.stats.rereplicated_ledgers += 1
        self._reported.pop(ledger_id, None)
        if metadata is None:
            self._closed_ledgers.pop(ledger_id, None)
        else:
            self._remember(ledger_id, metadata)
        await self._delete_quietly(_marker_path(ledger_id))
        return True

    async def _refill(self, ledger_id: int, noted: frozenset[str], version: int, live: set[str],
                      named: frozenset[str] | None) -> bool:
        """Copy back their share to the noted bookies that are up and still named by the (closed)
        ledger; True once the note is cleared. One that is down waits: back, it is refilled; lost,
        it is replaced and no longer named."""
        if named is None:   # deleted
            await missing.clear(self._metadata, ledger_id, version)
            return True
        if (noted & named) - live:
            return False
        try:
            outcome = await refill(self._client, ledger_id, noted & named, self._throttle, self._count_copied)
        except StorageError as exc:
            self._failed("copy_failed", ledger_id, exc)
            return False
        if outcome is Outcome.NOT_CLOSED:
            return False
        if outcome is Outcome.REPLICATED:
            self.stats.rereplicated_ledgers += 1
        await missing.clear(self._metadata, ledger_id, version)
        return True

    def _count_copied(self, size: int) -> None:
        self.stats.rereplicated_bytes += size

    def _failed(self, reason: str, ledger_id: int, error: Exception) -> None:
        self.stats.failures[reason] = self.stats.failures.get(reason, 0) + 1
        if self._reported.get(ledger_id) != str(error):   # once per ledger and cause, not every pass
            self._reported[ledger_id] = str(error)
            log.warning("ledger %d stays under-replicated for now (retried every pass): %s", ledger_id, error)

    async def _delete_quietly(self, path: str) -> None:
        try:
            await self._metadata.delete(path)
        except NoNode:
            pass

"""Re-replication of one closed ledger: every fragment with a lost bookie gets a replacement, which
receives the entries the lost bookie held; then the metadata says so.

For each fragment whose ensemble holds a lost bookie, placement (storage/ledger/placement.py) picks a
writable bookie not in that ensemble, with the rack rules. The entries of the fragment whose write
set includes the lost position are read from a surviving replica (the next one on a failure or a
hole) and added to the replacement with the RECOVERY flag (a closed ledger may be fenced there).
Only once every fragment is copied is the ledger's metadata changed, by compare-and-set; a lost
compare-and-set reads the ledger again and starts over. Adds of an entry a bookie already has are
idempotent, so starting over (or again after a crash) is safe; what an abandoned attempt copied to a
bookie that did not end up in the metadata is garbage there.

Only CLOSED ledgers are touched: an open ledger's writer changes its own ensemble, and a ledger whose
writer died is recovered and closed by the next open.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from storage.api import BadVersion, BookieUnavailable, NoNode, NoSuchLedger, StorageError
from storage.ledger.handle import ledger_path
from storage.ledger.metadata import LedgerMetadata, LedgerState
from storage.ledger.placement import replace_bookies

if TYPE_CHECKING:
    from storage.ledger.client import LedgerClient

log = logging.getLogger("gateway.storage.ledger.rereplication")

MAX_CHUNK_BYTES = 1 << 20
"""Bytes read from a replica per request at most (and the throttle's largest burst)."""
STRIPED_BATCH = 64
"""Entries read and copied at once when a fragment is striped (E > Qw)."""
MAX_ATTEMPTS = 5


class Outcome(enum.Enum):
    REPLICATED = "replicated"     # fragments copied and the metadata changed
    NOTHING_TO_DO = "nothing"     # no fragment on a lost bookie (any more)
    NOT_CLOSED = "not closed"     # skipped until its writer or a recovery closes it
    DELETED = "deleted"


class Throttle:
    """At most `bytes_per_s` (0: unlimited): in any window of t seconds, at most bytes_per_s * t plus
    one burst (an eighth of a second's worth, at most MAX_CHUNK_BYTES; also the size of a read)."""

    def __init__(self, bytes_per_s: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.bytes_per_s = bytes_per_s
        self.burst_bytes = MAX_CHUNK_BYTES if bytes_per_s <= 0 else max(1, min(MAX_CHUNK_BYTES, bytes_per_s // 8))
        self._clock = clock
        self._sleep = sleep
        self._free_at = -1e18

    async def acquire(self, size: int) -> None:
        if self.bytes_per_s <= 0:
            return
        now = self._clock()
        # Credit for idle time is capped at one burst; the request's own cost is paid in time.
        self._free_at = max(self._free_at, now - self.burst_bytes / self.bytes_per_s) + size / self.bytes_per_s
        if self._free_at > now:
            await self._sleep(self._free_at - now)


def fragment_last(metadata: LedgerMetadata, index: int) -> int:
    fragments = metadata.ensembles
    return fragments[index + 1][0] - 1 if index + 1 < len(fragments) else metadata.last_entry_id


def plan(metadata: LedgerMetadata, lost: set[str], client: "LedgerClient") -> list[tuple[int, tuple[str, ...]]]:
    """(fragment index, its new ensemble) for every fragment holding a lost bookie."""
    candidates = client.bookies.candidates()
    changes = []
    for index, (_first, ensemble) in enumerate(metadata.ensembles):
        failed = lost & set(ensemble)
        if failed:
            changes.append((index, replace_bookies(ensemble, failed, metadata.write_quorum, candidates,
                                                   min_racks=client.min_racks_per_write_quorum)))
    return changes


async def rereplicate_ledger(client: "LedgerClient", ledger_id: int, lost: set[str], throttle: Throttle,
                             on_copied: Callable[[int], None]) -> tuple[Outcome, LedgerMetadata | None]:
    """Bring the ledger back to Qw copies of every entry on bookies that are not lost. Raises
    NotEnoughBookies (no replacement) or StorageError (no replica answered); nothing is changed then."""
    for _attempt in range(MAX_ATTEMPTS):
        try:
            metadata, version = await client.read_metadata(ledger_id)
        except NoSuchLedger:
            return Outcome.DELETED, None
        if metadata.state is not LedgerState.CLOSED:
            return Outcome.NOT_CLOSED, metadata
        changes = plan(metadata, lost, client)
        if not changes:
            return Outcome.NOTHING_TO_DO, metadata
        started = time.monotonic()
        copied = 0
        for index, new_ensemble in changes:
            old_ensemble = metadata.ensembles[index][1]
            targets = {p: new for p, (old, new) in enumerate(zip(old_ensemble, new_ensemble)) if old != new}
            copied += await _copy_fragment(client, metadata, ledger_id, index, targets, lost, throttle, on_copied)
        fragments = list(metadata.ensembles)
        for index, new_ensemble in changes:
            fragments[index] = (fragments[index][0], new_ensemble)
        changed = replace(metadata, ensembles=tuple(fragments))
        try:
            await client.metadata.put(ledger_path(ledger_id), changed.to_json(), version)
        except NoNode:
            return Outcome.DELETED, None
        except BadVersion:
            log.info("ledger %d changed while it was copied; reading it again", ledger_id)
            continue
        log.info("ledger %d re-replicated: %d fragment(s), %d bytes in %.3f s; ensembles now %s", ledger_id,
                 len(changes), copied, time.monotonic() - started,
                 " ".join(f"{first}:{','.join(bookies)}" for first, bookies in changed.ensembles))
        return Outcome.REPLICATED, changed
    raise StorageError(f"ledger {ledger_id}: its metadata kept changing while it was re-replicated")


async def _copy_fragment(client: "LedgerClient", metadata: LedgerMetadata, ledger_id: int, index: int,
                         targets: dict[int, str], exclude: set[str], throttle: Throttle,
                         on_copied: Callable[[int], None]) -> int:
    """Copy to `targets` (ensemble position -> bookie) the entries of fragment `index` stored at
    those positions, read from replicas not in `exclude`."""
    first, ensemble = metadata.ensembles[index]
    last = fragment_last(metadata, index)
    log.info("ledger %d: copying entries %d..%d of %s to %s", ledger_id, first, last,
             ",".join(ensemble[p] for p in targets), ",".join(targets.values()))
    if last < first:
        return 0   # an empty fragment: only the metadata changes
    if metadata.ensemble_size == metadata.write_quorum:
        # Every bookie of the ensemble holds every entry: ranged reads from any survivor.
        survivors = [b for b in ensemble if b not in exclude]
        return await _copy_range(client, metadata, ledger_id, first, last, survivors, list(targets.values()),
                                 throttle, on_copied)
    copied = 0
    size, quorum = metadata.ensemble_size, metadata.write_quorum
    batch: list[tuple[int, list[str], list[str]]] = []
    for entry_id in range(first, last + 1):
        to = [bookie for p, bookie in targets.items() if (p - entry_id) % size < quorum]
        if to:
            survivors = [b for b in metadata.write_set(entry_id) if b not in exclude]
            batch.append((entry_id, survivors, to))
        if len(batch) == STRIPED_BATCH or (entry_id == last and batch):
            sizes = await asyncio.gather(*(_copy_entry(client, metadata, ledger_id, *job, throttle) for job in batch))
            copied += sum(sizes)
            on_copied(sum(sizes))
            batch.clear()
    return copied


async def refill(client: "LedgerClient", ledger_id: int, bookies: frozenset[str], throttle: Throttle,
                 on_copied: Callable[[int], None]) -> Outcome:
    """Copy back to each of `bookies` its share of a CLOSED ledger from the other replicas (it may
    have missed some entries while it failed); the metadata does not change."""
    try:
        metadata, _ = await client.read_metadata(ledger_id)
    except NoSuchLedger:
        return Outcome.DELETED
    if metadata.state is not LedgerState.CLOSED:
        return Outcome.NOT_CLOSED
    copied = 0
    for index, (_first, ensemble) in enumerate(metadata.ensembles):
        targets = {position: bookie for position, bookie in enumerate(ensemble) if bookie in bookies}
        if targets:
            copied += await _copy_fragment(client, metadata, ledger_id, index, targets, set(targets.values()),
                                           throttle, on_copied)
    if not copied:
        return Outcome.NOTHING_TO_DO
    log.info("ledger %d: %d bytes copied back to %s", ledger_id, copied, ",".join(sorted(bookies)))
    return Outcome.REPLICATED


async def _copy_range(client: "LedgerClient", metadata: LedgerMetadata, ledger_id: int, first: int, last: int,
                      survivors: Sequence[str], targets: Sequence[str], throttle: Throttle,
                      on_copied: Callable[[int], None]) -> int:
    copied = 0
    next_entry = first
    while next_entry <= last:
        raws = await _read_from_any(client, survivors, next_entry, "read_range", ledger_id, next_entry, last,
                                    throttle.burst_bytes)
        size = sum(len(raw) for raw in raws) * len(targets)
        await throttle.acquire(size)
        await asyncio.gather(*(client.bookie(target).add(ledger_id, next_entry + offset, raw,
                                                         metadata.last_entry_id, recovery=True)
                               for offset, raw in enumerate(raws) for target in targets))
        next_entry += len(raws)
        copied += size
        on_copied(size)
    return copied


async def _copy_entry(client: "LedgerClient", metadata: LedgerMetadata, ledger_id: int, entry_id: int,
                      survivors: Sequence[str], targets: Sequence[str], throttle: Throttle) -> int:
    raw = await _read_from_any(client, survivors, entry_id, "read", ledger_id, entry_id)
    size = len(raw) * len(targets)
    await throttle.acquire(size)
    await asyncio.gather(*(client.bookie(target).add(ledger_id, entry_id, raw, metadata.last_entry_id,
                                                     recovery=True) for target in targets))
    return size


async def _read_from_any(client: "LedgerClient", survivors: Sequence[str], spread: int, method: str, *args):
    """The first replica that answers, starting at one chosen by `spread` (reads share the load)."""
    errors = []
    for i in range(len(survivors)):
        bookie_id = survivors[(spread + i) % len(survivors)]
        try:
            return await getattr(client.bookie(bookie_id), method)(*args)
        except StorageError as exc:
            errors.append(f"{bookie_id}: {exc}")
    raise BookieUnavailable(f"ledger {args[0]} entry {spread}: no surviving replica could serve it "
                            f"({'; '.join(errors) or 'none left'})")

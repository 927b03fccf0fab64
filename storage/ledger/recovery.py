"""Ledger recovery: fence a ledger whose writer may still be alive, find its real end, and close it.

As BookKeeper does it, with the fix its TLA+ model called for (apache/bookkeeper#2615):

1. Mark the ledger IN_RECOVERY by compare-and-set (the writer's own metadata updates now fail).
2. Fence every bookie of the last fragment. Enough of them must answer: in every write set at least
   Qw - Qa + 1 fenced bookies, so no Qa bookies of any write set can still accept the old writer's
   adds. Fewer answers: recovery fails (BookieUnavailable) and is retried later; guessing an end here
   is how acknowledged entries get truncated.
3. From the highest LAC reported, read forward (a window of entries at a time) with *fencing* reads (a bookie that
   missed step 2 is fenced by the read itself, before it serves it). An entry found on any replica is
   rewritten to its write set (recovery adds pass a fenced bookie) and needs Qa of them to store it.
   The end is the entry before the first one that at least Qw - Qa + 1 of its write set say they do
   not have (then no Qa of them can have acknowledged it); too few answers: recovery fails.
4. Close the ledger at that end by compare-and-set.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from typing import TYPE_CHECKING

from storage.api import BookieUnavailable, LedgerFenced, NoSuchEntry, NoSuchLedger, StorageError
from storage.ledger.handle import LENGTH, LedgerHandle, ledger_path
from storage.ledger.metadata import LedgerMetadata, LedgerState
from storage.ledger.placement import write_sets

if TYPE_CHECKING:
    from storage.ledger.client import LedgerClient

RECOVERY_READ_WINDOW = 64


async def recover(client: "LedgerClient", ledger_id: int, metadata: LedgerMetadata, version: int) -> LedgerHandle:
    recovering = replace(metadata, state=LedgerState.IN_RECOVERY)
    version = await client.metadata.put(ledger_path(ledger_id), recovering.to_json(), version)
    first_of_fragment, ensemble = metadata.ensembles[-1]
    answers = await asyncio.gather(*(_fence(client, b, ledger_id) for b in ensemble), return_exceptions=True)
    fenced = {b for b, answer in zip(ensemble, answers) if not isinstance(answer, BaseException)}
    enough = metadata.write_quorum - metadata.ack_quorum + 1
    for write_set in write_sets(ensemble, metadata.write_quorum):
        if len(fenced & set(write_set)) < enough:
            errors = "; ".join(f"{b}: {a}" for b, a in zip(ensemble, answers) if isinstance(a, BaseException))
            raise BookieUnavailable(f"ledger {ledger_id}: too few bookies fenced to recover it ({errors})")
    lacs = [answer[1] for answer in answers if not isinstance(answer, BaseException)]
    # Entries up to the highest LAC reached a quorum; before the last fragment, every entry did.
    end = max(first_of_fragment - 1, *lacs)
    last_payload: memoryview | None = None
    window = 1
    while True:
        # Read ahead a window of entries at once (it doubles while entries keep being found), then
        # rewrite the ones found, in parallel too: a writer that died with many adds in flight is
        # recovered in a few round trips, not one per entry.
        first = end + 1
        found = await asyncio.gather(*(_read_fenced(client, metadata, ledger_id, entry_id, enough)
                                       for entry_id in range(first, first + window)))
        present = list(itertools.takewhile(lambda raw: raw is not None, found))
        await asyncio.gather(*(_rewrite(client, metadata, ledger_id, first + i, raw) for i, raw in enumerate(present)))
        if present:
            last_payload = present[-1]
            end = first + len(present) - 1
        if len(present) < window:
            break
        window = min(window * 2, RECOVERY_READ_WINDOW)
    if last_payload is None and end >= 0:
        last_payload = await _read_fenced(client, metadata, ledger_id, end, enough)
        if last_payload is None:
            raise StorageError(f"ledger {ledger_id}: entry {end} below the LAC is missing everywhere")
    length = 0 if last_payload is None else LENGTH.unpack_from(last_payload)[0]
    closed = recovering.closed(end, length)
    version = await client.metadata.put(ledger_path(ledger_id), closed.to_json(), version)
    return LedgerHandle(client, ledger_id, closed, version, writable=False, lac=end, length=length)


async def _on(client: "LedgerClient", bookie_id: str, method: str, *args, **kwargs):
    """One call on one bookie; an unknown bookie fails like an unreachable one."""
    return await getattr(client.bookie(bookie_id), method)(*args, **kwargs)


async def _fence(client: "LedgerClient", bookie_id: str, ledger_id: int) -> tuple[int, int]:
    """(last entry stored, LAC) on one bookie after fencing it; a bookie that never saw the ledger
    is fenced all the same and holds nothing."""
    store = client.bookie(bookie_id)
    last_entry_id = await store.fence(ledger_id)
    try:
        lac = await store.last_add_confirmed(ledger_id)
    except NoSuchLedger:
        lac = -1
    return last_entry_id, lac


async def _read_fenced(client: "LedgerClient", metadata: LedgerMetadata, ledger_id: int, entry_id: int,
                       enough: int) -> memoryview | None:
    """The entry from any replica (fencing reads), None if at least `enough` replicas lack it."""
    write_set = metadata.write_set(entry_id)
    reads = [asyncio.ensure_future(_on(client, b, "read", ledger_id, entry_id, fence=True)) for b in write_set]
    missing = 0
    errors: list[str] = []
    try:
        for finished in asyncio.as_completed(reads):
            try:
                return memoryview(await finished)
            except (NoSuchEntry, NoSuchLedger):
                missing += 1
            except StorageError as exc:
                errors.append(str(exc))
    finally:
        for read in reads:
            read.cancel()
    if missing >= enough:
        return None
    raise BookieUnavailable(f"ledger {ledger_id} entry {entry_id}: too few replicas answered ({'; '.join(errors)})")


async def _rewrite(client: "LedgerClient", metadata: LedgerMetadata, ledger_id: int, entry_id: int,
                   raw: memoryview) -> None:
    data = bytes(raw)
    write_set = metadata.write_set(entry_id)
    results = await asyncio.gather(*(_on(client, b, "add", ledger_id, entry_id, data, entry_id - 1, recovery=True)
                                     for b in write_set), return_exceptions=True)
    stored = sum(1 for r in results if not isinstance(r, BaseException))
    if any(isinstance(r, LedgerFenced) for r in results):
        raise LedgerFenced(f"ledger {ledger_id}: a recovery add was refused")
    if stored < metadata.ack_quorum:
        raise BookieUnavailable(f"ledger {ledger_id} entry {entry_id}: recovered on {stored} bookies, "
                                f"need {metadata.ack_quorum}")

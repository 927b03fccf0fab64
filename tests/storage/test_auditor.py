"""Auto-recovery with several real in-process bookies (the fault switches of test_ledger_replication):
a lost bookie's fragments come back to Qw copies on live bookies, after the grace period only, with
open ledgers waiting until closed; a crashed auditor's successor finishes the work and keeps the
lost-since clock; two auditors never both copy; the throttle bounds the bytes copied per window;
readers follow a ledger to its new bookies; an idle log rolls a ledger naming a gone bookie; a bookie
that missed entries while a writer went on without it gets them back."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from storage.api import RetentionPolicy
from storage.ledger.auditor import LOST_DIR, UNDERREPLICATED_DIR, Auditor, AuditorSettings
from storage.ledger.client import LedgerClient
from storage.ledger.handle import LENGTH
from storage.ledger.metadata import LedgerMetadata
from storage.ledger.missing import MISSING_DIR
from storage.ledger.rereplication import Throttle
from storage.managed_log.factory import ManagedLogFactoryImpl
from storage.metadata.sqlite import SqliteMetadataStore
from test_ledger_replication import Cluster, cluster  # noqa: F401 (fixture)

FAST = AuditorSettings(grace_s=0.3, interval_s=0.05, bytes_per_s=0)


async def until(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


@pytest.fixture
async def auditors(cluster: Cluster) -> AsyncIterator[Callable[..., Auditor]]:
    started: list[Auditor] = []

    def start(settings: AuditorSettings = FAST, client: LedgerClient | None = None, **kwargs) -> Auditor:
        client = client or cluster.client()
        auditor = Auditor(client.metadata, client, settings, **kwargs)
        auditor.start()
        started.append(auditor)
        return auditor
    yield start
    for auditor in started:
        await auditor.close()


async def write_ledger(client: LedgerClient, entries: int, *, size: int = 100, e: int = 3, w: int = 3,
                       a: int = 2, close: bool = True):
    writer = await client.create(ensemble_size=e, write_quorum=w, ack_quorum=a)
    payloads = [(b"%d:%d:" % (writer.ledger_id, i)).ljust(size, b"x") for i in range(entries)]
    await asyncio.gather(*(writer.add(p) for p in payloads))
    if close:
        await writer.close()
    return writer, payloads


async def assert_fully_replicated(cluster: Cluster, client: LedgerClient, ledger_id: int, payloads: list[bytes],
                                  lost: str) -> LedgerMetadata:
    metadata, _ = await client.read_metadata(ledger_id)
    assert all(lost not in ensemble for _, ensemble in metadata.ensembles)
    for entry_id in range(len(payloads)):
        write_set = set(metadata.write_set(entry_id))
        assert len(write_set) == metadata.write_quorum
        # A writer's own third copy may still be in flight; a missing copy never arrives.
        await until(lambda ws=write_set, e=entry_id: ws <= cluster.holders(ledger_id, e), 10)
        for bookie_id in write_set:   # the copy is the stored entry, length header included
            raw = await cluster.bookies[bookie_id].bookie.read(ledger_id, entry_id)
            assert raw[LENGTH.size:] == payloads[entry_id]
    reader = await client.open(ledger_id)
    assert [bytes(e) for e in await reader.read(0, len(payloads) - 1)] == payloads
    return metadata


def holding(*writers) -> str:
    """A bookie in the ensemble of every one of these ledgers."""
    common = set.intersection(*(set(w.metadata.ensembles[0][1]) for w in writers))
    return sorted(common)[0]


async def test_a_lost_bookie_is_replaced_after_its_grace_period_and_every_entry_has_qw_copies_again(
        cluster: Cluster, auditors) -> None:
    client = cluster.client()
    full, full_payloads = await write_ledger(client, 40)
    striped, striped_payloads = await write_ledger(client, 41, e=4, w=2, a=2)
    victim = holding(full, striped)
    cluster.kill(victim)
    auditor = auditors(AuditorSettings(grace_s=1.0, interval_s=0.05, bytes_per_s=0))
    await until(lambda: auditor.stats.passes >= 1)
    # Not lost yet: the grace period only started.
    assert auditor.stats.rereplicated_bytes == 0 and not auditor.stats.lost_bookies
    assert await client.metadata.children(LOST_DIR) == [victim]
    await auditor.wait_until_replicated(30)
    for writer, payloads in ((full, full_payloads), (striped, striped_payloads)):
        await assert_fully_replicated(cluster, client, writer.ledger_id, payloads, victim)
    # E = Qw: every entry of the full ledger copied once; striped: the victim's share of entries.
    striped_share = sum(len(p) + LENGTH.size for i, p in enumerate(striped_payloads)
                        if victim in striped.metadata.write_set(i))
    assert auditor.stats.rereplicated_bytes == sum(len(p) + LENGTH.size for p in full_payloads) + striped_share
    assert auditor.stats.rereplicated_ledgers == 2 and auditor.stats.underreplicated_ledgers == 0
    assert await client.metadata.children(UNDERREPLICATED_DIR) == []
    assert await client.metadata.children(LOST_DIR) == []


async def test_an_open_ledger_is_marked_and_waits_until_its_writer_closes_it(cluster: Cluster, auditors) -> None:
    client = cluster.client()
    writer, payloads = await write_ledger(client, 10, close=False)
    victim = writer.metadata.ensembles[0][1][0]
    cluster.kill(victim)
    more = [b"after %d" % i for i in range(10)]
    await asyncio.gather(*(writer.add(p) for p in more))   # the writer's own ensemble change
    auditor = auditors()
    await until(lambda: auditor.stats.lost_bookies == {victim})
    seen = auditor.stats.passes   # the pass that found the bookie lost may still be writing its markers
    await until(lambda: auditor.stats.passes >= seen + 2)
    assert await client.metadata.children(UNDERREPLICATED_DIR) == [str(writer.ledger_id)]
    assert await client.metadata.children(MISSING_DIR) == [str(writer.ledger_id)]   # the writer's note
    assert auditor.stats.rereplicated_bytes == 0 and auditor.stats.underreplicated_ledgers == 1
    await writer.close()
    await auditor.wait_until_replicated(30)
    await assert_fully_replicated(cluster, client, writer.ledger_id, payloads + more, victim)


async def test_without_a_replacement_the_ledger_stays_marked_until_a_bookie_is_there(
        cluster: Cluster, auditors) -> None:
    client = cluster.client()
    writer, payloads = await write_ledger(client, 10)
    ensemble = writer.metadata.ensembles[0][1]
    spares = sorted(set(cluster.bookies) - set(ensemble))
    for bookie_id in spares:
        cluster.directory.down.add(bookie_id)   # up, but not registered: no candidate
    cluster.kill(ensemble[0])
    auditor = auditors()
    await until(lambda: auditor.stats.failures.get("no_replacement", 0) >= 2)
    assert auditor.stats.underreplicated_ledgers == 1 and auditor.stats.rereplicated_bytes == 0
    cluster.directory.down.discard(spares[0])
    await auditor.wait_until_replicated(30)
    metadata = await assert_fully_replicated(cluster, client, writer.ledger_id, payloads, ensemble[0])
    assert spares[0] in metadata.ensembles[0][1]


async def test_a_deleted_ledger_is_skipped(cluster: Cluster, auditors) -> None:
    client = cluster.client()
    writer, _ = await write_ledger(client, 5)
    kept, kept_payloads = await write_ledger(client, 5)
    victim = holding(writer, kept)
    cluster.kill(victim)
    await client.delete(writer.ledger_id)
    auditor = auditors()
    await auditor.wait_until_replicated(30)
    await assert_fully_replicated(cluster, client, kept.ledger_id, kept_payloads, victim)
    assert auditor.stats.rereplicated_ledgers == 1


async def test_a_crashed_auditor_is_succeeded_by_one_that_finishes_and_keeps_the_lost_clock(
        cluster: Cluster, tmp_path: Path) -> None:
    client = cluster.client()
    writer, payloads = await write_ledger(client, 60, size=4000)
    victim = holding(writer)
    cluster.kill(victim)
    slow = Auditor(client.metadata, client, AuditorSettings(grace_s=0.2, interval_s=0.05, bytes_per_s=40_000))
    crashed = asyncio.create_task(slow.run())
    await until(lambda: slow.stats.rereplicated_bytes > 0)
    crashed.cancel()   # dies mid-copy: nothing is released
    await asyncio.gather(crashed, return_exceptions=True)
    total = sum(len(p) + LENGTH.size for p in payloads)
    assert 0 < slow.stats.rereplicated_bytes < total
    assert await client.metadata.children(UNDERREPLICATED_DIR) == [str(writer.ledger_id)]
    assert json.loads((await client.metadata.get(f"{LOST_DIR}/{victim}")).value)["since_ms"] <= time.time() * 1000

    # The successor runs in another "process": a second store on the same database, whose opening
    # ends the dead one's session (and its lease). Its grace period is an hour and its clock an
    # hour ahead: it can only go on at once if it kept the crashed auditor's lost-since time.
    successor_store = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    try:
        successor_client = LedgerClient(successor_store, cluster.directory)
        successor = Auditor(successor_store, successor_client,
                            AuditorSettings(grace_s=3600, interval_s=0.05, bytes_per_s=0),
                            wall_clock=lambda: time.time() + 3600)
        successor.start()
        try:
            await until(lambda: successor.stats.passes >= 1)
            assert successor.stats.lost_bookies == {victim}
            await successor.wait_until_replicated(30)
        finally:
            await successor.close()
        await assert_fully_replicated(cluster, successor_client, writer.ledger_id, payloads, victim)
        assert await successor_store.children(UNDERREPLICATED_DIR) == []
        assert await successor_store.get(f"{LOST_DIR}/{victim}") is None
    finally:
        await successor_store.close()


async def test_of_two_auditors_only_the_lease_holder_copies_and_the_other_takes_over(
        cluster: Cluster, auditors) -> None:
    client = cluster.client()
    first_ledger, first_payloads = await write_ledger(client, 20)
    first = auditors()
    await until(lambda: first.stats.active)
    second = auditors()
    victim = holding(first_ledger)
    cluster.kill(victim)
    await first.wait_until_replicated(30)
    await assert_fully_replicated(cluster, client, first_ledger.ledger_id, first_payloads, victim)
    assert first.stats.rereplicated_bytes > 0
    assert not second.stats.active and second.stats.passes == 0 and second.stats.rereplicated_bytes == 0

    await first.close()   # gives the lease up: the stand-by takes over
    await until(lambda: second.stats.active)
    ledger, payloads = await write_ledger(client, 20)
    victim = holding(ledger)
    cluster.kill(victim)
    await second.wait_until_replicated(30)
    await assert_fully_replicated(cluster, client, ledger.ledger_id, payloads, victim)
    assert second.stats.rereplicated_bytes > 0


async def test_the_throttle_bounds_the_bytes_copied_in_every_window(cluster: Cluster, auditors) -> None:
    client = cluster.client()
    writer, payloads = await write_ledger(client, 48, size=4000)
    victim = holding(writer)
    copies: list[tuple[float, int]] = []
    loop = asyncio.get_running_loop()
    for faulty in cluster.bookies.values():
        def recording(ledger_id, entry_id, payload, lac, *, recovery=False, _add=faulty.add):
            if recovery:
                copies.append((loop.time(), len(payload)))
            return _add(ledger_id, entry_id, payload, lac, recovery=recovery)
        faulty.add = recording
    cluster.kill(victim)
    rate = 64_000
    auditor = auditors(AuditorSettings(grace_s=0.1, interval_s=0.05, bytes_per_s=rate))
    await auditor.wait_until_replicated(60)
    await assert_fully_replicated(cluster, client, writer.ledger_id, payloads, victim)
    total = sum(size for _, size in copies)
    assert total == sum(len(p) + LENGTH.size for p in payloads) == auditor.stats.rereplicated_bytes
    # A window may open with one burst, a read may pass the burst by one entry, and a copy released
    # late by a busy machine lets the next ones catch up: half a second of slack for that.
    window_s = 1.0
    allowed = rate * (window_s + 0.5) + rate // 8 + 4100
    assert allowed < total
    for start, _ in copies:
        in_window = sum(size for at, size in copies if start <= at < start + window_s)
        assert in_window <= allowed, f"{in_window} bytes copied within {window_s} s from {start}"


async def test_the_throttle_paces_requests_by_their_size() -> None:
    now = [100.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds
    throttle = Throttle(8000, clock=lambda: now[0], sleep=sleep)
    assert throttle.burst_bytes == 1000
    await throttle.acquire(1000)       # the opening burst
    assert slept == []
    for _ in range(8):
        await throttle.acquire(1000)
    assert sum(slept) == pytest.approx(1.0)   # 8000 more bytes: one second
    now[0] += 60                        # idle time earns one burst, no more
    slept.clear()
    await throttle.acquire(1000)
    await throttle.acquire(1000)
    assert slept == [pytest.approx(0.125)]
    assert Throttle(0).bytes_per_s == 0
    await Throttle(0).acquire(1 << 30)  # unlimited: never waits


async def test_a_reader_opened_before_the_copy_follows_the_ledger_to_its_new_bookie(
        cluster: Cluster, auditors) -> None:
    client = cluster.client()
    writer, payloads = await write_ledger(client, 10)
    reader = await client.open(writer.ledger_id)   # kept open, as a log keeps its readers
    victim = holding(writer)
    cluster.kill(victim)
    auditor = auditors()
    await auditor.wait_until_replicated(30)
    for bookie_id in set(writer.metadata.ensembles[0][1]) - {victim}:
        cluster.kill(bookie_id)   # only the new bookie is left with the entries
    assert [bytes(e) for e in await reader.read(0, 9)] == payloads


async def test_an_idle_log_rolls_a_ledger_naming_a_gone_bookie_so_it_can_be_re_replicated(
        cluster: Cluster, auditors) -> None:
    client = cluster.client(ensemble_size=3, write_quorum=3, ack_quorum=2)
    logs = ManagedLogFactoryImpl(client, cluster.metadata)
    log = await logs.open_log("t/n/idle/0", RetentionPolicy())
    payloads = [b"record %d" % i for i in range(10)]
    for offset, payload in enumerate(payloads):
        assert await log.append(payload, 1, offset) == offset
    first_ledger = log._writer.ledger_id
    victim = holding(log._writer)
    cluster.kill(victim)
    await log.trim(RetentionPolicy(), 0)   # the periodic retention pass of an idle log
    await until(lambda: log._writer is not None and log._writer.ledger_id != first_ledger)
    assert victim not in log._writer.metadata.ensembles[0][1]
    auditor = auditors()
    await auditor.wait_until_replicated(30)
    assert victim not in {b for _, e in (await client.read_metadata(first_ledger))[0].ensembles for b in e}
    assert [bytes(e.payload) for e in await log.read(0, 1 << 20)] == payloads

    empty_ledger = log._writer.ledger_id     # the new ledger holds nothing yet: rolled, it is deleted
    cluster.kill(holding(log._writer))
    await log.trim(RetentionPolicy(), 0)
    await until(lambda: log._writer is not None and log._writer.ledger_id != empty_ledger)
    assert await client.metadata.get(f"/ledgers/{empty_ledger}") is None
    await log.close()


async def test_a_bookie_the_writer_went_on_without_gets_the_entries_it_missed_once_back(
        cluster: Cluster, auditors) -> None:
    client = cluster.client()
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    ensemble = writer.metadata.ensembles[0][1]
    for bookie_id in set(cluster.bookies) - set(ensemble):
        cluster.directory.down.add(bookie_id)   # no spare: the writer goes on with two of three
    payloads = [b"before %d" % i for i in range(5)]
    await asyncio.gather(*(writer.add(p) for p in payloads))
    absent = ensemble[0]
    cluster.kill(absent)
    missed = [b"missed %d" % i for i in range(20)]
    await asyncio.gather(*(writer.add(p) for p in missed))
    cluster.bookies[absent].mode = "up"        # back, with a hole where the missed entries are
    cluster.directory.down.discard(absent)
    await writer.close()
    assert writer.metadata.ensembles == ((0, ensemble),)
    assert absent not in cluster.holders(writer.ledger_id, 10)
    auditor = auditors()
    await auditor.wait_until_replicated(30)
    await assert_fully_replicated(cluster, client, writer.ledger_id, payloads + missed, "")
    assert await client.metadata.children(MISSING_DIR) == []
    assert auditor.stats.rereplicated_bytes >= sum(len(p) + LENGTH.size for p in missed)

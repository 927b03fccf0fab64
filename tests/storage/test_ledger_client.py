"""LedgerClient over one real Bookie: pipelined in-order writes, reads, close, recovery with fencing
(a single writer survives), read-only opens, deletion; and LedgerMetadata striping and validation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage.api import LedgerClosed, LedgerFenced, NoSuchEntry, NoSuchLedger, NotEnoughBookies
from storage.bookie.bookie import Bookie
from storage.config import StorageConfig
from storage.ledger.client import LedgerClient
from storage.ledger.metadata import LedgerMetadata, LedgerState
from storage.metadata.sqlite import SqliteMetadataStore


@dataclass
class Env:
    metadata: SqliteMetadataStore
    bookie: Bookie
    client: LedgerClient


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    metadata = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    try:
        bookie = await Bookie.open(tmp_path / "bookie", StorageConfig(), metadata)
        try:
            yield Env(metadata, bookie, LedgerClient(metadata, {"local": bookie}))
        finally:
            await bookie.close()
    finally:
        await metadata.close()


def payload(i: int) -> bytes:
    return f"entry-{i}-".encode() * (1 + i % 7)


async def stored_metadata(env: Env, ledger_id: int) -> LedgerMetadata:
    metadata, _ = await env.client.read_metadata(ledger_id)
    return metadata


async def write_sequentially(writer, count: int) -> None:
    for i in range(count):
        assert await writer.add(payload(i)) == i


# --- writing, reading, closing --------------------------------------------------------------------


async def test_pipelined_adds_complete_in_entry_order_and_read_back_exactly(env: Env) -> None:
    writer = await env.client.create()
    completed: list[int] = []
    futures = [writer.add(payload(i)) for i in range(500)]  # all issued before any is awaited
    for future in futures:
        future.add_done_callback(lambda f: completed.append(f.result()))
    assert await asyncio.gather(*futures) == list(range(500))
    assert completed == list(range(500))
    assert writer.last_add_confirmed == 499
    assert [bytes(p) for p in await writer.read(0, 499)] == [payload(i) for i in range(500)]


async def test_close_marks_the_metadata_closed_with_last_entry_id_and_length(env: Env) -> None:
    writer = await env.client.create(properties={"owner": "test"})
    assert (await stored_metadata(env, writer.ledger_id)).state is LedgerState.OPEN
    await asyncio.gather(*(writer.add(payload(i)) for i in range(50)))
    assert await writer.close() == 49
    metadata = await stored_metadata(env, writer.ledger_id)
    assert metadata.state is LedgerState.CLOSED
    assert metadata.last_entry_id == 49
    assert metadata.length == sum(len(payload(i)) for i in range(50))
    assert metadata.properties == {"owner": "test"}
    assert writer.is_closed
    assert await writer.close() == 49  # idempotent


async def test_close_waits_for_pending_adds(env: Env) -> None:
    writer = await env.client.create()
    futures = [writer.add(payload(i)) for i in range(100)]
    assert await writer.close() == 99
    assert all(f.done() and f.result() == i for i, f in enumerate(futures))
    assert (await stored_metadata(env, writer.ledger_id)).last_entry_id == 99


async def test_add_after_close_raises_ledger_closed(env: Env) -> None:
    writer = await env.client.create()
    await writer.add(b"x")
    await writer.close()
    with pytest.raises(LedgerClosed, match=f"ledger {writer.ledger_id} is closed"):
        await writer.add(b"too late")


async def test_closing_an_empty_ledger_records_last_entry_minus_one(env: Env) -> None:
    writer = await env.client.create()
    assert await writer.close() == -1
    metadata = await stored_metadata(env, writer.ledger_id)
    assert (metadata.state, metadata.last_entry_id, metadata.length) == (LedgerState.CLOSED, -1, 0)
    reader = await env.client.open(writer.ledger_id)
    assert await reader.read(0, 10) == []


async def test_read_is_bounded_by_the_lac_and_by_max_bytes(env: Env) -> None:
    writer = await env.client.create()
    await write_sequentially(writer, 10)
    assert [bytes(p) for p in await writer.read(5, 100)] == [payload(i) for i in range(5, 10)]
    assert [bytes(p) for p in await writer.read(3, 9, max_bytes=1)] == [payload(3)]
    limited = await writer.read(0, 9, max_bytes=sum(len(payload(i)) for i in range(3)))
    assert 1 <= len(limited) <= 3
    assert [bytes(p) for p in limited] == [payload(i) for i in range(len(limited))]
    assert await writer.read(10, 20) == []


async def test_ledger_ids_are_distinct(env: Env) -> None:
    writers = [await env.client.create() for _ in range(5)]
    assert len({w.ledger_id for w in writers}) == 5


async def test_create_with_more_bookies_than_available_raises_not_enough_bookies(env: Env) -> None:
    with pytest.raises(NotEnoughBookies, match="need 3 writable bookies, have 1"):
        await env.client.create(ensemble_size=3, write_quorum=2, ack_quorum=2)


# --- recovery and fencing -------------------------------------------------------------------------


async def test_recovery_open_closes_the_ledger_at_the_last_written_entry(env: Env) -> None:
    writer = await env.client.create()
    await write_sequentially(writer, 10)
    reader = await env.client.open(writer.ledger_id, recover=True)
    assert reader.last_add_confirmed == 9
    assert reader.metadata.state is LedgerState.CLOSED
    stored = await stored_metadata(env, writer.ledger_id)
    assert (stored.state, stored.last_entry_id) == (LedgerState.CLOSED, 9)
    assert stored.length == reader.length == sum(len(payload(i)) for i in range(10))
    assert [bytes(p) for p in await reader.read(0, 9)] == [payload(i) for i in range(10)]


async def test_first_writer_cannot_add_or_commit_after_second_writer_recovers_and_closes(env: Env) -> None:
    writer = await env.client.create()
    await write_sequentially(writer, 10)
    recovered = await env.client.open(writer.ledger_id, recover=True)
    assert recovered.last_add_confirmed == 9
    with pytest.raises(LedgerFenced, match="fenced"):
        await writer.add(b"after the fence")
    with pytest.raises(LedgerFenced, match="recovered by another client"):
        await writer.close()
    stored = await stored_metadata(env, writer.ledger_id)
    assert (stored.state, stored.last_entry_id) == (LedgerState.CLOSED, 9)
    with pytest.raises(NoSuchEntry):
        await env.bookie.read(writer.ledger_id, 10)


async def test_pipelined_adds_racing_a_recovery_never_extend_the_closed_ledger(env: Env) -> None:
    writer = await env.client.create()
    await write_sequentially(writer, 5)
    recovered = await env.client.open(writer.ledger_id, recover=True)
    late = [writer.add(payload(i)) for i in range(5, 25)]
    results = await asyncio.gather(*late, return_exceptions=True)
    assert all(isinstance(r, LedgerFenced) for r in results)
    assert recovered.last_add_confirmed == 4
    assert (await stored_metadata(env, writer.ledger_id)).last_entry_id == 4


async def test_recovery_of_an_empty_open_ledger_closes_it_empty(env: Env) -> None:
    writer = await env.client.create()
    reader = await env.client.open(writer.ledger_id, recover=True)
    assert reader.last_add_confirmed == -1
    stored = await stored_metadata(env, writer.ledger_id)
    assert (stored.state, stored.last_entry_id, stored.length) == (LedgerState.CLOSED, -1, 0)
    with pytest.raises(LedgerFenced):
        await writer.add(b"x")


async def test_recovery_is_repeatable_and_gives_the_same_answer(env: Env) -> None:
    writer = await env.client.create()
    await write_sequentially(writer, 3)
    first = await env.client.open(writer.ledger_id, recover=True)
    second = await env.client.open(writer.ledger_id, recover=True)
    assert first.last_add_confirmed == second.last_add_confirmed == 2
    assert first.length == second.length


# --- read-only opens ------------------------------------------------------------------------------


async def test_open_without_recovery_reports_the_bookie_lac_and_reads_up_to_it(env: Env) -> None:
    writer = await env.client.create()
    await write_sequentially(writer, 5)
    reader = await env.client.open(writer.ledger_id, recover=False)
    # The bookie knows the LAC piggybacked on the last add: entry 3.
    assert reader.last_add_confirmed == 3
    assert [bytes(p) for p in await reader.read(0, 100)] == [payload(i) for i in range(4)]
    # Not fenced, not closed: the writer goes on.
    assert (await stored_metadata(env, writer.ledger_id)).state is LedgerState.OPEN
    assert await writer.add(payload(5)) == 5
    assert (await env.client.open(writer.ledger_id, recover=False)).last_add_confirmed == 4


async def test_open_without_recovery_of_an_empty_open_ledger_reports_lac_minus_one(env: Env) -> None:
    writer = await env.client.create()
    reader = await env.client.open(writer.ledger_id, recover=False)
    assert reader.last_add_confirmed == -1
    assert await reader.read(0, 10) == []
    assert await writer.add(b"still writable") == 0


async def test_open_of_a_closed_ledger_reads_everything(env: Env) -> None:
    writer = await env.client.create()
    await write_sequentially(writer, 20)
    await writer.close()
    for recover in (True, False):
        reader = await env.client.open(writer.ledger_id, recover=recover)
        assert reader.last_add_confirmed == 19
        assert reader.metadata.state is LedgerState.CLOSED
        assert [bytes(p) for p in await reader.read(0, 19)] == [payload(i) for i in range(20)]
        with pytest.raises(LedgerClosed):
            await reader.add(b"readers cannot write")


async def test_open_of_an_unknown_ledger_raises_no_such_ledger(env: Env) -> None:
    with pytest.raises(NoSuchLedger, match="12345"):
        await env.client.open(12345)


# --- delete ---------------------------------------------------------------------------------------


async def test_delete_removes_metadata_and_entries(env: Env) -> None:
    writer = await env.client.create()
    await write_sequentially(writer, 4)
    await writer.close()
    keep = await env.client.create()
    await keep.add(b"kept")
    await env.client.delete(writer.ledger_id)
    assert await env.metadata.get(f"/ledgers/{writer.ledger_id}") is None
    with pytest.raises(NoSuchLedger):
        await env.client.open(writer.ledger_id)
    with pytest.raises(NoSuchLedger):
        await env.client.read_metadata(writer.ledger_id)
    with pytest.raises(NoSuchEntry):
        await env.bookie.read(writer.ledger_id, 0)
    await env.client.delete(writer.ledger_id)  # idempotent
    assert [bytes(p) for p in await keep.read(0, 0)] == [b"kept"]


# --- LedgerMetadata -------------------------------------------------------------------------------


def metadata_of(ensemble_size: int, write_quorum: int, ack_quorum: int, **kwargs) -> LedgerMetadata:
    bookies = tuple(f"b{i}" for i in range(ensemble_size))
    return LedgerMetadata(ensemble_size, write_quorum, ack_quorum, ((0, bookies),), **kwargs)


@pytest.mark.parametrize(("entry_id", "expected"), [
    (0, ("b0", "b1")), (1, ("b1", "b2")), (2, ("b2", "b0")), (3, ("b0", "b1")), (3001, ("b1", "b2")),
])
def test_write_set_stripes_qw_bookies_over_the_ensemble(entry_id: int, expected: tuple[str, ...]) -> None:
    assert metadata_of(3, 2, 2).write_set(entry_id) == expected


def test_write_set_with_e_equal_qw_is_every_bookie_rotated() -> None:
    metadata = metadata_of(3, 3, 2)
    assert metadata.write_set(0) == ("b0", "b1", "b2")
    assert metadata.write_set(1) == ("b1", "b2", "b0")


def test_ensemble_for_picks_the_fragment_holding_the_entry() -> None:
    metadata = LedgerMetadata(2, 2, 1, ((0, ("a", "b")), (10, ("c", "d")), (25, ("e", "f"))))
    assert metadata.ensemble_for(0) == ("a", "b")
    assert metadata.ensemble_for(9) == ("a", "b")
    assert metadata.ensemble_for(10) == ("c", "d")
    assert metadata.ensemble_for(24) == ("c", "d")
    assert metadata.ensemble_for(1000) == ("e", "f")
    assert metadata.write_set(11) == ("d", "c")


def test_metadata_json_round_trip_keeps_every_field() -> None:
    original = LedgerMetadata(3, 2, 1, ((0, ("b0", "b1", "b2")), (7, ("b0", "b3", "b2"))),
                              state=LedgerState.IN_RECOVERY, last_entry_id=41, length=9000,
                              properties={"log": "orders-0", "k": "v"}, ctime_ms=1_700_000_000_000)
    decoded = LedgerMetadata.from_json(original.to_json())
    assert decoded == original
    assert decoded.state is LedgerState.IN_RECOVERY
    assert isinstance(decoded.ensembles[1][1], tuple)


def test_closed_copy_sets_state_last_entry_and_length_only() -> None:
    open_metadata = metadata_of(1, 1, 1, properties={"a": "b"})
    closed = open_metadata.closed(5, 123)
    assert (closed.state, closed.last_entry_id, closed.length) == (LedgerState.CLOSED, 5, 123)
    assert open_metadata.state is LedgerState.OPEN
    assert closed.ensembles == open_metadata.ensembles and closed.properties == {"a": "b"}


@pytest.mark.parametrize(("e", "qw", "qa"), [(2, 3, 1), (3, 2, 3), (3, 3, 4), (3, 2, 0), (0, 0, 0), (1, 1, -1)])
def test_metadata_requires_ensemble_at_least_write_quorum_at_least_ack_quorum_at_least_one(
        e: int, qw: int, qa: int) -> None:
    with pytest.raises(ValueError, match="need ensemble >= write quorum >= ack quorum >= 1"):
        LedgerMetadata(e, qw, qa, ((0, tuple(f"b{i}" for i in range(max(e, 1)))),))


@pytest.mark.parametrize(("e", "qw", "qa"), [(1, 1, 1), (3, 2, 2), (3, 3, 1), (5, 3, 2)])
def test_metadata_accepts_valid_quorums(e: int, qw: int, qa: int) -> None:
    assert metadata_of(e, qw, qa).write_quorum == qw

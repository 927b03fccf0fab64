"""The ledger client over several real bookies (in-process, each on its own directory, one SQLite
metadata store): striping, ack quorums, ensemble change when a bookie dies or stalls, fenced
recovery that refuses to guess, rack-aware placement and speculative reads.

Faults are injected by `Faulty`, a pass-through in front of a real Bookie that can be switched to
refuse everything (a dead bookie), to hold every call (a paused one) or to be slow."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage.api import BookieUnavailable, CorruptEntry, LedgerFenced, NotEnoughBookies
from storage.bookie import journal_format as fmt
from storage.bookie.bookie import Bookie
from storage.config import StorageConfig
from storage.ledger.bookies import StaticBookies
from storage.ledger import missing
from storage.ledger.client import LedgerClient
from storage.ledger.metadata import LedgerState
from storage.ledger.rereplication import Outcome, Throttle, refill
from storage.ledger.placement import BookieInfo, choose_ensemble, replace_bookies, write_sets
from storage.metadata.sqlite import SqliteMetadataStore


class Faulty:
    """A real bookie behind a switch: "up", "dead" (every call fails at once), "paused" (calls hang
    until resumed), or "slow" (reads answer after `delay_s`)."""

    def __init__(self, bookie: Bookie) -> None:
        self.bookie = bookie
        self.mode = "up"
        self.delay_s = 0.0
        self._resumed = asyncio.Event()
        self.adds = 0

    def pause(self) -> None:
        self.mode = "paused"
        self._resumed.clear()

    def resume(self) -> None:
        self.mode = "up"
        self._resumed.set()

    def time_out(self) -> None:
        """Calls held by a pause fail, as the requests' deadlines would make them."""
        self.mode = "dead"
        self._resumed.set()

    async def _gate(self) -> None:
        if self.mode == "dead":
            raise BookieUnavailable("bookie is dead")
        if self.mode == "paused":
            await self._resumed.wait()
            if self.mode == "dead":
                raise BookieUnavailable("bookie timed out")

    def add(self, ledger_id, entry_id, payload, lac, *, recovery=False):
        self.adds += 1
        if self.mode == "up":
            return self.bookie.add(ledger_id, entry_id, payload, lac, recovery=recovery)

        async def later():
            await self._gate()
            return await self.bookie.add(ledger_id, entry_id, payload, lac, recovery=recovery)
        return asyncio.ensure_future(later())

    async def read(self, ledger_id, entry_id, *, fence=False):
        await self._gate()
        if self.mode == "slow":
            await asyncio.sleep(self.delay_s)
        return await self.bookie.read(ledger_id, entry_id, fence=fence)

    async def read_range(self, *args):
        await self._gate()
        if self.mode == "slow":
            await asyncio.sleep(self.delay_s)
        return await self.bookie.read_range(*args)

    async def read_entries(self, *args):
        await self._gate()
        if self.mode == "slow":
            await asyncio.sleep(self.delay_s)
        return await self.bookie.read_entries(*args)

    async def fence(self, ledger_id):
        await self._gate()
        return await self.bookie.fence(ledger_id)

    async def last_add_confirmed(self, ledger_id):
        await self._gate()
        return await self.bookie.last_add_confirmed(ledger_id)

    async def wait_lac(self, *args):
        await self._gate()
        return await self.bookie.wait_lac(*args)

    async def write_lac(self, ledger_id, lac):
        await self._gate()
        return await self.bookie.write_lac(ledger_id, lac)

    async def delete_ledger(self, ledger_id):
        await self._gate()
        return await self.bookie.delete_ledger(ledger_id)


@dataclass
class Cluster:
    metadata: SqliteMetadataStore
    bookies: dict[str, Faulty]
    directory: StaticBookies

    def client(self, **kwargs) -> LedgerClient:
        return LedgerClient(self.metadata, self.directory, **kwargs)

    def kill(self, bookie_id: str) -> None:
        self.bookies[bookie_id].mode = "dead"
        self.directory.down.add(bookie_id)

    def holders(self, ledger_id: int, entry_id: int) -> set[str]:
        return {b for b, f in self.bookies.items()
                if f.bookie._index.locate(ledger_id, entry_id) is not None}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    metadata = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    bookies: dict[str, Faulty] = {}
    racks = {"b1": "/r1", "b2": "/r1", "b3": "/r2", "b4": "/r2", "b5": "/r3"}
    for bookie_id in racks:
        bookies[bookie_id] = Faulty(await Bookie.open(tmp_path / bookie_id, StorageConfig(), metadata,
                                                      bookie_id=bookie_id))
    yield Cluster(metadata, bookies, StaticBookies(bookies, racks))
    for faulty in bookies.values():
        faulty.resume()
        await faulty.bookie.close()
    await metadata.close()


async def test_striped_entries_land_on_their_write_sets(cluster: Cluster) -> None:
    client = cluster.client()
    writer = await client.create(ensemble_size=5, write_quorum=2, ack_quorum=2)
    results = await asyncio.gather(*(writer.add(b"e%d" % i) for i in range(20)))
    assert results == list(range(20))
    await writer.close()
    for entry_id in range(20):
        assert cluster.holders(writer.ledger_id, entry_id) == set(writer.metadata.write_set(entry_id))
    reader = await client.open(writer.ledger_id)
    assert [bytes(e) for e in await reader.read(0, 19)] == [b"e%d" % i for i in range(20)]


async def test_scattered_reads_of_a_striped_ledger_ask_each_write_set_once_and_go_around_a_dead_bookie(
        cluster: Cluster) -> None:
    client = cluster.client()
    writer = await client.create(ensemble_size=5, write_quorum=2, ack_quorum=2)
    await asyncio.gather(*(writer.add(b"e%d" % i) for i in range(40)))
    await writer.close()
    reader = await client.open(writer.ledger_id)
    wanted = [33, 2, 17, 5, 38, 11]
    calls = {bookie_id: 0 for bookie_id in cluster.bookies}
    for bookie_id, faulty in cluster.bookies.items():
        read_entries = faulty.read_entries

        async def counted(*args, bookie_id=bookie_id, read_entries=read_entries):
            calls[bookie_id] += 1
            return await read_entries(*args)
        faulty.read_entries = counted
    assert [bytes(e) for e in await reader.read_scattered(wanted)] == [b"e%d" % i for i in wanted]
    assert sum(calls.values()) == len({writer.metadata.write_set(i) for i in wanted})   # one request per set
    cluster.kill(writer.metadata.write_set(17)[0])
    assert [bytes(e) for e in await reader.read_scattered(wanted)] == [b"e%d" % i for i in wanted]


async def test_an_idle_writer_sends_its_lac_so_other_readers_see_its_last_entry(cluster: Cluster) -> None:
    """An add carries only the LAC from before it: without the explicit LAC a reader that is not
    the writer stops one entry short until the writer's next add."""
    quiet = await cluster.client().create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    for i in range(3):
        await quiet.add(b"q%d" % i)
    assert (await cluster.client().open(quiet.ledger_id, recover=False)).last_add_confirmed == 1

    writer = await cluster.client(explicit_lac_s=0.01).create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    await asyncio.gather(*(writer.add(b"e%d" % i) for i in range(3)))
    bookie = cluster.bookies[writer.metadata.ensembles[0][1][0]].bookie
    assert await bookie.wait_lac(writer.ledger_id, 1, 5.0) == 2          # woken by the push
    reader = await cluster.client().open(writer.ledger_id, recover=False)
    assert [bytes(e) for e in await reader.read(0, 2)] == [b"e0", b"e1", b"e2"]
    await writer.add(b"e3")
    assert await bookie.wait_lac(writer.ledger_id, 2, 5.0) == 3
    await writer.close()
    await quiet.close()


async def test_a_dead_bookie_is_replaced_and_nothing_acknowledged_is_lost(cluster: Cluster) -> None:
    client = cluster.client()
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    first = writer.metadata.ensembles[0][1]
    await asyncio.gather(*(writer.add(b"before %d" % i) for i in range(10)))
    victim = first[1]
    cluster.kill(victim)
    after = await asyncio.gather(*(writer.add(b"after %d" % i) for i in range(10)))
    assert after == list(range(10, 20))
    await writer.close()   # also waits for the ensemble change under way
    fragments = writer.metadata.ensembles
    assert len(fragments) == 2 and victim not in fragments[1][1] and fragments[1][0] >= 10
    assert len(set(fragments[1][1])) == 3
    stored = (await client.read_metadata(writer.ledger_id))[0]
    assert stored.ensembles == fragments and stored.state is LedgerState.CLOSED
    for entry_id in range(10, 20):
        assert len(cluster.holders(writer.ledger_id, entry_id) - {victim}) >= 2
    reader = await client.open(writer.ledger_id)
    assert len(await reader.read(0, 19)) == 20


async def test_a_paused_bookie_past_its_timeout_is_replaced(cluster: Cluster) -> None:
    """A paused bookie never answers; with Qa < Qw the writer keeps acknowledging on the others and
    replaces it once its adds time out (here: the wrapper turns it dead, as a request timeout would)."""
    client = cluster.client()
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    victim = writer.metadata.ensembles[0][1][0]
    cluster.bookies[victim].pause()
    done = await asyncio.wait_for(asyncio.gather(*(writer.add(b"x%d" % i) for i in range(5))), 5)
    assert done == list(range(5))   # Qa = 2 of the 3 answered
    cluster.kill(victim)
    cluster.bookies[victim].time_out()
    await asyncio.wait_for(writer.add(b"more"), 5)
    await writer.close()
    assert victim not in writer.metadata.ensembles[-1][1]


async def test_no_replacement_fails_the_writer_and_acknowledges_nothing_more(cluster: Cluster) -> None:
    client = cluster.client()
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=3)
    await writer.add(b"kept")
    for bookie_id in cluster.bookies:
        if bookie_id not in writer.metadata.ensembles[0][1]:
            cluster.kill(bookie_id)
    cluster.kill(writer.metadata.ensembles[0][1][0])
    with pytest.raises(NotEnoughBookies):
        await asyncio.wait_for(writer.add(b"lost"), 5)
    assert writer.last_add_confirmed == 0


async def test_without_a_replacement_the_writer_goes_on_while_qa_bookies_live(cluster: Cluster) -> None:
    client = cluster.client()
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    ensemble = writer.metadata.ensembles[0][1]
    for bookie_id in set(cluster.bookies) - set(ensemble):
        cluster.kill(bookie_id)
    await asyncio.gather(*(writer.add(b"a%d" % i) for i in range(5)))
    cluster.kill(ensemble[0])
    assert await asyncio.wait_for(asyncio.gather(*(writer.add(b"b%d" % i) for i in range(20))), 5) == \
        list(range(5, 25))
    for entry_id in range(5, 25):
        assert len(cluster.holders(writer.ledger_id, entry_id) - {ensemble[0]}) >= 2
    cluster.kill(ensemble[1])   # now only one of three: Qa = 2 cannot be met
    with pytest.raises(NotEnoughBookies):
        await asyncio.wait_for(writer.add(b"c"), 5)
    assert writer.last_add_confirmed == 24


async def test_recovery_fences_and_the_old_writer_can_no_longer_add(cluster: Cluster) -> None:
    client = cluster.client()
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    await asyncio.gather(*(writer.add(b"v%d" % i) for i in range(8)))
    recovered = await cluster.client().open(writer.ledger_id)
    assert recovered.last_add_confirmed == 7
    with pytest.raises(LedgerFenced):
        await asyncio.wait_for(writer.add(b"zombie"), 5)
    with pytest.raises(LedgerFenced):
        await writer.close()


async def test_recovery_reads_are_fencing(cluster: Cluster) -> None:
    """A bookie that missed the fence request (it was unreachable then) is fenced by the recovery's
    reads before it serves them, so the old writer cannot reach Qa on it afterwards (bookkeeper#2615)."""
    client = cluster.client()
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    await asyncio.gather(*(writer.add(b"v%d" % i) for i in range(3)))
    ensemble = writer.metadata.ensembles[0][1]
    late = cluster.bookies[ensemble[2]]
    fence_of_late = late.fence

    async def unreachable_for_the_fence(ledger_id):
        raise BookieUnavailable("unreachable for a moment")
    late.fence = unreachable_for_the_fence
    await cluster.client().open(writer.ledger_id)
    late.fence = fence_of_late
    assert late.bookie.is_fenced(writer.ledger_id)


async def test_recovery_refuses_to_guess_with_too_few_bookies(cluster: Cluster) -> None:
    client = cluster.client()
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    await asyncio.gather(*(writer.add(b"v%d" % i) for i in range(3)))
    ensemble = writer.metadata.ensembles[0][1]
    # Qw - Qa + 1 = 2 must be fenced; with two of three down only one can be.
    cluster.bookies[ensemble[0]].mode = "dead"
    cluster.bookies[ensemble[1]].mode = "dead"
    with pytest.raises(BookieUnavailable, match="too few bookies fenced"):
        await cluster.client().open(writer.ledger_id)
    cluster.bookies[ensemble[0]].mode = "up"
    recovered = await cluster.client().open(writer.ledger_id)
    assert recovered.last_add_confirmed == 2


async def test_recovery_finds_entries_beyond_the_lac_and_rewrites_them(cluster: Cluster) -> None:
    """The writer's last entries are stored on some bookies but its LAC never said so: recovery
    keeps what any replica has and copies it to a quorum before closing."""
    client = cluster.client()
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    await asyncio.gather(*(writer.add(b"v%d" % i) for i in range(4)))
    ledger_id = writer.ledger_id
    ensemble = writer.metadata.ensembles[0][1]
    # Entry 4 reached only one bookie before the writer died.
    await cluster.bookies[ensemble[0]].bookie.add(ledger_id, 4, b"\x00" * 8 + b"tail", 3)
    recovered = await cluster.client().open(ledger_id)
    assert recovered.last_add_confirmed == 4
    assert len(cluster.holders(ledger_id, 4)) >= 2


async def test_speculative_read_goes_around_a_slow_replica(cluster: Cluster) -> None:
    client = cluster.client(speculative_read_timeout_s=0.05)
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=3)
    await asyncio.gather(*(writer.add(b"r%d" % i) for i in range(3)))
    for bookie_id in writer.metadata.ensembles[0][1]:
        cluster.bookies[bookie_id].mode = "slow"
        cluster.bookies[bookie_id].delay_s = 30.0
    fast = writer.metadata.ensembles[0][1][1]
    cluster.bookies[fast].mode = "up"
    loop = asyncio.get_running_loop()
    for spread in range(3):
        started = loop.time()
        assert [bytes(e) for e in await asyncio.wait_for(writer.read(spread, spread), 5)] == [b"r%d" % spread]
        assert loop.time() - started < 5


async def test_acks_must_span_racks_when_asked(cluster: Cluster) -> None:
    client = cluster.client(min_racks_per_write_quorum=2)
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    ensemble = writer.metadata.ensembles[0][1]
    racks = {b: cluster.directory.rack_of(b) for b in ensemble}
    assert len(set(racks.values())) >= 2
    # Hold the bookies of every rack but one: Qa acks from one rack must not acknowledge the entry.
    lone_rack = racks[ensemble[0]]
    for bookie_id in ensemble:
        if racks[bookie_id] != lone_rack:
            cluster.bookies[bookie_id].pause()
    same_rack = [b for b in ensemble if racks[b] == lone_rack]
    pending = writer.add(b"needs two racks")
    await asyncio.sleep(0.2)
    if len(same_rack) >= 2:
        assert not pending.done()
    for bookie_id in ensemble:
        cluster.bookies[bookie_id].resume()
    assert await asyncio.wait_for(pending, 5) == 0


# --- placement alone ------------------------------------------------------------------------------


def _bookies(spec: dict[str, str], read_only: set[str] = frozenset()) -> list[BookieInfo]:
    return [BookieInfo(b, rack, b not in read_only) for b, rack in spec.items()]


@pytest.mark.parametrize("seed", range(20))
def test_every_write_set_spans_two_racks_when_two_exist(seed: int) -> None:
    candidates = _bookies({"a1": "A", "a2": "A", "a3": "A", "b1": "B", "b2": "B", "b3": "B"})
    ensemble = choose_ensemble(4, 2, candidates, rng=random.Random(seed))
    rack = {b.bookie_id: b.rack for b in candidates}
    assert len(set(ensemble)) == 4
    assert all(len({rack[b] for b in ws}) == 2 for ws in write_sets(ensemble, 2))


def test_read_only_bookies_are_never_chosen() -> None:
    candidates = _bookies({"a": "A", "b": "A", "c": "B"}, read_only={"b"})
    with pytest.raises(NotEnoughBookies):
        choose_ensemble(3, 3, candidates)
    assert set(choose_ensemble(2, 2, candidates)) == {"a", "c"}


def test_min_racks_refuses_a_placement_it_cannot_meet() -> None:
    candidates = _bookies({"a": "A", "b": "A", "c": "A", "d": "B"})
    with pytest.raises(NotEnoughBookies, match="racks"):
        choose_ensemble(4, 2, candidates, min_racks=2)


def test_replacement_prefers_a_rack_the_neighbours_lack() -> None:
    candidates = _bookies({"a1": "A", "b1": "B", "a2": "A", "b2": "B", "c1": "C", "a3": "A"})
    new = replace_bookies(("a1", "b1", "a2"), {"b1"}, 3, candidates, rng=random.Random(1))
    assert new[0] == "a1" and new[2] == "a2" and new[1] in {"b2", "c1"}
    with pytest.raises(NotEnoughBookies):
        replace_bookies(("a1", "b1"), {"b1"}, 2, _bookies({"a1": "A", "b1": "B"}))


async def test_entries_acknowledged_during_an_ensemble_change_reach_the_new_bookie(cluster: Cluster) -> None:
    """Acks are held while the change is recorded: otherwise entries acknowledged meanwhile by the
    survivors would fall into the new fragment without ever being sent to the replacement."""
    client = cluster.client()
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    await asyncio.gather(*(writer.add(b"before %d" % i) for i in range(5)))
    cluster.kill(writer.metadata.ensembles[0][1][0])
    await asyncio.gather(*(writer.add(b"after %d" % i) for i in range(20)))
    await writer.close()
    new_fragment_first = writer.metadata.ensembles[-1][0]
    deadline = asyncio.get_running_loop().time() + 10   # the third copy of each may still be in flight
    for entry_id in range(new_fragment_first, 25):
        while not set(writer.metadata.write_set(entry_id)) <= cluster.holders(writer.ledger_id, entry_id):
            assert asyncio.get_running_loop().time() < deadline, f"entry {entry_id} never reached its write set"
            await asyncio.sleep(0.02)


async def test_an_entry_whose_copy_on_one_replica_fails_its_checksum_is_read_from_another_and_repaired(
        cluster: Cluster) -> None:
    """A flipped bit in one bookie's copy of an entry whose reads ask that bookie first: ranged,
    single and scattered reads return the writer's bytes, never the damaged copy; the damaged replica
    is noted (missing-copies), and the auditor's refill from that note rewrites its copy. Each
    replica of the ensemble in turn."""
    client = cluster.client(speculative_read_timeout_s=30.0)   # only an error sends a read elsewhere
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=3)
    await asyncio.gather(*(writer.add(b"entry-%d-" % i + bytes(200)) for i in range(6)))
    await writer.close()
    expected = [b"entry-%d-" % i + bytes(200) for i in range(6)]
    for position, victim in enumerate(writer.metadata.ensembles[0][1]):
        damaged = 3 + position                    # a read starting at entry n asks replica n mod 3 first
        bookie = cluster.bookies[victim].bookie
        where = bookie._index.locate(writer.ledger_id, damaged)
        path = bookie.directory / "journal" / fmt.segment_name(where.segment_id)
        with open(path, "r+b") as segment:
            segment.seek(where.offset + where.size - 10)     # inside the payload
            original = segment.read(1)
            segment.seek(where.offset + where.size - 10)
            segment.write(bytes([original[0] ^ 0x01]))
        with pytest.raises(CorruptEntry):
            await bookie.read(writer.ledger_id, damaged)
        reader_client = cluster.client(speculative_read_timeout_s=30.0)
        reader = await reader_client.open(writer.ledger_id)
        assert [bytes(e) for e in await reader.read(damaged, 5)] == expected[damaged:]
        assert [bytes(e) for e in await reader.read(damaged, damaged)] == [expected[damaged]]
        assert [bytes(e) for e in await reader.read_scattered([damaged, 1])] == [expected[damaged], expected[1]]
        await until_noted(cluster, writer.ledger_id, victim)
        outcome = await refill(reader_client, writer.ledger_id, frozenset({victim}), Throttle(0), lambda _: None)
        assert outcome is Outcome.REPLICATED
        assert bytes(await bookie.read(writer.ledger_id, damaged))[-len(expected[damaged]):] == expected[damaged]
        await missing.clear(cluster.metadata, writer.ledger_id,
                            (await missing.noted(cluster.metadata))[writer.ledger_id][1])


async def until_noted(cluster: Cluster, ledger_id: int, bookie_id: str) -> None:
    for _ in range(200):
        notes = await missing.noted(cluster.metadata)
        if bookie_id in notes.get(ledger_id, (frozenset(), 0))[0]:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{bookie_id} was never noted as lacking entries of ledger {ledger_id}")

"""Delayed messages in the core: the time index (memory bound, runs, the release frontier), its byte
layouts under forged corruption, and the store on a real core with a driven clock: due order, new
offsets at the end of the partition, restarts, cancelling, and exactly-once release across a crash
between a release record and its appends."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from core.clock import FakeClock
from core.delayed.held import ID, TARGET, held_record, release_record, released
from core.delayed.index import DelayIndex
from core.delayed.index_format import (
    Checkpoint,
    CorruptIndex,
    Destination,
    Release,
    RunInfo,
    decode_checkpoint,
    decode_release,
    decode_run,
    encode_checkpoint,
    encode_release,
    encode_run,
)
from core.delayed.produce import due_of
from core.delayed.produce import start_append as start_delayed_append
from core.delayed.service import PARTITION, PartitionDeliverer, partition_target
from core.errors import InvalidRecord
from core.names import TopicName
from core.records.batch import split_batches
from core.records.builder import Record, build_batch
from core.records.decoder import decode_batch, record_tails_at
from core.service import Core
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage
from tests.polling import eventually

START_MS = 1_700_000_000_000
TOPIC = TopicName("public", "default", "orders")


def message(value: bytes) -> Record:
    return Record(START_MS, key=b"k", value=value, headers=(("h", b"v"),))


async def records_of(core: Core, topic: TopicName = TOPIC) -> list:
    partition = await core.partition(topic, 0)
    found, offset = [], partition.log_start_offset
    while offset < partition.high_watermark:
        result = await partition.read(offset, 1 << 20)
        for batch in split_batches(result.records):
            found += decode_batch(batch)[1]
        offset = found[-1].offset + 1
    return found


async def values_of(core: Core) -> list[bytes]:
    return [record.value for record in await records_of(core)]


# --- the index --------------------------------------------------------------------------------------

class Driver:
    """What a store does with an index, with runs kept in a dict instead of __delayed_index."""

    def __init__(self, index: DelayIndex) -> None:
        self.index = index
        self.stored: dict[int, list] = {}
        self.written = 0          # keys written to runs
        self.read = 0             # keys read from runs

    def spill(self) -> None:
        for spill_id, keys in self.index.overflow():
            offset = len(self.stored)
            self.stored[offset] = keys
            self.written += len(keys)
            self.index.stored(spill_id, offset)

    def step(self, now: int, count: int) -> list:
        """Dissolve what is due to be, then release up to `count` due keys."""
        self.spill()
        bucket = self.index.bucket_to_dissolve(now)
        while bucket is not None:
            for run_id, info in self.index.begin_dissolve(bucket):
                keys = self.stored[info.index_offset]
                self.read += len(keys)
                self.index.load(run_id, info, keys)
                self.spill()
            self.index.end_dissolve()
            bucket = self.index.bucket_to_dissolve(now)
        due = self.index.pop_due(now, count)
        if due:
            self.index.note_release(self.index.pair_for(due[-1]))
        return due

    def drain(self, until: int, count: int = 7) -> list:
        out = []
        now = 0
        while now <= until:
            due = self.step(now, count)
            out += due
            if not due:
                now += 10
        return out


@pytest.mark.parametrize("limit, run_size", [(64, 5), (256, 64), (10_000, 4096)])
def test_index_releases_in_due_order_with_memory_bounded(limit, run_size) -> None:
    rng = random.Random(7)
    clock = [0]
    index = DelayIndex(limit=limit, run_size=run_size, now=lambda: clock[0])
    driver = Driver(index)
    keys = []
    for offset in range(5000):
        due = rng.randrange(100_000)            # held in random order: the hard case
        index.add(due, offset)
        keys.append((due, offset))
        driver.spill()
        assert len(index) <= limit
    index.note_indexed(5000)
    out = []
    peak = 0
    while clock[0] <= 100_000:
        due = driver.step(clock[0], 50)
        peak = max(peak, len(index))
        out += due
        if not due:
            clock[0] += 50
    assert out == sorted(keys)
    assert index.next_due() is None and index.bucket_count == 0
    assert peak <= limit + run_size                  # a run read in may overshoot by one run
    assert driver.written <= 4 * len(keys) and driver.read <= 4 * len(keys)   # no thrashing


def test_the_frontier_covers_what_a_pass_released_and_not_what_came_later() -> None:
    index = DelayIndex(limit=100)
    for offset, due in enumerate([10, 20, 30]):
        index.add(due, offset)
    index.note_indexed(3)
    assert index.pop_due(25, 10) == [(10, 0), (20, 1)]
    index.note_release(index.pair_for((20, 1)))
    assert index.is_released((10, 0)) and index.is_released((20, 1))
    assert not index.is_released((30, 2))
    # held after the pass, due before its end: not released, though its key is below the pair's
    assert not index.is_released((15, 3))
    assert index.add(15, 3)
    index.note_indexed(4)
    assert index.pop_due(25, 10) == [(15, 3)]
    index.note_release(index.pair_for((15, 3)))
    assert index.is_released((15, 3)) and index.is_released((20, 1))
    assert len(index.frontier) == 2                  # the late one needs a pair of its own ...
    assert index.pop_due(40, 10) == [(30, 2)]
    index.note_release(index.pair_for((30, 2)))
    assert index.frontier == [(4, 30, 2)]            # ... until a later pass covers both
    assert not index.add(20, 1)                      # a run read again skips what was released


def test_cancelled_keys_are_skipped_in_memory_and_in_runs_until_the_frontier_passes() -> None:
    index = DelayIndex(limit=4, run_size=2)
    driver = Driver(index)
    for offset in range(8):
        index.add(100 + offset * 1000, offset)
    index.note_indexed(8)
    driver.spill()
    assert index.cancel(1100, 1)
    assert index.cancel(7100, 7)
    assert not index.cancel(7100, 7)
    out = driver.drain(10_000)
    assert [offset for _, offset in out] == [0, 2, 3, 4, 5, 6]
    assert list(index.cancelled) == [7]              # 1 is passed by the frontier: forgotten
    index.add(20_000, 8)
    index.note_indexed(9)
    assert driver.drain(30_000) == [(20_000, 8)]
    assert index.cancelled == {}


def test_a_bucket_restored_from_overlapping_runs_is_read_in_its_time() -> None:
    index = DelayIndex(limit=100, run_size=10)
    driver = Driver(index)
    driver.stored = {0: [(500, 1), (900, 2)], 1: [(700, 3), (1500, 4)], 2: [(5000, 5)]}
    index.restore_runs([RunInfo(0, (500, 1), (900, 2), 2, 1), RunInfo(1, (700, 3), (1500, 4), 2, 3),
                        RunInfo(2, (5000, 5), (5000, 5), 1, 5)])
    assert index.bucket_count == 2                   # the first two overlap: one bucket
    index.note_indexed(6)
    assert driver.drain(6000, 1) == [(500, 1), (700, 3), (900, 2), (1500, 4), (5000, 5)]


def test_a_checkpoint_writes_only_the_keys_that_joined_the_heap_and_its_runs_still_cover_every_pending_key() -> None:
    index = DelayIndex(limit=1000)
    driver = Driver(index)

    def checkpoint() -> list[RunInfo]:
        driver.spill()
        heap = index.heap_keys()
        if heap is not None:
            spill_id, keys = heap
            driver.stored[len(driver.stored)] = keys
            index.heap_stored(spill_id, len(driver.stored) - 1)
        return index.listed_runs()

    for offset in range(100):
        index.add(offset * 10, offset)
    index.note_indexed(100)
    assert [info.count for info in checkpoint()] == [100]
    assert index.heap_keys() is None                  # nothing joined since: nothing to write
    index.note_release(index.pair_for(index.pop_due(295, 1000)[-1]))
    assert index.heap_keys() is None                  # keys leaving the heap change nothing
    index.add(5, 100)                                 # held late: joins the heap
    index.note_indexed(101)
    listed = checkpoint()
    assert [info.count for info in listed] == [100, 1] and driver.stored[1] == [(5, 100)]
    index.note_release(index.pair_for(index.pop_due(5, 1000)[-1]))
    assert [info.count for info in checkpoint()] == [100]    # its run holds nothing pending now
    pending = sorted((due, offset) for offset, due in index._pending.items())

    restarted = DelayIndex(limit=1000)                # a restart reads the listed runs back
    restarted.restore_runs(checkpoint())
    for pair in index.frontier:
        restarted.note_release(pair)
    restarted.note_indexed(101)
    again = Driver(restarted)
    again.stored = driver.stored
    assert again.drain(2000, 50) == pending
    index.note_release(index.pair_for(index.pop_due(2000, 1000)[-1]))
    assert checkpoint() == []                         # the heap is empty: no run is needed


# --- the byte layouts -------------------------------------------------------------------------------

CHECKPOINT = Checkpoint(42, 40, [RunInfo(7, (1, 2), (3, 4), 5, 1)], [(40, 100, 3)], [(9, 500)],
                        {"partition:orders/0": 12}, 6)
RELEASE = Release(5, 4, (40, 100, 3), [1, 2, 3], {"partition:orders/0": 3},
                  [Destination("partition:orders", 0, 77, [1, 2, 3])])


def test_runs_checkpoints_and_release_records_round_trip() -> None:
    assert decode_run(encode_run([(1, 5), (1, 6), (9, 2)])) == [(1, 5), (1, 6), (9, 2)]
    assert decode_checkpoint(encode_checkpoint(CHECKPOINT)) == CHECKPOINT
    assert decode_release(encode_release(RELEASE)) == RELEASE


@pytest.mark.parametrize("forge", [
    lambda raw: raw[:-1],                                      # torn tail
    lambda raw: raw[:3],                                       # too short to hold a header
    lambda raw: raw[:10] + bytes([raw[10] ^ 0x40]) + raw[11:],  # a flipped bit (CRC)
    lambda raw: b"XXXX" + raw[4:],                             # another magic
    lambda raw: raw + b"\0",                                   # a byte too many
])
@pytest.mark.parametrize("encoded, decode", [
    (encode_run([(1, 5), (2, 6)]), decode_run),
    (encode_checkpoint(CHECKPOINT), decode_checkpoint),
    (encode_release(RELEASE), decode_release),
])
def test_forged_corruption_is_refused(forge, encoded, decode) -> None:
    with pytest.raises(CorruptIndex):
        decode(forge(encoded))


def _resealed(body: bytes) -> bytes:
    import crc32c
    return body + crc32c.crc32c(body).to_bytes(4, "big")


def test_a_count_beyond_the_bytes_left_or_an_unsorted_run_is_refused_even_with_a_good_crc() -> None:
    raw = encode_run([(1, 5), (2, 6)])
    with pytest.raises(CorruptIndex, match="bytes left"):
        decode_run(_resealed(raw[:5] + (10**6).to_bytes(4, "big") + raw[9:-4]))
    unsorted = encode_run([(1, 5), (2, 6)])
    body = unsorted[:-4]
    swapped = body[:9] + body[25:41] + body[9:25]
    with pytest.raises(CorruptIndex, match="sorted"):
        decode_run(_resealed(swapped))
    with pytest.raises(CorruptIndex, match="version"):
        decode_run(_resealed(raw[:4] + b"\x09" + raw[5:-4]))


def _released_as(held: Record, offset: int = 42):
    """`held` stored at `offset`, then released at 9: (its target, the message as it goes out)."""
    [tail] = record_tails_at(build_batch([held], base_offset=offset), [offset])
    found = released(tail, 9)
    return None if found is None else (found[0], decode_batch(build_batch([found[1]]))[1][0][1:])


@pytest.mark.parametrize("stored", ["target first", "target last (stored by earlier versions)"])
def test_a_release_takes_the_target_off_and_adds_the_id_after_the_messages_own_headers(stored) -> None:
    target = partition_target("orders", 3)
    own = (("a", b"1"), (ID, b"7"), ("b", None))          # an earlier id: replaced by the new one
    if stored == "target first":
        held = held_record(Record(0, b"k", b"v", own), 5_000, target)
        assert held.headers[0] == (TARGET, target.encode()) and (ID, b"7") not in held.headers
    else:
        held = Record(5_000, b"k", b"v", (*own, (TARGET, target.encode())))
    assert _released_as(held) == (target.encode(), (9, b"k", b"v", (("a", b"1"), ("b", None), (ID, b"42"))))
    assert _released_as(held_record(Record(0, None, None), 5_000, target)) == \
        (target.encode(), (9, None, None, ((ID, b"42"),)))
    assert _released_as(release_record(1, b"x")) is None      # the store's own record
    assert _released_as(Record(1, None, b"x")) is None


# --- the store on a real core -----------------------------------------------------------------------

@pytest.fixture
async def storage(tmp_path):
    opened = []

    async def open_core(clock: FakeClock, memory_keys: int | None = None) -> Core:
        storage = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
        core = Core(storage.metadata, storage.logs, clock, delayed_memory_keys=memory_keys)
        await core.start()
        opened.append((core, storage))
        return core

    async def close_all() -> None:
        while opened:
            core, storage = opened.pop()
            await core.close()
            await storage.close()

    open_core.close_all = close_all
    yield open_core
    await close_all()


async def hold(core: Core, value: bytes, due: int) -> int:
    return await core.delayed.hold("public", "default", message(value), due, partition_target("orders", 0))


async def test_due_messages_go_to_the_end_of_their_partition_in_due_order(storage) -> None:
    clock = FakeClock(START_MS)
    core = await storage(clock)
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(build_batch([message(b"now")]))
    ids = [await hold(core, value, START_MS + delay) for value, delay in ((b"late", 3000), (b"early", 1000))]
    await asyncio.sleep(0.05)
    assert await values_of(core) == [b"now"]
    clock.advance(1000)
    await eventually(lambda: _values_are(core, [b"now", b"early"]))
    clock.advance(5000)
    await eventually(lambda: _values_are(core, [b"now", b"early", b"late"]))
    records = await records_of(core)
    assert [record.offset for record in records] == [0, 1, 2]          # dense, at the end
    assert records[1].headers == (("h", b"v"), (ID, str(ids[1]).encode()))
    assert records[1].key == b"k"
    assert await core.delayed.pending("public", "default") == {}


async def _values_are(core: Core, expected: list[bytes]) -> bool:
    return await values_of(core) == expected


async def test_cancel_by_id_and_pending_counts(storage) -> None:
    clock = FakeClock(START_MS)
    core = await storage(clock)
    await core.create_topic(TOPIC, 1)
    ids = [await hold(core, bytes([65 + n]), START_MS + 1000 + n) for n in range(5)]
    assert await core.delayed.pending("public", "default") == {"partition:orders/0": 5}
    assert await core.delayed.cancel("public", "default", ids[2])
    assert not await core.delayed.cancel("public", "default", ids[2])       # already cancelled
    assert not await core.delayed.cancel("public", "default", 10**9)        # never held
    assert await core.delayed.pending("public", "default") == {"partition:orders/0": 4}
    await storage.close_all()
    core = await storage(clock)
    assert await core.delayed.pending("public", "default") == {"partition:orders/0": 4}
    clock.advance(5000)
    await eventually(lambda: _values_are(core, [b"A", b"B", b"D", b"E"]))
    assert not await core.delayed.cancel("public", "default", ids[0])       # released
    assert await core.delayed.pending("public", "default") == {}


async def test_many_more_than_memory_holds_come_out_once_in_order_across_restarts(storage) -> None:
    clock = FakeClock(START_MS)
    core = await storage(clock, memory_keys=64)
    await core.create_topic(TOPIC, 1)
    rng = random.Random(3)
    dues = [START_MS + rng.randrange(1, 20_000) for _ in range(600)]
    await asyncio.gather(*(hold(core, str(n).encode(), due) for n, due in enumerate(dues)))
    store = core.delayed.store("public", "default")
    await eventually(lambda: _settled(store))
    assert len(store.index) <= 64 + 64 and store.index.run_count > 0
    for step in range(10):
        clock.advance(1000)
        await eventually(lambda: _released_up_to(core, dues, clock.now_ms()))
    await storage.close_all()                      # and a restart in the middle
    core = await storage(clock, memory_keys=64)
    clock.advance(20_000)
    expected = sorted(range(600), key=lambda n: (dues[n], n))
    await eventually(lambda: _values_are(core, [str(n).encode() for n in expected]))


async def _settled(store) -> bool:
    return not store._spills and len(store.index) <= store.index.limit


async def _holds_values(core: Core, count: int) -> bool:
    return len(await values_of(core)) == count


async def _released_up_to(core: Core, dues: list[int], now_ms: int) -> bool:
    return len(await values_of(core)) == sum(1 for due in dues if due <= now_ms)


class CrashingDeliverer(PartitionDeliverer):
    """Appends only the first `keep` messages a pass sends, then fails: as if the process died
    between the release record and the rest of its appends."""

    def __init__(self, core, keep: int) -> None:
        super().__init__(core)
        self.keep = keep

    def publish(self, tenant, namespace, topic, partition, records):
        appended = super().publish(tenant, namespace, topic, partition, records[:self.keep]) if self.keep else []
        return [*appended, self._fail()]

    async def _fail(self) -> None:
        raise OSError("the process died here")


@pytest.mark.parametrize("keep", [0, 3, 10])
async def test_a_crash_between_a_release_record_and_its_appends_releases_each_message_once(storage, keep) -> None:
    clock = FakeClock(START_MS)
    core = await storage(clock)
    await core.create_topic(TOPIC, 1)
    core.delayed.register(PARTITION, CrashingDeliverer(core, keep))
    for n in range(10):
        await hold(core, str(n).encode(), START_MS + 100)
    clock.advance(100)
    store = core.delayed.store("public", "default")
    await eventually(lambda: _asyncify(bool(store._unconfirmed)))
    await eventually(lambda: _holds_values(core, keep))   # the appends it made may still be on their way
    await storage.close_all()          # no checkpoint while a release is unconfirmed

    core = await storage(clock)
    await core.delayed.existing("public", "default")
    assert [value for value in await values_of(core)] == [str(n).encode() for n in range(10)]
    clock.advance(10_000)
    await asyncio.sleep(0.1)
    assert len(await values_of(core)) == 10


async def _asyncify(value):
    return value


@pytest.mark.parametrize("restart", [False, True])
async def test_a_message_of_an_open_transaction_can_be_cancelled_and_its_commit_leaves_it_out(storage, restart) -> None:
    clock = FakeClock(START_MS)
    core = await storage(clock)
    await core.create_topic(TOPIC, 1)
    target = partition_target("orders", 0)
    ids = [await core.delayed.hold("public", "default", message(value), START_MS + 5000, target, txn=7)
           for value in (b"cancelled", b"kept", b"alone")]
    solo = await core.delayed.hold("public", "default", message(b"other txn"), START_MS + 5000, target, txn=8)
    assert await core.delayed.cancel("public", "default", ids[0])            # the transaction's first
    assert not await core.delayed.cancel("public", "default", ids[0])        # already cancelled
    assert await core.delayed.cancel("public", "default", solo)              # its transaction keeps none
    if restart:       # after a checkpoint: the cancel records are replayed with the open transactions
        store = core.delayed.store("public", "default")
        checkpoints = store._last_checkpoint_ms
        clock.advance(1500)
        await eventually(lambda: _asyncify(store._last_checkpoint_ms > checkpoints))
        await storage.close_all()
        core = await storage(clock)
        await core.delayed.existing("public", "default")
    await core.delayed.end_transaction("public", "default", 8, commit=True)
    await core.delayed.end_transaction("public", "default", 7, commit=True)
    assert not await core.delayed.cancel("public", "default", ids[1])        # ended: it has a new id now
    assert await core.delayed.pending("public", "default") == {"partition:orders/0": 2}
    clock.advance(5000)
    await eventually(lambda: _values_are(core, [b"kept", b"alone"]))


class StalledDeliverer(PartitionDeliverer):
    """Its appends never start: a close finds the pass between its release record and them."""

    def __init__(self, core) -> None:
        super().__init__(core)
        self.called = asyncio.Event()

    def publish(self, tenant, namespace, topic, partition, records):
        self.called.set()
        return [asyncio.Event().wait()]


async def test_a_close_between_a_release_record_and_its_appends_leaves_the_release_to_the_next_start(storage) -> None:
    clock = FakeClock(START_MS)
    core = await storage(clock)
    await core.create_topic(TOPIC, 1)
    stalled = StalledDeliverer(core)
    core.delayed.register(PARTITION, stalled)
    for n in range(5):
        await hold(core, str(n).encode(), START_MS + 100)
    clock.advance(100)
    await asyncio.wait_for(stalled.called.wait(), 10)
    await storage.close_all()          # the close's checkpoint must not confirm that release

    core = await storage(clock)
    await core.delayed.existing("public", "default")
    await eventually(lambda: _values_are(core, [str(n).encode() for n in range(5)]))
    clock.advance(10_000)
    await asyncio.sleep(0.1)
    assert len(await values_of(core)) == 5


async def test_a_corrupt_checkpoint_rebuilds_the_index_from_the_messages_exactly(storage, tmp_path) -> None:
    clock = FakeClock(START_MS)
    core = await storage(clock, memory_keys=16)
    await core.create_topic(TOPIC, 1)
    dues = [START_MS + 100 * (n + 1) for n in range(40)]
    await asyncio.gather(*(hold(core, str(n).encode(), due) for n, due in enumerate(dues)))
    clock.advance(1000)                    # the first ten are released
    await eventually(lambda: _released_up_to(core, dues, clock.now_ms()))
    index_records = await records_of(core, TopicName("public", "default", "__delayed_index"))
    a_run = next(record.offset for record in index_records if record.key == b"run")
    await storage.close_all()
    raw = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    await raw.metadata.put("/delayed/public/default", json.dumps({"checkpoint": a_run}).encode())
    await raw.close()

    core = await storage(clock, memory_keys=16)
    store = await core.delayed.existing("public", "default")
    assert store.rebuilt
    clock.advance(10_000)
    await eventually(lambda: _values_are(core, [str(n).encode() for n in range(40)]))


# --- the Kafka headers ------------------------------------------------------------------------------

@pytest.mark.parametrize("headers, due", [
    ((), None),
    ((("other", b"1"),), None),
    ((("deliver-at-ms", b"1700000005000"),), 1_700_000_005_000),
    ((("deliver-after-ms", b"250"),), START_MS + 250),
    ((("deliver-after-ms", b"0"),), START_MS),
])
def test_delay_headers_give_the_due_time(headers, due) -> None:
    assert due_of(headers, START_MS) == due


@pytest.mark.parametrize("headers", [
    (("deliver-after-ms", b"soon"),), (("deliver-after-ms", b"-5"),), (("deliver-after-ms", b""),),
    (("deliver-after-ms", None),), (("deliver-at-ms", b"1" * 16),), (("deliver-at-ms", b"1.5"),),
    (("deliver-at-ms", b"1"), ("deliver-after-ms", b"1")),
])
def test_malformed_delay_headers_are_invalid_records(headers) -> None:
    with pytest.raises(InvalidRecord):
        due_of(headers, START_MS)


@pytest.mark.parametrize("stored_at_once", [0, 1], ids=["all held", "partly held"])
async def test_an_idempotent_producer_goes_on_after_a_restart_following_held_batches(storage, stored_at_once) -> None:
    """A batch whose records were held leaves fewer sequences in the log than it used: the note kept
    for it lets the reopened partition take the producer's next batch, and answer a retry of the
    held one as a duplicate, instead of refusing them as out of sequence."""
    clock = FakeClock(START_MS)
    core = await storage(clock)
    await core.create_topic(TOPIC, 1, {"delayed.delivery.enable": "true"})
    partition = await core.partition(TOPIC, 0)
    await partition.append(build_batch([message(b"first")], producer_id=7, producer_epoch=0, base_sequence=0))
    later = [Record(START_MS, value=b"later%d" % n, headers=[("deliver-after-ms", b"60000")]) for n in range(2)]
    mixed = build_batch([message(b"now")] * stored_at_once + later, producer_id=7, producer_epoch=0, base_sequence=1)
    answered = await start_delayed_append(core, TOPIC, partition, mixed)
    await storage.close_all()

    core = await storage(clock)
    partition = await core.partition(TOPIC, 0)
    assert await start_delayed_append(core, TOPIC, partition, mixed) == answered          # a retry: the same answer
    assert sum((await core.delayed.pending("public", "default")).values()) == 2          # and nothing held twice
    follows = build_batch([message(b"next")], producer_id=7, producer_epoch=0, base_sequence=1 + stored_at_once + 2)
    assert await partition.append(follows) == 1 + stored_at_once
    assert await values_of(core) == [b"first"] + [b"now"] * stored_at_once + [b"next"]

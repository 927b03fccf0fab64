"""Partitions store RecordBatches exactly as received and serve whole batches back."""

import asyncio

import pytest

from core.errors import (
    CorruptRecord,
    InvalidRecord,
    NotEnoughReplicas,
    OffsetOutOfRange,
    OutOfOrderSequence,
    SequenceGap,
    RecordTooLarge,
    StorageUnavailable,
    UnknownProducerId,
    UnknownTopic,
)
from core.names import TopicName
from core import partition as partition_module
from core.producer_state import ProducerStates
from core.records import batch as record_batch
from core.records.builder import Record, build_batch
from core.records.decoder import decode_batch
from storage.api import BookieUnavailable, NotEnoughBookies, StorageError

TOPIC = TopicName.of("payments")


def batch_of(values: list[bytes], ts: int = 1000, **kwargs) -> bytes:
    return build_batch([Record(ts + i, key=b"k", value=v) for i, v in enumerate(values)], **kwargs)


async def test_append_assigns_dense_base_offsets_and_keeps_batch_bytes(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    first = batch_of([b"a", b"b", b"c"], compression=3)
    second = batch_of([b"d"], compression=4)
    assert await partition.append(first) == 0
    assert await partition.append(second) == 3
    result = await partition.read(0, 1 << 20)
    assert result.high_watermark == 4 and result.log_start_offset == 0
    stored = record_batch.split_batches(result.records)
    assert [record_batch.read_header(b).base_offset for b in stored] == [0, 3]
    # everything but the rewritten base offset and leader epoch is byte-for-byte what the producer sent
    assert bytes(stored[0])[16:] == first[16:] and bytes(stored[1])[16:] == second[16:]
    _, records = decode_batch(bytes(stored[1]))
    assert [(r.offset, r.value) for r in records] == [(3, b"d")]


async def test_one_produce_with_several_batches_is_stored_in_order(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    assert await partition.append(batch_of([b"a", b"b"]) + batch_of([b"c"])) == 0
    assert partition.high_watermark == 3


async def test_read_starting_inside_a_batch_returns_the_whole_batch(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(batch_of([b"a", b"b", b"c"]))
    result = await partition.read(1, 1)
    assert record_batch.read_header(result.records).base_offset == 0
    assert (await partition.read(3, 100)).records == b""


async def test_read_outside_the_log_is_offset_out_of_range(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(batch_of([b"a"]))
    with pytest.raises(OffsetOutOfRange, match="outside"):
        await partition.read(2, 100)


async def test_corrupt_crc_is_rejected_and_nothing_is_stored(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    good = batch_of([b"a"])
    bad = bytearray(batch_of([b"b"]))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecord):
        await partition.append(good + bytes(bad))
    assert partition.high_watermark == 0


async def test_old_magic_is_an_invalid_record(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    old = bytearray(batch_of([b"a"]))
    old[16] = 1
    with pytest.raises(InvalidRecord, match="magic"):
        await partition.append(bytes(old))


async def test_batch_over_max_message_bytes_is_rejected(core) -> None:
    await core.create_topic(TOPIC, 1, {"max.message.bytes": "200"})
    partition = await core.partition(TOPIC, 0)
    with pytest.raises(RecordTooLarge, match="max.message.bytes"):
        await partition.append(batch_of([b"x" * 300]))
    assert await partition.append(batch_of([b"small"])) == 0


async def test_offset_for_timestamp_finds_the_first_record_at_or_after(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(batch_of([b"a", b"b", b"c"], ts=1000))   # offsets 0-2, ts 1000-1002
    await partition.append(batch_of([b"d", b"e"], ts=2000))         # offsets 3-4, ts 2000-2001
    assert await partition.offset_for_timestamp(0) == (0, 1000)
    assert await partition.offset_for_timestamp(1001) == (1, 1001)
    assert await partition.offset_for_timestamp(1500) == (3, 2000)
    assert await partition.offset_for_timestamp(2001) == (4, 2001)
    assert await partition.offset_for_timestamp(2002) is None


async def test_delete_records_moves_the_log_start(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    for value in (b"a", b"b", b"c"):
        await partition.append(batch_of([value]))
    assert await partition.delete_records_before(2) == 2
    with pytest.raises(OffsetOutOfRange):
        await partition.read(1, 100)
    assert await partition.offset_for_timestamp(0) == (2, 1000)
    assert await partition.delete_records_before(-1) == 3
    with pytest.raises(OffsetOutOfRange):
        await partition.delete_records_before(9)


async def test_data_survives_closing_and_reopening_the_core(tmp_path) -> None:
    from core.clock import FakeClock
    from core.service import Core
    from storage.config import StorageConfig
    from storage.embedded import EmbeddedStorage

    for round_ in range(3):
        storage = await EmbeddedStorage.open(tmp_path, StorageConfig())
        core = Core(storage.metadata, storage.logs, FakeClock())
        await core.start()
        if round_ == 0:
            await core.create_topic(TOPIC, 2)
        partition = await core.partition(TOPIC, 1)
        assert await partition.append(batch_of([b"r%d" % round_])) == round_
        result = await partition.read(0, 1 << 20)
        values = [decode_batch(bytes(b))[1][0].value for b in record_batch.split_batches(result.records)]
        assert values == [b"r%d" % i for i in range(round_ + 1)]
        await core.close()
        await storage.close()


async def test_partition_outside_the_topic_is_unknown(core) -> None:
    await core.create_topic(TOPIC, 2)
    with pytest.raises(UnknownTopic):
        await core.partition(TOPIC, 2)
    with pytest.raises(UnknownTopic):
        await core.partition(TopicName.of("nope"), 0)


async def test_retention_by_bytes_drops_whole_old_ledgers(core) -> None:
    await core.create_topic(TOPIC, 1, {"segment.bytes": str(1 << 20), "retention.bytes": str(2 << 20)})
    partition = await core.partition(TOPIC, 0)
    for _ in range(60):
        await partition.append(batch_of([b"x" * 100_000]))
    await core.enforce_retention()
    assert partition.log_start_offset > 0
    assert partition.log.size_bytes <= (3 << 20) + 200_000
    result = await partition.read(partition.log_start_offset, 1 << 20)
    assert record_batch.read_header(result.records).base_offset == partition.log_start_offset


async def test_retention_by_time_uses_record_timestamps(core) -> None:
    await core.create_topic(TOPIC, 1, {"segment.bytes": str(1 << 20), "retention.ms": "1000"})
    partition = await core.partition(TOPIC, 0)
    now = core.clock.now_ms()
    for i in range(30):
        await partition.append(batch_of([b"y" * 100_000], ts=now - 10_000 if i < 20 else now))
    await core.enforce_retention()
    start = partition.log_start_offset
    assert 0 < start <= 20


async def test_log_append_time_topics_stamp_batches_with_broker_time(core) -> None:
    await core.create_topic(TOPIC, 1, {"message.timestamp.type": "LogAppendTime"})
    partition = await core.partition(TOPIC, 0)
    await partition.append(batch_of([b"a", b"b"], ts=5))
    stored = (await partition.read(0, 1 << 20)).records
    header, records = decode_batch(stored)   # the CRC was recomputed: decoding checks it
    assert header.timestamp_type == record_batch.TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == core.clock.now_ms()
    assert [r.timestamp_ms for r in records] == [core.clock.now_ms()] * 2


class StoredButReportedFailed:
    """A log whose next append is stored but reported failed, as when the bookies that stored it
    were lost before they answered: the outcome is unknown to the writer."""

    def __init__(self, log, error: StorageError) -> None:
        self._log = log
        self.error = error
        self.armed = True

    def __getattr__(self, name):
        return getattr(self._log, name)

    def append(self, payload, record_count, max_timestamp_ms):
        stored = self._log.append(payload, record_count, max_timestamp_ms)
        if not self.armed:
            return stored
        self.armed = False

        async def reported_failed() -> int:
            await stored
            raise self.error
        return asyncio.ensure_future(reported_failed())


AMBIGUOUS_FAILURES = [
    StorageError("bookies lost before they answered"),
    # A writer left with fewer than Qa bookies fails its pending adds, yet each may sit on a bookie
    # that survived, and the ledger's recovery keeps what it finds on any bookie.
    NotEnoughBookies("need 2 bookies of the write set, 1 left"),
    BookieUnavailable("ledger 3 entry 7: too few replicas answered"),
]


@pytest.mark.parametrize("failure", AMBIGUOUS_FAILURES, ids=lambda error: type(error).__name__)
async def test_a_retry_after_an_ambiguous_failure_is_not_stored_twice(core, failure) -> None:
    """An idempotent producer retries a batch whose append failed for a storage reason; the batch
    was stored after all. The partition relearns its producers from the log before it accepts the
    retry, which then gets the stored offset instead of a second copy."""
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(batch_of([b"first"], producer_id=7, producer_epoch=0, base_sequence=0))
    partition.log = StoredButReportedFailed(partition.log, failure)
    retried = batch_of([b"second"], producer_id=7, producer_epoch=0, base_sequence=1)
    with pytest.raises((StorageUnavailable, NotEnoughReplicas)):
        await partition.append(retried)
    while True:   # refused while the producers are relearned, as a client's retries would be
        try:
            offset = await partition.append(retried)
            break
        except StorageUnavailable:
            await asyncio.sleep(0.01)
    assert offset == 1
    assert partition.high_watermark == 2
    after = await partition.append(batch_of([b"third"], producer_id=7, producer_epoch=0, base_sequence=2))
    assert after == 2


async def test_a_producer_unknown_here_must_start_at_sequence_zero(core) -> None:
    """A batch continuing a sequence this partition never saw the start of would skip what came
    before it. With the whole log known, those batches were never stored: out of order, as Kafka
    answers a sequence that skips ahead. Once records went by retention and the partition learned
    its producers from what is left: UNKNOWN_PRODUCER_ID, so that the client resets. Nothing stored."""
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    with pytest.raises(OutOfOrderSequence) as skipped:
        await partition.append(batch_of([b"seventeenth"], producer_id=8, producer_epoch=0, base_sequence=17))
    assert not isinstance(skipped.value, SequenceGap)
    assert partition.high_watermark == 0
    assert await partition.append(batch_of([b"first"], producer_id=8, producer_epoch=0, base_sequence=0)) == 0
    assert await partition.append(batch_of([b"second"], producer_id=8, producer_epoch=0, base_sequence=1)) == 1
    await partition.delete_records_before(1)
    await core.close_idle(0)                         # opened again: learned from offset 1 on
    reopened = await core.partition(TOPIC, 0)
    assert reopened is not partition
    with pytest.raises(UnknownProducerId):
        await reopened.append(batch_of([b"fifth"], producer_id=9, producer_epoch=0, base_sequence=5))
    assert reopened.high_watermark == 2


def test_a_gap_is_retriable_and_an_old_sequence_is_out_of_order() -> None:
    """Ahead of the expected sequence: a batch before it has not arrived, so the client is told to
    retry (librdkafka bumps its epoch on OUT_OF_ORDER_SEQUENCE_NUMBER for a batch behind a failed
    one, renumbering possibly stored batches). Behind it and none of the last five: out of order."""
    states = ProducerStates()
    for seq in range(0, 14, 2):
        states.record(5, 0, seq, 2, base_offset=seq)    # the last five: sequences 4..13
    with pytest.raises(SequenceGap) as gap:
        states.check(5, 0, 15, 1)
    assert gap.value.retriable
    with pytest.raises(OutOfOrderSequence) as old:
        states.check(5, 0, 2, 2)
    assert not isinstance(old.value, SequenceGap)
    assert states.check(5, 0, 12, 2) == 12              # a retry of a kept batch: its offset
    with pytest.raises(SequenceGap):
        states.check(5, 1, 3, 1)                        # a new epoch starts at 0
    wrapping = ProducerStates()
    wrapping.record(6, 0, (1 << 31) - 2, 2, base_offset=0)   # sequences wrap after 2**31 - 1
    assert wrapping.check(6, 0, 0, 1) is None
    with pytest.raises(SequenceGap):
        wrapping.check(6, 0, 1, 1)


async def test_opening_reads_the_log_only_after_the_newest_producer_snapshot(core, monkeypatch) -> None:
    """A partition snapshots its producers every few MiB once the batches below the snapshot are
    durable; reopened, it starts from the snapshot and reads only the log after it, and retries of
    batches on either side of it are still answered with their stored offsets."""
    monkeypatch.setattr(partition_module, "SNAPSHOT_EVERY_BYTES", 300)
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    batches = [batch_of([b"x" * 100], producer_id=11, producer_epoch=0, base_sequence=seq) for seq in range(12)]
    for batch in batches:
        await partition.append(batch)
    await asyncio.sleep(0)                  # the last snapshot's store runs after its append is durable
    while partition._snapshotting:
        await asyncio.sleep(0.01)
    await core.close_idle(0)
    reopened = await core.partition(TOPIC, 0)
    assert 0 < reopened._scan_start <= 12   # from a snapshot, not from offset 0
    assert reopened.producers.complete
    assert await reopened.append(batches[-1]) == 11          # a retry after the snapshot
    assert await reopened.append(batches[-5]) == 7           # and one kept in it
    assert await reopened.append(batch_of([b"next"], producer_id=11, producer_epoch=0, base_sequence=12)) == 12
    with pytest.raises(OutOfOrderSequence):
        await reopened.append(batch_of([b"skip"], producer_id=11, producer_epoch=0, base_sequence=20))
    assert reopened.high_watermark == 13


async def test_a_snapshot_taken_before_a_failed_append_is_not_stored(core, monkeypatch) -> None:
    """The append carrying the last batch below a snapshot failed (it may or may not be stored): the
    snapshot is dropped, and the partition relearns from the log as after any storage failure."""
    monkeypatch.setattr(partition_module, "SNAPSHOT_EVERY_BYTES", 1)
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    partition.log = StoredButReportedFailed(partition.log, StorageError("bookies lost before they answered"))
    with pytest.raises(StorageUnavailable):
        await partition.append(batch_of([b"first"], producer_id=12, producer_epoch=0, base_sequence=0))
    while partition._snapshotting:
        await asyncio.sleep(0.01)
    assert await partition._snapshots.load() is None


async def test_a_gap_right_after_a_refused_append_is_retriable_and_later_out_of_order(core) -> None:
    """A batch refused or failed here (a storage failure being repaired) leaves a gap the client
    closes by sending that batch again, so for a while a batch after it is told to retry (a
    retriable SequenceGap) rather than OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka renumbers
    every unacknowledged batch under a new epoch. Without such a refusal, a skipped sequence is
    out of order, as in Kafka."""
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    assert await partition.append(batch_of([b"first"], producer_id=13, producer_epoch=0, base_sequence=0)) == 0
    partition.log = StoredButReportedFailed(partition.log, StorageError("bookies lost before they answered"))
    with pytest.raises(StorageUnavailable):
        await partition.append(batch_of([b"second"], producer_id=13, producer_epoch=0, base_sequence=1))
    while partition._relearning is not None:
        await asyncio.sleep(0.01)
    ahead = batch_of([b"fourth"], producer_id=13, producer_epoch=0, base_sequence=3)
    with pytest.raises(SequenceGap) as gap:
        await partition.append(ahead)
    assert gap.value.retriable
    core.clock.advance(partition_module.GAP_AFTER_REFUSAL_MS)
    with pytest.raises(OutOfOrderSequence) as skipped:
        await partition.append(ahead)
    assert not isinstance(skipped.value, SequenceGap)
    assert partition.high_watermark == 2


async def test_a_gap_right_after_the_partition_could_not_be_opened_is_retriable(core, monkeypatch) -> None:
    """A batch refused because the partition could not be had yet (a restart still taking its
    ownership, storage away) leaves the same gap as a refused append: the next batch of that
    producer to arrive once it opens is told to retry."""
    await core.create_topic(TOPIC, 1)
    opening = core._open

    async def refused(name, index):
        monkeypatch.setattr(core, "_open", opening)
        raise StorageUnavailable("the partition's ledger cannot be recovered yet")
    monkeypatch.setattr(core, "_open", refused)
    with pytest.raises(StorageUnavailable):
        await core.partition(TOPIC, 0)
    partition = await core.partition(TOPIC, 0)
    with pytest.raises(SequenceGap):
        await partition.append(batch_of([b"second"], producer_id=14, producer_epoch=0, base_sequence=1))
    assert await partition.append(batch_of([b"first"], producer_id=14, producer_epoch=0, base_sequence=0)) == 0

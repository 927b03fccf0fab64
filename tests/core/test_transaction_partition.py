"""Transactions on a partition: markers (golden bytes), the last stable offset, the aborted index,
read_committed reads, and their rebuild from the log when the partition opens again."""

import asyncio
import struct

import crc32c
import pytest

from core.clock import FakeClock
from core.errors import InvalidRecord
from core.names import TopicName
from core.records import batch as record_batch
from core.records.builder import Record, build_batch
from core.service import Core
from core.transactions.aborted_index import AbortedIndex, AbortedTxn
from core.transactions.markers import Marker, build_marker, read_marker
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage

TOPIC = TopicName.of("ledger")
TXN_PRODUCER, PLAIN_PRODUCER = 7, 8


def txn_batch(values: list[bytes], producer_id: int = TXN_PRODUCER, epoch: int = 0, sequence: int = 0) -> bytes:
    return build_batch([Record(1000, value=v) for v in values], producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=sequence, is_transactional=True)


def plain_batch(values: list[bytes], sequence: int = 0) -> bytes:
    return build_batch([Record(1000, value=v) for v in values], producer_id=PLAIN_PRODUCER, producer_epoch=0,
                       base_sequence=sequence)


def base_offsets(records: bytes) -> list[int]:
    return [record_batch.read_header(b).base_offset for b in record_batch.split_batches(records)] if records else []


# --- markers --------------------------------------------------------------------------------------

def test_commit_marker_matches_the_kafka_control_batch_layout() -> None:
    # Built by hand from the RecordBatch v2 and control record specification, not by the builder.
    record_body = (b"\x00"                       # record attributes
                   + b"\x00"                     # timestampDelta varlong 0
                   + b"\x00"                     # offsetDelta varint 0
                   + b"\x08" + b"\x00\x00\x00\x01"   # key length 4; version 0, type 1 (COMMIT)
                   + b"\x0c" + b"\x00\x00\x00\x00\x00\x09"   # value length 6; version 0, coordinator epoch 9
                   + b"\x00")                    # no headers
    record = bytes([len(record_body) * 2]) + record_body   # zigzag varint length
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, 1234, 1234, 42, 3, -1, 1) + record
    header = struct.pack(">qiib", 0, 4 + 1 + 4 + len(after_crc), -1, 2)
    expected = header + struct.pack(">I", crc32c.crc32c(after_crc)) + after_crc
    assert build_marker(Marker(42, 3, commit=True, coordinator_epoch=9), 1234) == expected


def test_abort_marker_differs_only_in_type_and_reads_back() -> None:
    batch = build_marker(Marker(42, 3, commit=False), 1234)
    header = record_batch.check_batch(batch)
    assert header.is_control and header.is_transactional and header.base_sequence == -1
    assert read_marker(batch) == Marker(42, 3, commit=False, coordinator_epoch=0)
    assert read_marker(build_marker(Marker(42, 3, commit=True, coordinator_epoch=5), 1)).commit


def test_a_control_batch_of_another_type_is_no_marker() -> None:
    other = build_batch([Record(1, key=struct.pack(">hh", 0, 4), value=b"")], producer_id=1, producer_epoch=0,
                        is_transactional=True, is_control=True)
    assert read_marker(other) is None


# --- aborted index --------------------------------------------------------------------------------

def test_aborted_index_returns_the_transactions_overlapping_a_range() -> None:
    index = AbortedIndex()
    index.add(1, 0, 5)
    index.add(2, 3, 9)
    index.add(1, 10, 12)
    assert index.overlapping(6, 10) == [AbortedTxn(9, 3, 2)]
    assert [t.producer_id for t in index.overlapping(0, 100)] == [1, 2, 1]
    assert index.overlapping(13, 20) == []
    index.trim_before(6)
    assert [t.last_offset for t in index.overlapping(0, 100)] == [9, 12]


# --- partitions -----------------------------------------------------------------------------------

async def test_open_transaction_holds_the_last_stable_offset(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(plain_batch([b"p0"]))
    await partition.append(txn_batch([b"t0", b"t1"]))
    await partition.append(plain_batch([b"p1"], sequence=1))
    assert (partition.high_watermark, partition.last_stable_offset) == (4, 1)
    read = await partition.read_committed(0, 1 << 20)
    assert base_offsets(read.records) == [0] and read.last_stable_offset == 1 and read.aborted == []
    assert base_offsets((await partition.read(0, 1 << 20)).records) == [0, 1, 3]   # read_uncommitted: all
    assert await partition.write_marker(Marker(TXN_PRODUCER, 0, commit=True)) == 4
    assert partition.last_stable_offset == partition.high_watermark == 5
    read = await partition.read_committed(0, 1 << 20)
    assert base_offsets(read.records) == [0, 1, 3, 4] and read.aborted == []


async def test_abort_marker_lists_the_transaction_for_readers_of_its_range(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(txn_batch([b"a"]))                 # 0
    await partition.append(plain_batch([b"p"]))               # 1
    await partition.append(txn_batch([b"b"], sequence=1))     # 2
    await partition.write_marker(Marker(TXN_PRODUCER, 0, commit=False))   # 3
    await partition.append(txn_batch([b"c"], sequence=2))     # 4: the next transaction
    await partition.write_marker(Marker(TXN_PRODUCER, 0, commit=True))    # 5
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in partition.aborted.overlapping(0, 6)] == \
        [(TXN_PRODUCER, 0, 3)]
    read = await partition.read_committed(0, 1 << 20)
    assert [(t.producer_id, t.first_offset) for t in read.aborted] == [(TXN_PRODUCER, 0)]
    assert (await partition.read_committed(4, 1 << 20)).aborted == []   # past the aborted range


async def test_clients_may_not_write_control_batches(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    with pytest.raises(InvalidRecord, match="control"):
        await partition.append(build_marker(Marker(1, 0, commit=True), 1))
    with pytest.raises(InvalidRecord, match="producer id"):
        await partition.append(build_batch([Record(1, value=b"x")], is_transactional=True))
    assert partition.high_watermark == 0


async def test_read_committed_waiter_wakes_when_the_transaction_ends(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(txn_batch([b"a"]))
    assert not await partition.wait_for_data(0, 0.05, committed=True)
    waiting = asyncio.ensure_future(partition.wait_for_data(0, 5.0, committed=True))
    await asyncio.sleep(0)
    await partition.write_marker(Marker(TXN_PRODUCER, 0, commit=True))
    assert await waiting


async def test_marker_at_a_bumped_epoch_restarts_the_producer_sequences(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(txn_batch([b"a"], sequence=0))
    await partition.write_marker(Marker(TXN_PRODUCER, 1, commit=False))   # the coordinator fenced epoch 0
    assert await partition.append(txn_batch([b"b"], epoch=1, sequence=0)) == 2
    from core.errors import InvalidProducerEpoch
    with pytest.raises(InvalidProducerEpoch):
        await partition.append(txn_batch([b"zombie"], epoch=0, sequence=1))


async def test_transactions_are_rebuilt_from_the_log_on_reopen(tmp_path) -> None:
    async def opened() -> tuple:
        storage = await EmbeddedStorage.open(tmp_path, StorageConfig())
        core = Core(storage.metadata, storage.logs, FakeClock())
        await core.start()
        return storage, core

    storage, core = await opened()
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(txn_batch([b"a"]))                               # 0, aborted below
    await partition.write_marker(Marker(TXN_PRODUCER, 0, commit=False))     # 1
    await partition.append(txn_batch([b"b"], sequence=1))                   # 2, committed
    await partition.write_marker(Marker(TXN_PRODUCER, 0, commit=True))      # 3
    await partition.append(txn_batch([b"c"], producer_id=9))                # 4, left open
    await core.close()
    await storage.close()

    storage, core = await opened()
    try:
        partition = await core.partition(TOPIC, 0)
        assert (partition.high_watermark, partition.last_stable_offset) == (5, 4)
        assert [(t.producer_id, t.first_offset, t.last_offset) for t in partition.aborted.overlapping(0, 5)] == \
            [(TXN_PRODUCER, 0, 1)]
        await partition.write_marker(Marker(9, 1, commit=False))
        assert partition.last_stable_offset == 6
        # the sequences survived too: a retry of the committed batch is a duplicate, stored once
        assert await partition.append(txn_batch([b"b"], sequence=1)) == 2
    finally:
        await core.close()
        await storage.close()


async def test_rebuild_from_a_tail_that_starts_inside_an_aborted_transaction(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(txn_batch([b"x" * 1000]))                          # 0
    await partition.append(txn_batch([b"y" * 1000], sequence=1))              # 1
    await partition.write_marker(Marker(TXN_PRODUCER, 0, commit=False))       # 2
    partition.producers = type(partition.producers)()
    partition.aborted = AbortedIndex()
    # A little less than the whole log: the scan starts at offset 1, inside the aborted transaction.
    await partition.load_producer_states(max_scan_bytes=partition.log.size_bytes - 1)
    assert [(t.first_offset, t.last_offset) for t in partition.aborted.overlapping(0, 3)] == [(1, 2)]


async def test_aborted_transactions_older_than_the_scanned_tail_come_from_the_store(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(txn_batch([b"a"]))                                   # 0
    await partition.write_marker(Marker(TXN_PRODUCER, 0, commit=False))         # 1
    for sequence in range(5):
        await partition.append(plain_batch([b"x" * 1000], sequence=sequence))   # 2..6
    partition.producers = type(partition.producers)()
    partition.aborted = AbortedIndex()
    await partition.load_producer_states(max_scan_bytes=2500)   # the last two batches only
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in partition.aborted.overlapping(0, 7)] == \
        [(TXN_PRODUCER, 0, 1)]


async def test_a_topic_created_again_does_not_inherit_aborted_transactions(core) -> None:
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(txn_batch([b"a"]))
    await partition.write_marker(Marker(TXN_PRODUCER, 0, commit=False))
    await core.delete_topic(TOPIC)
    await core.create_topic(TOPIC, 1)
    partition = await core.partition(TOPIC, 0)
    await partition.append(plain_batch([b"p"]))
    await partition.append(plain_batch([b"q"], sequence=1))
    assert len(partition.aborted) == 0
    assert (await partition.read_committed(0, 1 << 20)).aborted == []

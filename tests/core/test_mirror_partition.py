"""A mirror topic's partition (geo-replication, protocols/kafka/mirror): its replicator stores the
source's batches at their own offsets, a retried batch is stored once, a mirror whose source lost
its head begins where the source now does, transactions carry over to read_committed readers, and
clients cannot write it until it is promoted (its mirror.source removed)."""

import pytest

from core.errors import MirrorTopic, OffsetOutOfRange
from core.names import TopicName
from core.records import batch as record_batch
from core.records.builder import Record, build_batch
from core.transactions.markers import Marker

SOURCE = TopicName.of("payments")
MIRROR = TopicName.of("payments-mirror")


def batch_of(values: list[bytes], **kwargs) -> bytes:
    return build_batch([Record(1000 + i, key=b"k", value=v) for i, v in enumerate(values)], **kwargs)


def base_offsets(records: bytes) -> list[int]:
    return [record_batch.read_header(b).base_offset for b in record_batch.split_batches(records)]


async def source_and_mirror(core):
    await core.create_topic(SOURCE, 1)
    await core.create_topic(MIRROR, 1, {"mirror.source": "dc1"})
    return await core.partition(SOURCE, 0), await core.partition(MIRROR, 0)


async def test_the_replicator_stores_the_sources_batches_at_their_own_offsets_once(core) -> None:
    source, mirror = await source_and_mirror(core)
    for values in ([b"a", b"b"], [b"c"], [b"d", b"e", b"f"]):
        await source.append(batch_of(values))
    copied = (await source.read(0, 1 << 20)).records
    assert await mirror.append_mirrored(copied) == 0
    assert await mirror.append_mirrored(copied) == 0          # a retry after a lost answer: nothing again
    assert mirror.high_watermark == source.high_watermark == 6
    assert base_offsets((await mirror.read(0, 1 << 20)).records) == [0, 2, 3]
    later = (await source.read(3, 1 << 20)).records
    assert await mirror.append_mirrored(later) == 3 and mirror.high_watermark == 6


async def test_clients_cannot_write_a_mirror_nor_the_replicator_an_ordinary_topic(core) -> None:
    source, mirror = await source_and_mirror(core)
    with pytest.raises(MirrorTopic):
        await mirror.append(batch_of([b"x"]))
    with pytest.raises(MirrorTopic):
        await source.append_mirrored(batch_of([b"x"]))
    assert mirror.high_watermark == source.high_watermark == 0


async def test_a_mirror_begins_where_the_source_now_begins_and_refuses_a_gap_later(core) -> None:
    source, mirror = await source_and_mirror(core)
    for values in ([b"a"], [b"b"], [b"c"], [b"d"]):
        await source.append(batch_of(values))
    await source.delete_records_before(2)                     # gone before it was copied
    assert await mirror.append_mirrored((await source.read(2, 1 << 20)).records) == 2
    assert (mirror.log_start_offset, mirror.high_watermark) == (2, 4)
    await source.append(batch_of([b"e"]))
    await source.append(batch_of([b"f"]))
    with pytest.raises(OffsetOutOfRange):
        await mirror.append_mirrored((await source.read(5, 1 << 20)).records)   # offset 4 never came
    assert mirror.high_watermark == 4


async def test_transactions_carry_over_to_read_committed_readers_and_a_reopened_mirror(core) -> None:
    source, mirror = await source_and_mirror(core)
    await source.append(batch_of([b"plain"]))
    await source.append(batch_of([b"t0", b"t1"], producer_id=7, producer_epoch=0, base_sequence=0,
                                 is_transactional=True))
    await mirror.append_mirrored((await source.read(0, 1 << 20)).records)
    assert mirror.last_stable_offset == source.last_stable_offset == 1   # the transaction is open there too
    await source.write_marker(Marker(7, 0, commit=False))
    await mirror.append_mirrored((await source.read(3, 1 << 20)).records)
    assert mirror.last_stable_offset == mirror.high_watermark == 4
    read = await mirror.read_committed(0, 1 << 20)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in read.aborted] == [(7, 1, 3)]
    await core.close_idle(0)
    reopened = await core.partition(MIRROR, 0)
    assert reopened is not mirror
    read = await reopened.read_committed(0, 1 << 20)
    assert [(t.producer_id, t.first_offset) for t in read.aborted] == [(7, 1)]


async def test_a_promoted_mirror_takes_clients_at_the_next_offset(core) -> None:
    source, mirror = await source_and_mirror(core)
    await source.append(batch_of([b"a", b"b"], producer_id=9, producer_epoch=0, base_sequence=0))
    await mirror.append_mirrored((await source.read(0, 1 << 20)).records)
    await core.alter_topic_configs(MIRROR, {"mirror.source": None})
    await core.close_idle(0)
    promoted = await core.partition(MIRROR, 0)
    # the same idempotent producer goes on where it was, as it would have on the source
    assert await promoted.append(batch_of([b"c"], producer_id=9, producer_epoch=0, base_sequence=2)) == 2

"""Share partitions (KIP-932) on the core's cursor: acquiring, locks, settling, delivery limits,
and what survives a restart."""

import pytest

from core.cursor import Cursor
from core.errors import FencedMemberEpoch, GroupNotFound, UnknownMember
from core.groups.store import GroupKey
from core.names import TopicName
from core.records.batch import read_header, split_batches
from core.records.builder import Record, build_batch
from core.shares.coordinator import ShareCoordinator, ShareSettings, cursor_name
from core.shares.share_partition import ACCEPT, GAP, REJECT, RELEASE, SharePartition

TOPIC = TopicName.of("jobs")
KEY = GroupKey("public", "default", "workers")


async def produce(core, count: int, batch: int = 1) -> None:
    partition = await core.partition(TOPIC, 0)
    for start in range(0, count, batch):
        await partition.append(build_batch([Record(1, value=b"v%d" % i)
                                            for i in range(start, min(count, start + batch))]))


async def open_share(core, *, lock_ms: int = 30_000, limit: int = 5) -> SharePartition:
    cursor = await Cursor.load(core.metadata, core.clock, TOPIC, 0, cursor_name(KEY.group_id))
    return SharePartition(lambda: core.partition(TOPIC, 0), cursor, core.clock, lock_ms=lock_ms,
                          delivery_limit=limit)


def offsets(ranges) -> list[int]:
    return [o for first, last, _ in ranges for o in range(first, last + 1)]


@pytest.fixture
async def topic(core):
    await core.create_topic(TOPIC, 1)
    return TOPIC


async def test_records_go_to_one_member_at_a_time_with_their_batches(core, topic):
    await produce(core, 6, batch=3)
    share = await open_share(core)
    a = await share.fetch("a", 4)
    assert a.acquired == [(0, 3, 1)]
    assert [read_header(b).base_offset for b in split_batches(a.records)] == [0, 3]   # whole stored batches
    b = await share.fetch("b", 10)
    assert b.acquired == [(4, 5, 1)]
    assert (await share.fetch("b", 10)).acquired == []


async def test_accept_moves_the_start_offset_and_reject_is_final(core, topic):
    await produce(core, 4)
    share = await open_share(core)
    await share.fetch("a", 4)
    assert share.acknowledge("a", 1, 1, [REJECT])
    assert share.start_offset == 0
    assert share.acknowledge("a", 0, 0, [ACCEPT])
    assert share.start_offset == 2
    assert share.acknowledge("a", 2, 3, [ACCEPT, GAP])
    assert share.start_offset == 4
    assert (await share.fetch("b", 10)).acquired == []


async def test_only_the_holder_settles_a_record(core, topic):
    await produce(core, 2)
    share = await open_share(core)
    await share.fetch("a", 2)
    assert not share.acknowledge("b", 0, 1, [ACCEPT])
    assert not share.acknowledge("a", 0, 2, [ACCEPT])          # offset 2 was never acquired
    assert not share.acknowledge("a", 0, 1, [ACCEPT, ACCEPT, ACCEPT])   # one type per offset, or one
    assert not share.acknowledge("a", 0, 1, [7])
    assert not share.acknowledge("a", 0, 2**62, [ACCEPT])      # refused without looking through it
    assert share.acquired_by("a") == [0, 1]                     # nothing settled by a refused batch


async def test_released_records_come_back_first_with_a_higher_delivery_count(core, topic):
    await produce(core, 4)
    share = await open_share(core)
    await share.fetch("a", 2)
    assert share.acknowledge("a", 1, 1, [RELEASE])
    fetched = await share.fetch("b", 2)
    assert fetched.acquired == [(1, 1, 2), (2, 2, 1)]


async def test_an_expired_lock_releases_the_record(core, topic):
    await produce(core, 1)
    share = await open_share(core, lock_ms=1_000)
    await share.fetch("a", 1)
    core.clock.advance(999)
    assert (await share.fetch("b", 1)).acquired == []
    core.clock.advance(1)
    assert (await share.fetch("b", 1)).acquired == [(0, 0, 2)]
    assert not share.acknowledge("a", 0, 0, [ACCEPT])           # the lock was lost
    assert share.acknowledge("b", 0, 0, [ACCEPT])


async def test_a_member_leaving_releases_what_it_holds(core, topic):
    await produce(core, 3)
    share = await open_share(core)
    await share.fetch("a", 3)
    assert share.release_member("a") == 3
    assert offsets((await share.fetch("b", 3)).acquired) == [0, 1, 2]


async def test_a_record_is_archived_after_the_delivery_limit(core, topic):
    await produce(core, 2)
    share = await open_share(core, limit=3)
    for attempt in range(1, 4):
        fetched = await share.fetch("a", 1)
        assert fetched.acquired == [(0, 0, attempt)]
        assert share.acknowledge("a", 0, 0, [RELEASE])
    assert share.start_offset == 1                              # archived: done, never delivered again
    assert (await share.fetch("a", 5)).acquired == [(1, 1, 1)]


async def test_acknowledgements_survive_a_reopen_and_unsettled_records_return_counted(core, topic):
    await produce(core, 5)
    share = await open_share(core)
    await share.fetch("a", 4)
    assert share.acknowledge("a", 0, 0, [ACCEPT])
    assert share.acknowledge("a", 2, 2, [REJECT])
    await share.flush()
    reopened = await open_share(core)                            # a restart: in-flight state is gone
    assert reopened.start_offset == 1
    fetched = await reopened.fetch("b", 10)
    assert fetched.acquired == [(1, 1, 2), (3, 3, 2), (4, 4, 1)]   # 2 stays done; 1 and 3 were out before


async def test_delivery_counts_survive_a_reopen_and_a_record_out_as_often_as_allowed_is_archived(core, topic):
    await produce(core, 3)
    share = await open_share(core, limit=3)
    for attempt in (1, 2):
        assert (await share.fetch("a", 2)).acquired == [(0, 1, attempt)]
        assert share.acknowledge("a", 0, 1, [RELEASE])
    assert (await share.fetch("a", 1)).acquired == [(0, 0, 3)]    # in flight for the third time
    await share.flush()
    reopened = await open_share(core, limit=3)                        # a restart
    assert (await reopened.fetch("b", 10)).acquired == [(1, 1, 3), (2, 2, 1)]
    assert reopened.start_offset == 1        # 0 was out three times: archived, not delivered a fourth


async def test_the_coordinator_starts_a_new_share_partition_at_the_end_or_the_start(core, topic):
    await produce(core, 3)
    latest = ShareCoordinator(core, ShareSettings())
    share = await latest.share_partition(KEY, TOPIC, 0)
    assert share.start_offset == 3
    earliest = ShareCoordinator(core, ShareSettings(auto_offset_reset="earliest"))
    other = GroupKey("public", "default", "others")
    assert (await earliest.share_partition(other, TOPIC, 0)).start_offset == 0
    assert (await ShareCoordinator(core).share_partition(KEY, TOPIC, 0)).start_offset == 3   # stored: kept


async def test_share_group_membership_assigns_every_partition_to_every_member(core):
    await core.create_topic(TOPIC, 2)
    shares = ShareCoordinator(core)
    first, ids = await shares.heartbeat(KEY, member_id="m1", epoch=0, topics=["jobs"], rack=None,
                                        client_id="c", client_host="")
    second, _ = await shares.heartbeat(KEY, member_id="m2", epoch=0, topics=["jobs"], rack=None,
                                       client_id="c", client_host="")
    assert first.assignment == second.assignment == {("jobs", 0), ("jobs", 1)}
    assert set(ids) == {"jobs"}
    again, _ = await shares.heartbeat(KEY, member_id="m1", epoch=first.epoch, topics=None, rack=None,
                                      client_id="c", client_host="")
    assert again.assignment is None and again.epoch == first.epoch
    with pytest.raises(FencedMemberEpoch):
        await shares.heartbeat(KEY, member_id="m1", epoch=first.epoch + 5, topics=None, rack=None,
                               client_id="c", client_host="")
    with pytest.raises(UnknownMember):
        await shares.heartbeat(KEY, member_id="nobody", epoch=3, topics=None, rack=None, client_id="c",
                               client_host="")

    async def taken(key):
        return key.group_id == "classic"
    with pytest.raises(GroupNotFound):
        await ShareCoordinator(core, other_kind=taken).heartbeat(
            GroupKey("public", "default", "classic"), member_id="", epoch=0, topics=["jobs"], rack=None,
            client_id="c", client_host="")

"""Cursors: a committed offset plus individually acknowledged ranges, persisted."""

from hypothesis import given
from hypothesis import strategies as st

from core import cursor as cursor_module
from core.cursor import AckSet
from core.names import TopicName

TOPIC = TopicName.of("orders")


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 20))), st.integers(0, 220))
def test_ackset_matches_a_plain_set(adds: list[tuple[int, int]], drop: int) -> None:
    acks = AckSet()
    model: set[int] = set()
    for first, length in adds:
        acks.add(first, first + length)
        model.update(range(first, first + length))
    assert all((o in acks) == (o in model) for o in range(240))
    ranges = acks.ranges()
    assert all(a < b for a, b in ranges)
    assert all(ranges[i][1] < ranges[i + 1][0] for i in range(len(ranges) - 1)), "ranges are merged"
    acks.drop_below(drop)
    model = {o for o in model if o >= drop}
    assert all((o in acks) == (o in model) for o in range(240))
    assert len(acks) == len(model)


@given(st.permutations(list(range(30))))
def test_acking_every_offset_in_any_order_moves_the_position_to_the_end(order: list[int]) -> None:
    from core.cursor import Cursor, CursorState
    cursor = Cursor(None, None, TOPIC, 0, "c", CursorState(0, AckSet()), None)
    for offset in order:
        cursor.ack(offset)
        assert all(cursor.is_acked(o) for o in order[: order.index(offset) + 1])
    assert cursor.committed_offset == 30
    assert cursor.acked_ranges() == []


async def test_cursor_persists_position_acks_and_metadata(core) -> None:
    cursor = await core.cursor(TOPIC, 0, "billing")
    assert not cursor.exists and cursor.committed_offset == 0
    cursor.ack(0)
    cursor.ack(2)
    cursor.ack(5, 8)
    await cursor.flush()
    again = await core.cursor(TOPIC, 0, "billing")
    assert again.committed_offset == 1
    assert again.acked_ranges() == [(2, 3), (5, 8)]
    assert again.leader_epoch == -1
    again.commit(42, "meta-data", leader_epoch=5)
    await again.flush()
    third = await core.cursor(TOPIC, 0, "billing")
    assert (third.committed_offset, third.metadata, third.leader_epoch, third.acked_ranges()) == (42, "meta-data", 5, [])
    await third.delete()
    assert not (await core.cursor(TOPIC, 0, "billing")).exists


async def test_a_delivery_reservation_counts_once_stored_and_a_clean_end_drops_it(core) -> None:
    cursor = await core.cursor(TOPIC, 0, "queue")
    cursor.reserve_deliveries(100)
    assert cursor.delivery_reserved == 0          # asked for, not stored
    await cursor.flush()
    assert cursor.delivery_reserved == 100
    cursor.note_delivered(9)
    crashed = await core.cursor(TOPIC, 0, "queue")     # as a process that died before the next flush finds it
    assert crashed.delivered_offset == 0 and crashed.delivery_reserved == 100
    assert crashed.maybe_delivered_below(earlier_end=40) == 40    # nothing past the log's end was handed out
    assert crashed.maybe_delivered_below(earlier_end=500) == 100
    cursor.end_reservation()
    await cursor.flush()
    closed = await core.cursor(TOPIC, 0, "queue")
    assert closed.maybe_delivered_below(earlier_end=500) == 10 and closed.delivery_reserved == 10


async def test_hand_outs_are_counted_from_the_second_up_to_a_bound_and_forgotten_once_acked(core, monkeypatch) -> None:
    monkeypatch.setattr(cursor_module, "MAX_COUNTED", 2)
    cursor = await core.cursor(TOPIC, 0, "counted")
    cursor.note_handed_out(1, 1)          # once: the reservation covers it
    cursor.note_handed_out(3, 2)
    cursor.note_handed_out(3, 3)
    cursor.note_handed_out(4, 2)
    cursor.note_handed_out(5, 2)          # a third offset: over the bound, not counted
    await cursor.flush()
    loaded = await core.cursor(TOPIC, 0, "counted")
    assert [loaded.times_handed_out(offset) for offset in (1, 3, 4, 5)] == [0, 3, 2, 0]
    loaded.ack(3)
    await loaded.flush()
    again = await core.cursor(TOPIC, 0, "counted")
    assert [again.times_handed_out(offset) for offset in (3, 4)] == [0, 2]
    again.note_handed_out(5, 2)           # room again
    assert again.times_handed_out(5) == 2


async def test_parked_groups_are_stored_whatever_their_bytes_until_released(core) -> None:
    cursor = await core.cursor(TOPIC, 0, "groups")
    cursor.park_group(b"\xff\x00 not utf-8", 7)
    cursor.park_group(b"customer-1", 9)
    await cursor.flush()
    loaded = await core.cursor(TOPIC, 0, "groups")
    assert loaded.parked_groups == {b"\xff\x00 not utf-8": 7, b"customer-1": 9}
    loaded.release_group(b"customer-1")
    await loaded.flush()
    assert (await core.cursor(TOPIC, 0, "groups")).parked_groups == {b"\xff\x00 not utf-8": 7}


async def test_commit_backwards_resets_the_position(core) -> None:
    cursor = await core.cursor(TOPIC, 1, "reset", initial_offset=10)
    cursor.commit(3)
    assert cursor.committed_offset == 3 and not cursor.is_acked(3) and cursor.is_acked(2)

"""The pieces of a shared subscription on their own: the FIFO backlog (log order, requeued first)
and the consumer picker (round robin, consumer priorities, single active consumer)."""

from __future__ import annotations

from core.queues.backlog import READ_AHEAD_MESSAGES, FifoBacklog
from core.queues.picker import ConsumerPicker
from core.queues.subscription import QueuedMessage


def message(offset: int) -> QueuedMessage:
    return QueuedMessage(offset, 0, None, b"x", ())


def drain(backlog, settled=lambda offset: False) -> list[int]:
    out = []
    while (head := backlog.peek(settled)) is not None:
        backlog.take()
        out.append(head.offset)
    return out


def test_fifo_hands_out_requeued_first_in_offset_order_then_the_log() -> None:
    backlog = FifoBacklog()
    backlog.extend(message(o) for o in (10, 11, 12))
    backlog.put_back(message(7))
    backlog.put_back(message(3))
    assert drain(backlog) == [3, 7, 10, 11, 12]


def test_fifo_drops_settled_heads_and_clears() -> None:
    backlog = FifoBacklog()
    backlog.extend(message(o) for o in range(5))
    backlog.put_back(message(1))
    assert drain(backlog, settled=lambda offset: offset % 2 == 1) == [0, 2, 4]
    backlog.extend(message(o) for o in range(5, 8))
    backlog.clear()
    assert backlog.peek(lambda offset: False) is None and len(backlog) == 0


def test_fifo_wants_data_until_its_read_ahead_is_full() -> None:
    backlog = FifoBacklog()
    backlog.extend(message(o) for o in range(READ_AHEAD_MESSAGES - 1))
    assert backlog.wants_data() and not backlog.holds_back(0, 100)
    backlog.extend([message(READ_AHEAD_MESSAGES)])
    assert not backlog.wants_data()


class Consumer:
    def __init__(self, name: str, priority: int = 0) -> None:
        self.name, self.priority = name, priority


def picks(picker: ConsumerPicker, count: int, room=lambda consumer: True) -> list[str]:
    return [picker.pick(room).name for _ in range(count)]


def test_round_robin_skips_consumers_without_room() -> None:
    picker = ConsumerPicker()
    a, b, c = Consumer("a"), Consumer("b"), Consumer("c")
    for consumer in (a, b, c):
        picker.add(consumer)
    assert picks(picker, 4) == ["a", "b", "c", "a"]
    assert picks(picker, 3, room=lambda consumer: consumer is not b) == ["c", "a", "c"]
    assert picker.pick(lambda consumer: False) is None


def test_higher_priorities_first_and_equals_take_turns() -> None:
    picker = ConsumerPicker()
    for consumer in (Consumer("low", -1), Consumer("high-a", 3), Consumer("high-b", 3)):
        picker.add(consumer)
    assert picks(picker, 3) == ["high-a", "high-b", "high-a"]
    assert picks(picker, 2, room=lambda consumer: consumer.priority < 0) == ["low", "low"]


def test_single_active_serves_the_earliest_registered_only() -> None:
    picker = ConsumerPicker(single_active=True)
    first, second = Consumer("first"), Consumer("second", priority=5)
    picker.add(first)
    picker.add(second)
    assert picks(picker, 2) == ["first", "first"]
    assert picker.pick(lambda consumer: consumer is not first) is None
    assert picker.remove(first) and picks(picker, 1) == ["second"]

"""The delivery acknowledgement timeout's timing (a coarse clock, never early, at most two ticks
late) and x-consumer-timeout, parsed and compared as RabbitMQ does."""

from __future__ import annotations

import pytest

from core.clock import FakeClock
from core.errors import InequivalentDeclaration, InvalidArgument
from core.queues.ack_timeout import DeliveryClock, timeout_for
from core.queues.policy import QueuePolicy, check_equivalent

TICK_MS = 1000


def test_a_delivery_is_overdue_once_held_longer_than_the_timeout_for_certain() -> None:
    clock = FakeClock()
    deliveries = DeliveryClock(clock, TICK_MS)
    clock.advance(TICK_MS - 1)                  # delivered just before the next tick: the stamp is early
    stamp = deliveries.stamp
    clock.advance(1)
    deliveries.tick()
    clock.advance(5000)
    assert not deliveries.overdue(stamp, 5000)  # perhaps held 5000 ms, perhaps 5999
    clock.advance(TICK_MS)
    assert deliveries.overdue(stamp, 5000)      # at least 5001 ms
    assert not deliveries.overdue(stamp, None)  # no timeout, never overdue


def test_checked_every_tick_a_timeout_is_noticed_at_most_two_ticks_late() -> None:
    for offset_ms in (0, 1, 500, 999):          # where between two ticks the delivery went out
        clock = FakeClock()
        deliveries = DeliveryClock(clock, TICK_MS)
        clock.advance(offset_ms)
        delivered_at, stamp = clock.now_ms(), deliveries.stamp
        clock.advance(TICK_MS - offset_ms)
        while True:
            deliveries.tick()
            if deliveries.overdue(stamp, 3000):
                break
            clock.advance(TICK_MS)
        held = clock.now_ms() - delivered_at
        assert 3000 < held <= 3000 + 2 * TICK_MS, (offset_ms, held)


def test_zero_times_out_at_the_first_ticks() -> None:
    clock = FakeClock()
    deliveries = DeliveryClock(clock, TICK_MS)
    stamp = deliveries.stamp
    clock.advance(TICK_MS)
    deliveries.tick()
    assert not deliveries.overdue(stamp, 0)
    clock.advance(TICK_MS)
    assert deliveries.overdue(stamp, 0)


def test_the_queue_timeout_wins_over_the_brokers_default() -> None:
    assert timeout_for(1000, 1_800_000) == 1000
    assert timeout_for(0, 1_800_000) == 0
    assert timeout_for(None, 1_800_000) == 1_800_000
    assert timeout_for(None, None) is None


def test_x_consumer_timeout_is_a_non_negative_integer() -> None:
    assert QueuePolicy.of("q", {"x-consumer-timeout": 60_000}).consumer_timeout_ms == 60_000
    assert QueuePolicy.of("q", {"x-consumer-timeout": 0}).consumer_timeout_ms == 0
    assert QueuePolicy.of("q", {}).consumer_timeout_ms is None
    with pytest.raises(InvalidArgument, match=r"^invalid arg 'x-consumer-timeout' for queue 'q': \{value_negative,-1\}$"):
        QueuePolicy.of("q", {"x-consumer-timeout": -1})
    with pytest.raises(InvalidArgument, match="^invalid arg 'x-consumer-timeout' for queue 'q': "
                                              '"expected integer, got longstr"$'):
        QueuePolicy.of("q", {"x-consumer-timeout": "60000"})
    with pytest.raises(InvalidArgument, match='"expected integer, got bool"'):
        QueuePolicy.of("q", {"x-consumer-timeout": True})


def test_a_redeclare_compares_it_on_quorum_queues_only_as_rabbitmq_does() -> None:
    quorum = {"x-queue-type": "quorum", "x-consumer-timeout": 1000}
    with pytest.raises(InequivalentDeclaration, match="^inequivalent arg 'x-consumer-timeout' for queue 'q': "
                                                      "received '2000' but current is '1000'$"):
        check_equivalent("q", (True, False, quorum), (True, False, {**quorum, "x-consumer-timeout": 2000}))
    check_equivalent("q", (True, False, quorum), (True, False, quorum))
    # a classic queue keeps the value it was declared with, whatever a redeclare says
    check_equivalent("q", (True, False, {"x-consumer-timeout": 1000}), (True, False, {"x-consumer-timeout": 2000}))
    check_equivalent("q", (True, False, {"x-consumer-timeout": 1000}), (True, False, {}))

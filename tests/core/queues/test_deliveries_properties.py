"""The decisions of a shared subscription (core/queues/deliveries.py), driven by random consumers:
hand-outs, acks, rejects with and without requeue, consumers that go away or hand what they hold
to their channel, on plain, priority-free FIFO and key-shared backlogs."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from core.clock import FakeClock
from core.cursor import AckSet, Cursor, CursorState
from core.names import TopicName
from core.queues.backlog import FifoBacklog
from core.queues.deliveries import DEAD_LETTERING, Deliveries
from core.queues.groups import BLOCK, GroupBacklog
from core.queues.message import QueuedMessage

MESSAGES = 24
GROUPS = (b"a", b"b", b"c")


@dataclass(eq=False)
class FakeConsumer:
    prefetch: int = 0
    auto_ack: bool = False
    got: list[int] = field(default_factory=list)

    def can_deliver(self) -> bool:
        return True


def memory_cursor() -> Cursor:
    return Cursor(None, FakeClock(), TopicName("public", "default", "q"), 0, "queue",
                  CursorState(committed=0, acked=AckSet()), None)


class SubscriptionDecisions(RuleBasedStateMachine):
    key_shared = False
    delivery_limit: int | None = None

    def __init__(self) -> None:
        super().__init__()
        cursor = memory_cursor()
        groups = GroupBacklog(BLOCK) if self.key_shared else None
        self.deliveries = Deliveries(cursor, groups if groups is not None else FifoBacklog(), groups=groups,
                                     delivery_limit=self.delivery_limit)
        self.group = {offset: GROUPS[offset % len(GROUPS)] for offset in range(MESSAGES)}
        self.deliveries.backlog.extend([QueuedMessage(offset, 0, self.group[offset], b"x", ())
                                        for offset in range(MESSAGES)])
        self.consumers = [FakeConsumer(prefetch=p) for p in (0, 1, 3)]
        self.channel = object()          # holds what a cancelled consumer held
        self.acked: set[int] = set()     # acknowledged (or dropped as dead) through the decisions
        self.dead: set[int] = set()

    # --- what happens -------------------------------------------------------------------------

    @rule(which=st.integers(0, 2), auto_ack=st.booleans())
    def hand_out(self, which: int, auto_ack: bool) -> None:
        deliveries, consumer = self.deliveries, self.consumers[which]
        message = deliveries.head(MESSAGES, MESSAGES)
        if message is None or not deliveries.has_room(consumer):
            return
        offset = message.offset
        assert not deliveries.is_held(offset), "handed out while held elsewhere"
        assert offset not in self.acked, "acknowledged, handed out again"
        if self.key_shared:
            group = self.group[offset]
            earlier = [o for o in range(offset) if self.group[o] == group]
            assert all(deliveries.cursor.is_acked(o) for o in earlier), "out of order within its group"
        deliveries.take_head()
        deliveries.hand_out(message, consumer, auto_ack)
        message.deliveries += 1
        consumer.got.append(offset)
        if auto_ack:
            self.acked.add(offset)

    @precondition(lambda self: self.deliveries.unacked_count)
    @rule(pick=st.integers(0, 1 << 16))
    def ack(self, pick: int) -> None:
        offset = self._some_held(pick)
        self.deliveries.ack([offset])
        self.acked.add(offset)

    @precondition(lambda self: self.deliveries.unacked_count)
    @rule(pick=st.integers(0, 1 << 16), requeue=st.booleans())
    def reject(self, pick: int, requeue: bool) -> None:
        offset = self._some_held(pick)
        for message in self.deliveries.take_back([offset]):
            if requeue:
                self._give_back(message)
            else:
                self._die(message)

    @rule(which=st.integers(0, 2), to_channel=st.booleans())
    def consumer_goes(self, which: int, to_channel: bool) -> None:
        consumer = self.consumers[which]
        if to_channel:
            self.deliveries.transfer(consumer, self.channel)
        else:
            for message in self.deliveries.release(consumer):
                self._give_back(message)

    @rule()
    def channel_closes(self) -> None:
        for message in self.deliveries.release(self.channel):
            self._give_back(message)

    def _some_held(self, pick: int) -> int:
        held = sorted(self.deliveries.unacked)
        return held[pick % len(held)]

    def _give_back(self, message: QueuedMessage) -> None:
        dead, _parked = self.deliveries.give_back(message)
        if dead:
            self._die(message)

    def _die(self, message: QueuedMessage) -> None:
        self.dead.add(message.offset)
        self.deliveries.drop([message])
        self.acked.add(message.offset)

    # --- what always holds --------------------------------------------------------------------

    @invariant()
    def each_held_message_has_one_holder(self) -> None:
        deliveries = self.deliveries
        holders = [self.channel, DEAD_LETTERING, *self.consumers]
        held = [deliveries.held_by(holder) for holder in holders]
        assert sum(len(offsets) for offsets in held) == deliveries.unacked_count
        assert set().union(*held) == set(deliveries.unacked)
        for offset in deliveries.unacked:
            assert deliveries.holder_of(offset) is not None

    @invariant()
    def prefetch_is_respected(self) -> None:
        for consumer in self.consumers:
            if consumer.prefetch:
                assert len(self.deliveries.held_by(consumer)) <= consumer.prefetch

    @invariant()
    def what_is_acknowledged_is_neither_held_nor_waiting(self) -> None:
        cursor = self.deliveries.cursor
        for offset in self.acked:
            assert cursor.is_acked(offset)
            assert not self.deliveries.is_held(offset)

    @invariant()
    def key_shared_holds_one_message_of_a_group_at_a_time(self) -> None:
        if self.key_shared:
            groups = [self.group[offset] for offset in self.deliveries.unacked]
            assert len(groups) == len(set(groups))

    def teardown(self) -> None:
        """Everything settles in the end: drain with one consumer that acks; nothing is lost, nothing
        comes twice after its ack."""
        deliveries = self.deliveries
        for holder in [self.channel, *self.consumers]:
            for message in deliveries.release(holder):
                self._give_back(message)
        finisher = FakeConsumer()
        while (message := deliveries.head(MESSAGES, MESSAGES)) is not None:
            assert message.offset not in self.acked
            deliveries.take_head()
            deliveries.hand_out(message, finisher, False)
            message.deliveries += 1
            deliveries.ack([message.offset])
            self.acked.add(message.offset)
        if not self.key_shared or self.delivery_limit is None:
            assert self.acked == set(range(MESSAGES))
            assert deliveries.cursor.committed_offset == MESSAGES


class KeySharedDecisions(SubscriptionDecisions):
    key_shared = True


class LimitedDecisions(SubscriptionDecisions):
    delivery_limit = 1


class KeySharedLimitedDecisions(SubscriptionDecisions):
    """A poison message parks its group (BLOCK): the rest of that group waits, others go on."""
    key_shared = True
    delivery_limit = 1

    @invariant()
    def a_parked_group_hands_out_nothing(self) -> None:
        parked = set(self.deliveries.parked_groups)
        for offset in self.deliveries.unacked:
            assert self.group[offset] not in parked


_settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestSubscriptionDecisions = SubscriptionDecisions.TestCase
TestSubscriptionDecisions.settings = _settings
TestKeySharedDecisions = KeySharedDecisions.TestCase
TestKeySharedDecisions.settings = _settings
TestLimitedDecisions = LimitedDecisions.TestCase
TestLimitedDecisions.settings = _settings
TestKeySharedLimitedDecisions = KeySharedLimitedDecisions.TestCase
TestKeySharedLimitedDecisions.settings = _settings

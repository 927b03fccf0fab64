"""A producer on one partition: its sends stored in order, receipts in order, duplicates dropped.

De-duplication follows Pulsar's broker-side rule: per partition and producer name, a message whose
sequence id is not above the highest one already accepted is a duplicate, acknowledged with the
id (-1, -1) and not stored again. The highest accepted id lives in memory for the broker's life
(`Dedup`); after a restart it is learned again from the partition's last records (their
pulsar.producer and pulsar.sequence headers, core_port.DEDUP_SCAN_RECORDS of them), so a client that
resends its pending messages after reconnecting stores each once. A send that fails rolls the
highest accepted id back to the highest stored, so the client's retry is stored.

Receipts go out in the order the sends came (the client matches each receipt with the head of its
pending queue), whatever order their storage completes in.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from core.names import TopicName

log = logging.getLogger("gateway.pulsar")

NO_ID = (1 << 64) - 1      # Pulsar's -1 in a uint64 field: the id of a duplicate


@dataclass(slots=True)
class DedupState:
    highest_pushed: int = -1      # highest sequence id accepted (stored or on its way)
    highest_stored: int = -1


class Dedup:
    """Per (topic, partition, producer name): the highest sequence ids, shared by all connections.

    At most MAX_STATES are kept, the least recently attached going first (a producer attached
    meanwhile keeps its own; one attaching later learns its state from the log again)."""

    MAX_STATES = 65_536

    def __init__(self) -> None:
        self._states: OrderedDict[tuple[TopicName, int, str], DedupState] = OrderedDict()

    def get(self, topic: TopicName, index: int, producer: str) -> DedupState | None:
        key = (topic, index, producer)
        state = self._states.get(key)
        if state is not None:
            self._states.move_to_end(key)
        return state

    def put(self, topic: TopicName, index: int, producer: str, highest: int) -> DedupState:
        state = self._states.setdefault((topic, index, producer), DedupState())
        while len(self._states) > self.MAX_STATES:
            self._states.popitem(last=False)
        state.highest_pushed = max(state.highest_pushed, highest)
        state.highest_stored = max(state.highest_stored, highest)
        return state


@dataclass(slots=True)
class _Pending:
    sequence_id: int
    highest_sequence_id: int
    done: asyncio.Future | None      # None: a duplicate, answered in its turn
    ledger: int = 0
    batch_offset: int = 0            # added to the stored base offset (0: the send's first message)


class Producer:
    def __init__(self, producer_id: int, topic: TopicName, index: int, name: str, state: DedupState,
                 write_receipt: Callable[[int, int, int, int, int], None],
                 write_error: Callable[[int, BaseException], None]) -> None:
        self.producer_id = producer_id
        self.topic = topic
        self.index = index
        self.name = name
        self.state = state
        self._write_receipt = write_receipt     # (sequence id, highest sequence id, ledger, entry, partition)
        self._write_error = write_error         # (sequence id, error)
        self._pending: deque[_Pending] = deque()
        self.closed = False
        self.exclusive = False       # opened in an exclusive access mode
        self.on_closed_by_broker: Callable[[Producer], None] = lambda producer: None   # set by its session

    def close_by_broker(self) -> None:
        """The broker lets go of the partition: the client is told to close the producer (it then
        looks the topic up again and resends what is pending)."""
        if not self.closed:
            self.on_closed_by_broker(self)

    def is_duplicate(self, sequence_id: int) -> bool:
        return sequence_id <= self.state.highest_pushed

    def duplicate(self, sequence_id: int, highest_sequence_id: int) -> None:
        self._pending.append(_Pending(sequence_id, highest_sequence_id, None))
        self._answer()

    def sent(self, sequence_id: int, highest_sequence_id: int, stored: asyncio.Future, *, ledger: int = 0) -> None:
        """A send on its way to storage; `stored` resolves to its first offset (or a held id)."""
        self.state.highest_pushed = max(self.state.highest_pushed, highest_sequence_id)
        self._pending.append(_Pending(sequence_id, highest_sequence_id, stored, ledger))
        stored.add_done_callback(lambda _: self._answer())

    def _answer(self) -> None:
        pending = self._pending
        while pending and (pending[0].done is None or pending[0].done.done()):
            item = pending.popleft()
            if self.closed:
                continue
            if item.done is None:
                self._write_receipt(item.sequence_id, item.highest_sequence_id, NO_ID, NO_ID, -1)
                continue
            if item.done.cancelled():
                continue
            error = item.done.exception()
            if error is not None:
                # not stored: the client's resend must be taken, so forget what was pushed since
                self.state.highest_pushed = self.state.highest_stored
                log.info("pulsar: send to %s-%d failed: %s", self.topic, self.index, error)
                self._write_error(item.sequence_id, error)
                continue
            self.state.highest_stored = max(self.state.highest_stored, item.highest_sequence_id)
            self._write_receipt(item.sequence_id, item.highest_sequence_id, item.ledger, item.done.result(),
                                self.index)

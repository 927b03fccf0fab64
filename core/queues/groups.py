"""FIFO message groups: the backlog of a key-shared queue (x-subscription-type = key-shared).

A message's group is its `queue.group` header (an AMQP publisher's x-group-id or JMSXGroupID,
copied there by the protocol) or, for a record no AMQP publisher wrote (a Kafka producer's), its
key. A message with neither is in no group and goes out as on a shared queue.

The rule: **a group has at most one message outstanding** (handed out and not yet settled), and
its messages go out in log order. So a group is with one consumer at a time; other groups flow to
the other consumers meanwhile; and a message given back (rejected with requeue, or held by a
consumer that went away) is the group's next message again, before every later one: nothing of a
group is ever skipped or overtaken. Letting the owner hold several messages of its group cannot
keep that promise: a client may ack the second before it nacks the first, or process the second
while the first waits for its redelivery, and neither can be undone.

When a message dies (rejected without requeue, expired, dropped by a length limit) the group moves
on once it is settled (dead-lettered copy durable, or dropped). When it dies because it was handed
out more often than the delivery limit, the queue's poison policy decides: `block` parks the group
(nothing more of it goes out until an operator releases it; the others keep flowing), `skip` moves
on as for any other death.

Layout: `_pending[group]` holds a group's waiting messages in offset order; `_ready` is a heap of
what may go out now, by offset (the head of each free group with pending messages, and each
message in no group); `_out` maps the offset of each outstanding grouped message to its group.
A group is "blocked" while it has a message outstanding or is parked. The read-ahead is larger
than a plain queue's because messages of blocked groups wait in it; once it is full of them,
reading stops until those groups move (GROUP_READ_AHEAD_*).

Owned by its subscription (and the event loop). The backlog interface is core/queues/backlog.py's.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from core.queues.attributes import EXCHANGE, GROUP

if TYPE_CHECKING:
    from core.partition import Partition
    from core.queues.message import QueuedMessage

GROUP_READ_AHEAD_MESSAGES = 16_384
GROUP_READ_AHEAD_BYTES = 64 << 20
BLOCK, SKIP = "block", "skip"
POISON_POLICIES = (BLOCK, SKIP)


def group_of(message: QueuedMessage) -> bytes | None:
    """The message's group: its `queue.group` header; else its key unless an AMQP publisher wrote it."""
    from_amqp = False
    for name, value in message.headers:
        if name == GROUP:
            return value
        if name == EXCHANGE:
            from_amqp = True
    return None if from_amqp else message.key


class GroupBacklog:
    strict = False
    missing = None             # bodies are read with the log

    def __init__(self, poison_policy: str = BLOCK, parked: dict[Hashable, int] | None = None) -> None:
        """`parked`: the groups parked when the queue was last open (its cursor keeps them)."""
        self.poison_policy = poison_policy
        self._pending: dict[Hashable, deque[QueuedMessage]] = {}
        self._ready: list[tuple[int, int, Hashable | None, QueuedMessage]] = []   # (offset, tie, group, message)
        self._tie = 0
        self._out: dict[int, Hashable] = {}            # outstanding offset -> its group
        self.parked: dict[Hashable, int] = dict(parked or {})   # group -> the offset that exhausted its deliveries
        self._blocked: set[Hashable] = set(self.parked)         # a message outstanding, or parked
        self._count = 0
        self._bytes = 0

    def __len__(self) -> int:
        return self._count

    # --- filling --------------------------------------------------------------------------------

    def extend(self, messages: list[QueuedMessage]) -> None:
        for message in messages:
            self._add(message, group_of(message), last=True)

    def put_back(self, message: QueuedMessage) -> None:
        """A message handed out before comes back: its group's next message again."""
        group = self._out.pop(message.offset, None)
        if group is None:
            group = group_of(message)
        elif group not in self.parked:
            self._blocked.discard(group)
        self._add(message, group, last=False)

    def _add(self, message: QueuedMessage, group: Hashable | None, *, last: bool) -> None:
        self._count += 1
        self._bytes += len(message.value or b"")
        if group is None:
            self._push(message, None)
            return
        pending = self._pending.get(group)
        if pending is None:
            pending = self._pending[group] = deque()
        if last:
            pending.append(message)
        else:
            pending.appendleft(message)
        if group not in self._blocked and pending[0] is message:
            # a new head of a free group: it may go out (a stale entry for the old head is dropped by peek)
            self._push(message, group)

    def _push(self, message: QueuedMessage, group: Hashable | None) -> None:
        self._tie += 1
        heapq.heappush(self._ready, (message.offset, self._tie, group, message))

    # --- taking ---------------------------------------------------------------------------------

    def peek(self, settled: Callable[[int], bool]) -> QueuedMessage | None:
        ready = self._ready
        while ready:
            _, _, group, message = ready[0]
            if group is not None:
                pending = self._pending.get(group)
                if group in self._blocked or not pending or pending[0] is not message:
                    heapq.heappop(ready)         # stale: the group moved, or is blocked meanwhile
                    continue
            if not settled(message.offset):
                return message
            self._drop_head()
        return None

    def take(self) -> None:
        """Remove what peek returned; a grouped message is outstanding until settled or put back."""
        _, _, group, message = heapq.heappop(self._ready)
        self._count -= 1
        self._bytes -= len(message.value or b"")
        if group is not None:
            self._pop_pending(group)
            self._out[message.offset] = group
            self._blocked.add(group)

    def _drop_head(self) -> None:
        """The head is settled already (acknowledged, or held): forget it, its group stays free."""
        _, _, group, message = heapq.heappop(self._ready)
        self._count -= 1
        self._bytes -= len(message.value or b"")
        if group is not None:
            self._pop_pending(group)
            self._push_head(group)

    def _pop_pending(self, group: Hashable) -> None:
        pending = self._pending[group]
        pending.popleft()
        if not pending:
            del self._pending[group]

    def _push_head(self, group: Hashable) -> None:
        pending = self._pending.get(group)
        if pending and group not in self._blocked:
            self._push(pending[0], group)

    # --- settling -------------------------------------------------------------------------------

    def settled(self, offset: int) -> None:
        """An outstanding message is gone for good (acknowledged, dead): its group moves on,
        unless parked."""
        group = self._out.pop(offset, None)
        if group is not None and group not in self.parked:
            self._blocked.discard(group)
            self._push_head(group)

    def poisoned(self, offset: int) -> Hashable | None:
        """The outstanding message at `offset` exhausted its deliveries and dies: with the block
        policy its group is parked (returned)."""
        group = self._out.get(offset)
        if group is None or self.poison_policy != BLOCK:
            return None
        self.parked[group] = offset
        self._blocked.add(group)
        return group

    def release(self, group: Hashable) -> bool:
        """An operator lets a parked group go on; False if it was not parked."""
        if self.parked.pop(group, None) is None:
            return False
        if group not in self._out.values():
            self._blocked.discard(group)
            self._push_head(group)
        return True

    # --- the rest of the backlog interface ------------------------------------------------------

    def clear(self) -> None:
        """Forget everything waiting (outstanding messages and parked groups stay as they are)."""
        self._pending.clear()
        self._ready.clear()
        self._count = self._bytes = 0

    def wants_data(self) -> bool:
        return self._count < GROUP_READ_AHEAD_MESSAGES and self._bytes < GROUP_READ_AHEAD_BYTES

    def holds_back(self, read_offset: int, high_watermark: int) -> bool:
        return False

    async def load_missing(self, partition: Partition, make: Callable[[Any], QueuedMessage]) -> None:
        return None

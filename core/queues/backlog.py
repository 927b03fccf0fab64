"""A queue's backlog: the messages read from the log (and those given back) waiting to be handed
out, in the order they go out. Two kinds behind one interface:

- `FifoBacklog`: log order, with messages given back (requeued) ahead of everything newer, in offset
  order; a bounded read-ahead (READ_AHEAD_MESSAGES / READ_AHEAD_BYTES).
- `PriorityReadAhead` (core/queues/priority.py): one lane per priority level, the highest first.

The interface, as the subscription uses it:

    peek(settled)     the next message, dropping heads `settled(offset)` names (acked, handed out);
                      None when empty (or, priority lanes, when the head's body must be loaded)
    take()            remove the message peek returned
    put_back(message) a message handed out before goes back to its place
    extend(messages)  messages newly read from the log, in offset order
    clear()           forget everything waiting
    wants_data()      room to read more from the log
    strict            True if it must see the whole log before anything goes out, then:
    holds_back(read_offset, high_watermark)   nothing may go out yet (the log must be read further)
    missing           the offset of a head whose body must be loaded first, or None
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.partition import Partition
    from core.queues.message import QueuedMessage

READ_AHEAD_MESSAGES = 512        # read more while fewer than this wait in memory
READ_AHEAD_BYTES = 8 << 20       # ... and while their bodies take less than this


class FifoBacklog:
    __slots__ = ("_buffer", "_bytes", "_requeued", "missing")
    strict = False          # hands out what it holds without waiting for the rest of the log

    def __init__(self) -> None:
        self._buffer: deque[QueuedMessage] = deque()          # read ahead, offset order
        self._bytes = 0
        self._requeued: list[tuple[int, QueuedMessage]] = []  # heap: handed out again first
        self.missing: int | None = None                        # never: bodies are read with the log

    def __len__(self) -> int:
        return len(self._buffer) + len(self._requeued)

    def peek(self, settled: Callable[[int], bool]) -> QueuedMessage | None:
        requeued, buffer = self._requeued, self._buffer
        while requeued:
            message = requeued[0][1]
            if not settled(message.offset):
                return message
            heapq.heappop(requeued)
        while buffer:
            message = buffer[0]
            if not settled(message.offset):
                return message
            self._pop_buffer()
        return None

    def take(self) -> None:
        if self._requeued:
            heapq.heappop(self._requeued)
        else:
            self._pop_buffer()

    def _pop_buffer(self) -> None:
        self._bytes -= len(self._buffer.popleft().value or b"")

    def put_back(self, message: QueuedMessage) -> None:
        heapq.heappush(self._requeued, (message.offset, message))

    def extend(self, messages: list[QueuedMessage]) -> None:
        self._buffer.extend(messages)
        self._bytes += sum([len(message.value) for message in messages if message.value])

    def clear(self) -> None:
        self._buffer.clear()
        self._bytes = 0
        self._requeued.clear()

    def wants_data(self) -> bool:
        return len(self._buffer) < READ_AHEAD_MESSAGES and self._bytes < READ_AHEAD_BYTES

    def holds_back(self, read_offset: int, high_watermark: int) -> bool:
        return False

    async def load_missing(self, partition: Partition, make: Callable[[Any], QueuedMessage]) -> None:
        return None

"""A subscription's dead messages: dead-lettered, or dropped when the queue has nowhere to send them.

What dies in one turn of the event loop goes to the dead-letter exchange together, one batch per
reason; until its copies are durable it stays unacknowledged, held by the queue itself
(core/queues/deliveries.py: DEAD_LETTERING), so a crash meanwhile dead-letters it again after the
restart rather than losing it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from core.queues.deliveries import DEAD_LETTERING, Deliveries
from core.queues.message import QueuedMessage


class DeadMessages:
    def __init__(self, deliveries: Deliveries, *, dead_letter: Callable[..., None] | None,
                 acknowledge: Callable[[list[int]], None], cursor_changed: Callable[[], None]) -> None:
        self._deliveries = deliveries
        self.dead_letter = dead_letter        # DeadLetterer.send; None: dead ones are dropped
        self._acknowledge = acknowledge       # once their copies are durable
        self._cursor_changed = cursor_changed
        self._dying: dict[str, list[QueuedMessage]] = {}
        self.closed = False

    def bury(self, messages: list[QueuedMessage], reason: str) -> None:
        """`messages`, already out of the queue's hands, died."""
        if self.dead_letter is None:
            self._deliveries.drop(messages)
            self._cursor_changed()
            return
        self._deliveries.hold_for(DEAD_LETTERING, messages)
        if not self._dying:
            asyncio.get_running_loop().call_soon(self._send)
        self._dying.setdefault(reason, []).extend(messages)

    def _send(self) -> None:
        dying, self._dying = self._dying, {}
        if self.closed or self.dead_letter is None:
            return      # still unacknowledged in the cursor: dead-lettered again after a restart
        for reason, messages in dying.items():
            self.dead_letter(messages, reason, self._acknowledge)

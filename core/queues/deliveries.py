"""The decisions of a shared subscription, kept apart from everything it does.

Which message goes out next (expired ones met at the head are taken out as dead), which consumer
has room for it, who holds what unacknowledged, what an ack, a reject or a departing consumer
does to that bookkeeping and to the cursor, what comes back to be handed out again before
anything newer, and what is dead: over the delivery limit (on a key-shared queue, its group
parked or moving on by the poison policy), rejected, or expired.

This is the subscription's state machine, as RabbitMQ's quorum queue keeps its delivery logic in
one (rabbit_fifo): it performs no I/O, has no clock of its own and no asyncio; each call changes
the state and returns what happened as data. The subscription around it
(core/queues/subscription.py) fills the backlog from the log, writes to consumers, traces,
dead-letters and persists the cursor these calls changed in memory.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING

from core.queues.message import UNCHECKED, QueuedMessage, deadline

if TYPE_CHECKING:
    from core.cursor import Cursor
    from core.queues.groups import GroupBacklog
    from core.queues.interface import Consumer

# Holders of messages that no client holds: those on their way to a dead-letter exchange, and those
# held for a delayed requeue (x-requeue-delay).
DEAD_LETTERING: Hashable = object()
REQUEUEING_LATER: Hashable = object()
AT_ONCE_MS = 500                 # past its deadline, a message read and handed out at once still counts as on time


class Deliveries:
    """What waits (`backlog`), who holds what, and the cursor's acknowledgements of one subscription."""

    def __init__(self, cursor: Cursor, backlog, *, groups: GroupBacklog | None = None,
                 message_ttl_ms: int | None = None, delivery_limit: int | None = None) -> None:
        self.cursor = cursor
        self.backlog = backlog            # core/queues/backlog.py's interface, in hand-out order
        self.groups = groups              # key-shared: the backlog itself, told of every settled message
        self.message_ttl_ms = message_ttl_ms
        self.delivery_limit = delivery_limit      # a message handed out more often than this dies
        self.unacked: dict[int, tuple[QueuedMessage, Hashable]] = {}
        self._held: dict[Hashable, set[int]] = {}        # owner -> offsets it has not acknowledged

    # --- what is held ---------------------------------------------------------------------------

    @property
    def unacked_count(self) -> int:
        return len(self.unacked)

    def is_held(self, offset: int) -> bool:
        """Handed out and not yet settled (or on its way to a dead-letter exchange)."""
        return offset in self.unacked

    def holder_of(self, offset: int) -> Hashable | None:
        entry = self.unacked.get(offset)
        return None if entry is None else entry[1]

    def held_by(self, owner: Hashable) -> set[int]:
        return set(self._held.get(owner, ()))

    def has_room(self, consumer: Consumer) -> bool:
        if consumer.prefetch and len(self._held.get(consumer, ())) >= consumer.prefetch:
            return False
        return consumer.can_deliver()

    def held_by_clients(self, offsets: Iterable[int]) -> list[int]:
        """Those of `offsets` a client holds (not the queue itself, dead-lettering or requeueing later)."""
        unacked = self.unacked
        return [o for o in offsets if o in unacked and unacked[o][1] not in (DEAD_LETTERING, REQUEUEING_LATER)]

    def settled(self, offset: int) -> bool:
        """Handed out and not yet settled, or acknowledged: not to be handed out (again)."""
        return offset in self.unacked or self.cursor.is_acked(offset)

    # --- handing out ----------------------------------------------------------------------------

    def head(self, read_offset: int, high_watermark: int) -> QueuedMessage | None:
        """The next message to hand out, its deadline computed, still in the backlog."""
        backlog = self.backlog
        if backlog.strict and backlog.holds_back(read_offset, high_watermark):
            return None
        message = backlog.peek(self.settled)
        if message is not None and message.expires_at == UNCHECKED:
            message.expires_at = deadline(message.timestamp_ms, message.headers, self.message_ttl_ms)
        return message

    def expired(self, message: QueuedMessage, now_ms: int, fresh_from: int | None) -> bool:
        """Whether the head `message` is past its deadline. Offsets from `fresh_from` on were read just
        now (and maybe held only until their delivery reservation is stored): those count as handed
        out at once (TTL 0 delivers or expires); not a message that expired well before it was read
        (a backlog read afresh after a restart or a takeover, or once a consumer came)."""
        expires_at = message.expires_at
        if expires_at is None or now_ms < expires_at:
            return False
        if message.deliveries > 0 or now_ms - expires_at > AT_ONCE_MS:
            return True
        return fresh_from is None or message.offset < fresh_from

    def take_head(self) -> None:
        """The message `head` returned leaves the backlog (handed out, or dead)."""
        self.backlog.take()

    def hand_out(self, message: QueuedMessage, owner: Hashable, auto_ack: bool) -> None:
        """`message`, taken from the head, goes to `owner`: held until settled, or acknowledged now.
        The caller counts the delivery (`message.deliveries`) once the owner has it."""
        cursor = self.cursor
        if auto_ack:
            cursor.ack(message.offset)
            if self.groups is not None:
                self.groups.settled(message.offset)
            return
        self._hold(message, owner)
        cursor.note_delivered(message.offset)
        if message.deliveries:
            cursor.note_handed_out(message.offset, message.deliveries + 1)

    def _hold(self, message: QueuedMessage, owner: Hashable) -> None:
        self.unacked[message.offset] = (message, owner)
        self._held.setdefault(owner, set()).add(message.offset)

    # --- settling -------------------------------------------------------------------------------

    def ack(self, offsets: Iterable[int]) -> None:
        """Acknowledge the held ones of `offsets` (others are not held: nothing to do)."""
        groups = self.groups
        for offset in offsets:
            if self._forget(offset) is not None:
                self.cursor.ack(offset)
                if groups is not None:
                    groups.settled(offset)

    def take_back(self, offsets: Iterable[int]) -> list[QueuedMessage]:
        """The held ones of `offsets` are no longer held by anyone; they are returned, in that order."""
        messages = []
        for offset in offsets:
            message = self._forget(offset)
            if message is not None:
                messages.append(message)
        return messages

    def release(self, owner: Hashable) -> list[QueuedMessage]:
        """Everything `owner` holds, no longer held by it."""
        offsets = self._held.pop(owner, None)
        if not offsets:
            return []
        return [self.unacked.pop(offset)[0] for offset in offsets]

    def transfer(self, owner: Hashable, holder: Hashable) -> None:
        """What `owner` holds is held by `holder` from now on."""
        offsets = self._held.pop(owner, None)
        if offsets:
            for offset in offsets:
                self.unacked[offset] = (self.unacked[offset][0], holder)
            self._held.setdefault(holder, set()).update(offsets)

    def put_back(self, message: QueuedMessage) -> None:
        """`message`, held by no one, waits again: out again before anything newer."""
        self.backlog.put_back(message)

    def over_delivery_limit(self, message: QueuedMessage) -> bool:
        limit = self.delivery_limit
        return limit is not None and message.deliveries > limit

    def give_back(self, message: QueuedMessage) -> tuple[bool, bytes | None]:
        """`message`, held by no one, comes back: waits again, or is dead past the delivery limit.
        Returns (dead, the group parked by it: key-shared with the poison policy that parks)."""
        if not self.over_delivery_limit(message):
            self.backlog.put_back(message)
            return False, None
        parked = self.groups.poisoned(message.offset) if self.groups is not None else None
        if parked is not None:
            self.cursor.park_group(parked, message.offset)
        return True, parked

    # --- dead messages --------------------------------------------------------------------------

    def drop(self, messages: Iterable[QueuedMessage]) -> None:
        """Dead with nowhere to go: acknowledged."""
        for message in messages:
            self.cursor.ack(message.offset)
            if self.groups is not None:
                self.groups.settled(message.offset)

    def hold_for(self, holder: Hashable, messages: Iterable[QueuedMessage]) -> None:
        """Held by the queue itself (DEAD_LETTERING, REQUEUEING_LATER) until acknowledged or put back."""
        for message in messages:
            self._hold(message, holder)

    # --- message groups (key-shared) ------------------------------------------------------------

    @property
    def parked_groups(self) -> dict[bytes, int]:
        return dict(self.groups.parked) if self.groups is not None else {}

    def release_group(self, group: bytes) -> bool:
        """Let a parked group go on; False if not parked."""
        if self.groups is None or not self.groups.release(group):
            return False
        self.cursor.release_group(group)
        return True

    # --- purging --------------------------------------------------------------------------------

    def purge(self, high_watermark: int) -> None:
        """Acknowledge everything below `high_watermark` that is not held, and forget what waits."""
        cursor = self.cursor
        start = cursor.committed_offset
        for offset in sorted(self.unacked):
            if offset > start:
                cursor.ack(start, offset)
            start = max(start, offset + 1)
        if start < high_watermark:
            cursor.ack(start, high_watermark)
        self.backlog.clear()

    def clear(self) -> None:
        self.backlog.clear()
        self.unacked.clear()
        self._held.clear()

    def _forget(self, offset: int) -> QueuedMessage | None:
        entry = self.unacked.pop(offset, None)
        if entry is None:
            return None
        owned = self._held.get(entry[1])
        if owned is not None:
            owned.discard(offset)
            if not owned:
                del self._held[entry[1]]
        return entry[0]


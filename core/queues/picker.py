"""Which consumer of a queue gets the next message: round robin among those with room; with
consumers of several priorities (x-priority), the highest-priority ones with room first, taking
turns among equals (RabbitMQ's consumer priorities); with a single active consumer, only the
earliest registered one still there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def priority_of(consumer: Any) -> int:
    return getattr(consumer, "priority", 0)


class ConsumerPicker:
    def __init__(self, *, single_active: bool = False) -> None:
        self.single_active = single_active
        self.consumers: list[Any] = []       # highest priority first; registration order among equals
        self._turn = 0                       # round-robin position in consumers
        self._by_priority = False            # consumers of more than one priority
        self._priority_turns: dict[int, int] = {}

    def add(self, consumer: Any) -> None:
        consumers, priority = self.consumers, priority_of(consumer)
        index = len(consumers)
        if not self.single_active:     # the active one of a single-active queue is the first registered
            index = next((i for i, other in enumerate(consumers) if priority_of(other) < priority), index)
        consumers.insert(index, consumer)
        if index < self._turn:
            self._turn += 1
        self._note_priorities()

    def remove(self, consumer: Any) -> bool:
        if consumer not in self.consumers:
            return False
        index = self.consumers.index(consumer)
        del self.consumers[index]
        if index < self._turn:
            self._turn -= 1
        self._note_priorities()
        return True

    def _note_priorities(self) -> None:
        self._by_priority = len({priority_of(consumer) for consumer in self.consumers}) > 1

    def pick(self, has_room: Callable[[Any], bool]) -> Any | None:
        """The consumer for the next message, or None when none has room."""
        consumers = self.consumers
        if not consumers:
            return None
        if self.single_active:
            return consumers[0] if has_room(consumers[0]) else None
        if self._by_priority:
            return self._pick_by_priority(has_room)
        for _ in range(len(consumers)):
            self._turn %= len(consumers)
            consumer = consumers[self._turn]
            self._turn += 1
            if has_room(consumer):
                return consumer
        return None

    def _pick_by_priority(self, has_room: Callable[[Any], bool]) -> Any | None:
        consumers, start = self.consumers, 0     # sorted by priority, highest first
        while start < len(consumers):
            priority = priority_of(consumers[start])
            end = start
            while end < len(consumers) and priority_of(consumers[end]) == priority:
                end += 1
            size, turn = end - start, self._priority_turns.get(priority, 0)
            for step in range(size):
                consumer = consumers[start + (turn + step) % size]
                if has_room(consumer):
                    self._priority_turns[priority] = (turn + step + 1) % size
                    return consumer
            start = end
        return None

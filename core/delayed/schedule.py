"""The in-memory schedule of held messages: (due ms, offset) pairs, no bodies, at most `limit` of them.

The bodies stay in the namespace's system topic; the schedule only says which offset is due when.
When more messages are held than `limit`, only the earliest ones are kept in memory and a horizon
remembers where the cut was made:

    invariant: every pending message due before `horizon` is in the heap
               (horizon None: every pending message is in the heap)

So the next message to deliver is always the heap's smallest. When the heap runs empty while a
horizon is set, the owner rescans the system topic (`begin_scan` / `offer` / `finish_scan`) and the
next `limit` earliest messages come back into memory.

While a scan runs, newly stored messages are put aside and merged when it finishes: those the scan
already saw (offset below where it ended) are dropped, so nothing is scheduled twice.
"""

from __future__ import annotations

import heapq

Entry = tuple[int, int]     # (due ms, offset in the system topic)


class Schedule:
    """Owned by one store's task; no locking."""

    def __init__(self, limit: int) -> None:
        if limit < 2:
            raise ValueError("a schedule needs room for at least two entries")
        self.limit = limit
        self.horizon: int | None = None
        self._heap: list[Entry] = []
        self._scanning = False
        self._set_aside: list[Entry] = []
        self._found: list[tuple[int, int]] = []     # during a scan: a max-heap (negated) of the earliest

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def needs_rescan(self) -> bool:
        return not self._heap and self.horizon is not None and not self._scanning

    def next_due(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def add(self, due_ms: int, offset: int) -> None:
        """A message was stored (durably) at `offset`, due at `due_ms`."""
        if self._scanning:
            self._set_aside.append((due_ms, offset))
        elif self.horizon is None or due_ms < self.horizon:
            heapq.heappush(self._heap, (due_ms, offset))
            if len(self._heap) > self.limit:
                self._shrink()
        # else: it stays on disk only; a rescan finds it

    def pop_due(self, now_ms: int, max_count: int) -> list[Entry]:
        """Up to `max_count` entries due at `now_ms`, earliest first, removed from the schedule."""
        due: list[Entry] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms and len(due) < max_count:
            due.append(heapq.heappop(heap))
        return due

    def _shrink(self) -> None:
        ordered = sorted(self._heap)
        keep = self.limit // 2
        self.horizon = ordered[keep][0]
        self._heap = ordered[:keep]      # a sorted list is a valid heap

    # --- scanning the system topic --------------------------------------------------------------

    def begin_scan(self) -> None:
        """Forget what is in memory; the scan brings back the earliest pending messages."""
        self._scanning = True
        self._heap = []
        self._found = []
        self.horizon = None

    def offer(self, due_ms: int, offset: int) -> None:
        """A pending (not yet delivered) message the scan read."""
        heapq.heappush(self._found, (-due_ms, -offset))
        if len(self._found) > self.limit:
            dropped_due = -heapq.heappop(self._found)[0]
            if self.horizon is None or dropped_due < self.horizon:
                self.horizon = dropped_due

    def finish_scan(self, scanned_to: int) -> None:
        """The scan read every offset below `scanned_to`."""
        for due_ms, offset in self._set_aside:
            if offset >= scanned_to:
                self.offer(due_ms, offset)
        self._heap = sorted((-due, -offset) for due, offset in self._found)
        self._found, self._set_aside = [], []
        self._scanning = False

    def abort_scan(self) -> None:
        """A scan (or a delivery pass) failed: nothing is in memory, everything waits for the next scan."""
        self._scanning = False
        self._found, self._set_aside, self._heap = [], [], []
        self.horizon = 0

"""Where entries begin, as reads found them, so that finding the entry holding an offset searches only
between the nearest entries already known instead of over a whole ledger.

An entry's offsets are only in its header, so finding the entry that holds an offset of a ledger
this process did not write is a search that reads one entry per step. Readers that jump around a
log (delayed messages read back in due order, consumers seeking, AMQP redeliveries) would pay it in
full for every offset: about 17 reads in a ledger of 100,000 entries. Every entry a read or a
search sees is noted here (a bounded number per ledger, thinned evenly when full), and a search
interpolates between the known entries around its offset, so it takes a few reads at first and
about one once the ledger's entries are known densely.
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable

MAX_PER_LEDGER = 8192


class EntryPositions:
    """Known (base offset, entry id) pairs per ledger, sorted by offset (both grow together)."""

    def __init__(self, max_per_ledger: int = MAX_PER_LEDGER) -> None:
        self._max = max_per_ledger
        self._known: dict[int, tuple[list[int], list[int]]] = {}

    def learn(self, ledger_id: int, entry_id: int, base_offset: int) -> None:
        offsets, entries = self._known.setdefault(ledger_id, ([], []))
        at = bisect.bisect_left(offsets, base_offset)
        if at < len(offsets) and offsets[at] == base_offset:
            return
        offsets.insert(at, base_offset)
        entries.insert(at, entry_id)
        if len(offsets) > self._max:     # keep every other one: still spread over the whole ledger
            del offsets[1::2], entries[1::2]

    def around(self, ledger_id: int, offset: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """The known entries nearest `offset`: (entry id, base offset) of the last one beginning at or
        below it and of the first one beginning above it; None where none is known."""
        known = self._known.get(ledger_id)
        if known is None:
            return None, None
        offsets, entries = known
        at = bisect.bisect_right(offsets, offset)
        below = (entries[at - 1], offsets[at - 1]) if at else None
        above = (entries[at], offsets[at]) if at < len(offsets) else None
        return below, above

    def forget(self, ledger_id: int) -> None:
        self._known.pop(ledger_id, None)


class EntrySearch:
    """The search for the first entry in [lo, hi) whose records reach past `offset` (hi if none),
    where entry `lo` begins at `lo_base` or later and entry `hi` at `hi_base`, one probe at a time,
    so that many searches can share their reads. Probes alternate between interpolating by offset
    (entries of similar sizes: a step or two) and halving (a bound on skewed ones)."""

    __slots__ = ("offset", "lo", "lo_base", "hi", "hi_base", "_halve")

    def __init__(self, offset: int, lo: int, lo_base: int, hi: int, hi_base: int) -> None:
        self.offset, self.lo, self.lo_base, self.hi, self.hi_base = offset, lo, lo_base, hi, hi_base
        self._halve = False

    @property
    def done(self) -> bool:
        return self.lo >= self.hi

    @property
    def found(self) -> int:
        """Once done: the entry holding the offset (or where it would be)."""
        return self.lo

    def probe(self) -> int:
        lo, hi = self.lo, self.hi
        if self._halve or self.hi_base <= self.lo_base:
            probe = (lo + hi) // 2
        else:
            probe = min(max(lo + (self.offset - self.lo_base) * (hi - lo) // (self.hi_base - self.lo_base), lo), hi - 1)
        self._halve = not self._halve
        return probe

    def narrow(self, probe: int, base: int, following: int) -> bool:
        """What entry `probe` holds (base .. following - 1); True if that is the offset's entry."""
        if base <= self.offset < following:
            self.lo = self.hi = probe
            return True
        if following > self.offset:
            self.hi, self.hi_base = probe, base
        else:
            self.lo, self.lo_base = probe + 1, following
        return False


async def search_entries(search: EntrySearch, base_and_next: Callable[[int], Awaitable[tuple[int, int]]]) -> int:
    """`search` to its end, reading an entry (its base and next offset) per probe."""
    while not search.done:
        probe = search.probe()
        search.narrow(probe, *await base_and_next(probe))
    return search.found

"""The time index of one namespace's held messages: keys (due ms, offset) in memory up to a limit,
the rest in sorted runs on storage, loaded as their time approaches. Pure logic, no I/O: the store
(store.py) writes and reads the runs and says when they are stored.

Memory holds at most `limit` keys (a heap, plus a dict offset -> (due, source run) for cancelling
and de-duplication). When more are added, the later half is cut off into runs of at most
`run_size` keys (sorted) that the store writes to __delayed_index; a run's first key is kept in
memory (about 100 bytes per run, so ten million held messages in 4,096-key runs cost about 250 KB):

    invariant: every pending key smaller than `horizon` (the smallest first key of a stored or
               spilling run) is in the heap

So the heap's top may be released only while it is below the horizon; when it is not (or the heap
is empty), the run with the smallest first key is loaded next. Nothing is ever rescanned: loading
a run reads `run_size` keys; a run that overflows the heap again is cut off again (amortised, as
each cut halves the heap).

Which held messages are released is kept as a *frontier* rather than a set: a delivery pass pops
keys in ascending order, so after a pass ending at key K every message indexed before the pass
(offset below B, the index's `indexed_to`) with key <= K is released. A release record stores
(B, K); a message (k, o) is released iff some pair has o < B and k <= K. Pairs are kept only while
no later pair dominates them (B grows, so a later pair with K' >= K replaces it): in steady state
the frontier is one pair; a message due in the past adds one until the next pass passes it. This
is what lets a restart, or loading a run written before a release, skip released messages without
remembering them one by one. Cancelled messages are remembered one by one (offset -> key) until the
frontier passes their key.

A checkpoint lists the runs that may still hold pending keys: those not loaded yet, those loaded
whose keys are still in the heap, and one written at checkpoint time with the keys added since the
previous checkpoint that are still in the heap ("fresh" ones). Loading a run again after a restart
skips what the frontier says is released, what was cancelled, and what is already in memory.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

from core.delayed.index_format import Key, RunInfo

_SHIFT = 64        # heap entries are single ints: due << 64 | offset (about 40 bytes each)
_MASK = (1 << _SHIFT) - 1
_FRESH = 0         # source of a key added by a hold (not loaded from a run)


def _pack(due: int, offset: int) -> int:
    return (max(due, 0) << _SHIFT) | offset


def _unpack(packed: int) -> Key:
    return packed >> _SHIFT, packed & _MASK


@dataclass(slots=True)
class _Loaded:
    info: RunInfo
    remaining: int        # its keys still in the heap


class DelayIndex:
    """Owned by one store's task; no locking."""

    def __init__(self, limit: int, run_size: int = 4096) -> None:
        if limit < 4 or run_size < 1:
            raise ValueError("an index needs room for at least four keys in memory")
        self.limit = limit
        self.run_size = run_size
        self._heap: list[int] = []
        self._pending: dict[int, tuple[int, int]] = {}      # offset -> (due, source run id)
        self._stored: list[tuple[Key, int]] = []             # heap of (first key, run id), not loaded
        self._runs: dict[int, RunInfo] = {}                  # run id -> info, stored and not loaded
        self._loaded: dict[int, _Loaded] = {}
        self._spilling: dict[int, list[Key]] = {}            # cut off, being written
        self._ids = itertools.count(1)
        self._fresh: list[int] = []                          # offsets added since the last checkpoint
        self.frontier: list[tuple[int, int, int]] = []       # (below offset, due, offset), see above
        self.cancelled: dict[int, Key] = {}
        self.indexed_to = 0       # every hold below this offset has been added

    # --- what is where ----------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys in memory."""
        return len(self._pending)

    @property
    def run_count(self) -> int:
        return len(self._runs) + len(self._spilling)

    @property
    def horizon(self) -> Key | None:
        firsts = [self._stored[0][0]] if self._stored else []
        firsts += [keys[0] for keys in self._spilling.values()]
        return min(firsts) if firsts else None

    def is_released(self, key: Key) -> bool:
        for below, due, offset in self.frontier:
            if key[1] < below:
                return key <= (due, offset)
        return False

    def is_pending_in_memory(self, offset: int) -> bool:
        return offset in self._pending

    def next_due(self) -> int | None:
        """The due time of the earliest pending key, or None (nothing held)."""
        top = self._top()
        horizon = self.horizon
        candidates = [key[0] for key in (top, horizon) if key is not None]
        return min(candidates) if candidates else None

    # --- adding -----------------------------------------------------------------------------------

    def add(self, due: int, offset: int, *, source: int = _FRESH) -> bool:
        """A held message (or a key of a run being loaded); False if it is released, cancelled or
        already in memory."""
        key = (due, offset)
        if offset in self._pending or offset in self.cancelled or self.is_released(key):
            return False
        self._pending[offset] = (due, source)
        heapq.heappush(self._heap, _pack(due, offset))
        if source == _FRESH:
            self._fresh.append(offset)
        return True

    def note_indexed(self, end: int) -> None:
        """Every hold below `end` has been added."""
        self.indexed_to = max(self.indexed_to, end)

    def overflow(self) -> list[tuple[int, list[Key]]]:
        """If memory holds more than `limit` keys: cut off the later half into runs to be written,
        as (spill id, sorted keys); the store calls `stored(spill id, index offset)` for each."""
        if len(self._pending) <= self.limit:
            return []
        ordered = sorted((due, offset, source) for offset, (due, source) in self._pending.items())
        keep = self.limit // 2
        cut = ordered[keep:]
        self._heap = [_pack(due, offset) for due, offset, _ in ordered[:keep]]    # sorted: a heap
        spills = []
        for start in range(0, len(cut), self.run_size):
            chunk = cut[start:start + self.run_size]
            spill_id = next(self._ids)
            keys = [(due, offset) for due, offset, _ in chunk]
            self._spilling[spill_id] = keys
            spills.append((spill_id, keys))
        for due, offset, source in cut:
            del self._pending[offset]
            self._source_left(source)
        return spills

    def stored(self, spill_id: int, index_offset: int) -> RunInfo:
        """A cut-off run is durable at `index_offset` of __delayed_index."""
        keys = self._spilling.pop(spill_id)
        info = RunInfo(index_offset, keys[0], keys[-1], len(keys), min(offset for _, offset in keys))
        self._add_run(spill_id, info)
        return info

    def spill_failed(self, spill_id: int) -> None:
        """Writing a run failed: its keys come back into memory (over the limit, until the next cut)."""
        for due, offset in self._spilling.pop(spill_id):
            self.add(due, offset)

    def _add_run(self, run_id: int, info: RunInfo) -> None:
        self._runs[run_id] = info
        heapq.heappush(self._stored, (info.first, run_id))

    def restore_run(self, info: RunInfo) -> None:
        """A run a checkpoint lists (at start)."""
        self._add_run(next(self._ids), info)

    # --- loading ----------------------------------------------------------------------------------

    def wanted_run(self) -> tuple[int, RunInfo] | None:
        """The stored run to load before anything else can be released, if any."""
        if not self._stored:
            return None
        first, run_id = self._stored[0]
        top = self._top()
        if top is not None and top < first:
            return None
        return run_id, self._runs[run_id]

    def waiting_for_spill(self) -> bool:
        """The earliest pending keys are in a run still being written."""
        top = self._top()
        return any(top is None or keys[0] <= top for keys in self._spilling.values())

    def load(self, run_id: int, keys: list[Key]) -> None:
        info = self._runs.pop(run_id)
        self._stored = [(first, found) for first, found in self._stored if found != run_id]
        heapq.heapify(self._stored)     # usually the top: O(runs), and runs are few
        added = sum(1 for due, offset in keys if self.add(due, offset, source=run_id))
        if added:
            self._loaded[run_id] = _Loaded(info, added)

    # --- releasing --------------------------------------------------------------------------------

    def _top(self) -> Key | None:
        heap, pending = self._heap, self._pending
        while heap:
            due, offset = _unpack(heap[0])
            found = pending.get(offset)
            if found is not None and found[0] == due:
                return due, offset
            heapq.heappop(heap)        # cancelled or cut off meanwhile
        return None

    def pop_due(self, now_ms: int, max_count: int) -> list[Key]:
        """Up to `max_count` due keys, ascending, removed from memory; none beyond the horizon."""
        due_keys: list[Key] = []
        horizon = self.horizon
        while len(due_keys) < max_count:
            top = self._top()
            if top is None or top[0] > now_ms or (horizon is not None and top >= horizon):
                break
            heapq.heappop(self._heap)
            self._source_left(self._pending.pop(top[1])[1])
            due_keys.append(top)
        return due_keys

    def pair_for(self, last: Key) -> tuple[int, int, int]:
        """The frontier pair of a pass that released keys up to `last`."""
        return self.indexed_to, last[0], last[1]

    def note_release(self, pair: tuple[int, int, int]) -> None:
        below, due, offset = pair
        key = (due, offset)
        if not any(kept[0] >= below and (kept[1], kept[2]) >= key for kept in self.frontier):
            self.frontier = [kept for kept in self.frontier if (kept[1], kept[2]) > key]
            self.frontier.append(pair)       # `below` only grows: it stays sorted
        for cancelled_offset, cancelled_key in list(self.cancelled.items()):
            if self.is_released(cancelled_key):
                del self.cancelled[cancelled_offset]

    def forget(self, offset: int) -> None:
        """A key released by a pass replayed at start (its frontier pair covers it from now on)."""
        found = self._pending.pop(offset, None)
        if found is not None:
            self._source_left(found[1])

    def _source_left(self, source: int) -> None:
        loaded = self._loaded.get(source)
        if loaded is not None:
            loaded.remaining -= 1
            if loaded.remaining <= 0:
                del self._loaded[source]

    # --- cancelling -------------------------------------------------------------------------------

    def cancel(self, due: int, offset: int) -> bool:
        """Cancel the held message at `offset` (due at `due`); False if it is not pending."""
        key = (due, offset)
        if self.is_released(key) or offset in self.cancelled:
            return False
        found = self._pending.pop(offset, None)
        if found is not None:
            self._source_left(found[1])
        self.cancelled[offset] = key      # until the frontier passes it: a run may still hold it
        return True

    # --- checkpoints --------------------------------------------------------------------------------

    def fresh_keys(self) -> tuple[int, list[Key]]:
        """A spill of the keys added by holds since the last checkpoint and still in memory: the
        checkpoint lists it (stored with `stored`, it becomes a loaded run)."""
        keys = sorted((self._pending[offset][0], offset) for offset in self._fresh
                      if offset in self._pending and self._pending[offset][1] == _FRESH)
        self._fresh = []
        spill_id = next(self._ids)
        self._spilling[spill_id] = keys
        return spill_id, keys

    def fresh_stored(self, spill_id: int, index_offset: int) -> RunInfo | None:
        """The fresh spill is durable: its keys stay in memory, sourced from it now."""
        keys = self._spilling.pop(spill_id)
        if not keys:
            return None
        info = RunInfo(index_offset, keys[0], keys[-1], len(keys), min(offset for _, offset in keys))
        remaining = 0
        for due, offset in keys:
            found = self._pending.get(offset)
            if found is not None and found == (due, _FRESH):
                self._pending[offset] = (due, spill_id)
                remaining += 1
        if remaining:
            self._loaded[spill_id] = _Loaded(info, remaining)
        return info

    def fresh_failed(self, spill_id: int) -> None:
        keys = self._spilling.pop(spill_id)
        self._fresh.extend(offset for _, offset in keys)

    def min_offset(self) -> int | None:
        """The smallest offset still pending (in memory, in a run, being spilled), or None."""
        found = [min(self._pending)] if self._pending else []
        found += [info.min_offset for info in self._runs.values()]
        found += [min(offset for _, offset in keys) for keys in self._spilling.values() if keys]
        return min(found) if found else None

    def listed_runs(self) -> list[RunInfo]:
        """The runs a checkpoint made now must list."""
        return list(self._runs.values()) + [loaded.info for loaded in self._loaded.values()]

"""The time index of one namespace's held messages: keys (due ms, offset) in memory up to a limit,
the rest in time buckets of sorted runs on storage, loaded as their time approaches. Pure logic,
no I/O: the store (store.py) writes and reads the runs and says when they are stored.

    heap      every pending key due before the horizon H, ordered (released from here)
    buckets   disjoint time intervals [start, end), all at or after H; each has runs on storage
              (__delayed_index) and a buffer of keys in memory not yet written
    memory    the heap and the buffers: at most `limit` keys (plus a dict offset -> due); past that, every buffer is written as one run per bucket

H is the start of the earliest bucket. A key held with a due time before H goes to the heap, any
other to the buffer of the bucket holding its due time (a new bucket if none does: a power-of-two
width of about an eighth of its distance from now, at least 1 s, aligned, clipped to its
neighbours, so far-away time is covered by few wide buckets and near time by narrow ones). A run
belongs to one bucket, so the runs of far buckets never need reading before their time.

When the earliest bucket comes within PRELOAD_MS (or the heap is empty) it is *dissolved*: if it
holds more than a quarter of `limit` keys and is wider than MIN_WIDTH_MS, into sixteen narrower
buckets (its keys re-added to their buffers, which are written again as needed); else H moves to
its end and its keys join the heap. Each key is written about once per level of narrowing and read
once per level; memory stays bounded except for more than a quarter of `limit` keys due within
MIN_WIDTH_MS of each other, which are loaded together.

Which held messages are released is kept as a *frontier* rather than a set: a delivery pass pops
keys in ascending order (all below H), so after a pass ending at key K every message indexed before
the pass (offset below B, the index's `indexed_to`) with key <= K is released. A release record
stores (B, K); a message (k, o) is released iff some pair has o < B and k <= K. Pairs are kept only
while no later pair dominates them (B grows, so a later pair with K' >= K replaces it): in steady
state the frontier is one pair; a message due in the past adds one until the next pass passes it.
That lets a restart, or a run read again, skip released messages without remembering them one by
one. Cancelled messages are remembered one by one (offset -> key) until the frontier passes them.

A checkpoint first writes every bucket's buffer as runs and the keys that joined the heap since the
last checkpoint as one more run, then lists the buckets' runs and the heap's runs that may still
hold a key of the heap (their last key is not below the heap's first): every pending key is in a
listed run, each run keeps within one bucket's time (the heap's within the time before the first
bucket), and a restart finds the buckets as narrow as they were. Writing only what joined the heap
keeps a checkpoint's cost to what changed, however many keys wait in memory. Reading a run again
after a restart skips what the frontier says is released, what was cancelled, and what is already
in memory.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from core.delayed.index_format import Key, RunInfo

_SHIFT = 64        # heap entries are single ints: due << 64 | offset (about 40 bytes each)
_MASK = (1 << _SHIFT) - 1
MIN_WIDTH_MS = 16
NEW_WIDTH_MIN_MS = 1024
PRELOAD_MS = 2_000
SPLIT_INTO = 16


def _pack(due: int, offset: int) -> int:
    return (max(due, 0) << _SHIFT) | offset


def _unpack(packed: int) -> Key:
    return packed >> _SHIFT, packed & _MASK


@dataclass(slots=True)
class Bucket:
    start: int
    end: int
    runs: dict[int, RunInfo | None] = field(default_factory=dict)   # run id -> info (None: being written)
    buffer: list[Key] = field(default_factory=list)                  # in memory, not written yet
    stored_keys: int = 0

    @property
    def width(self) -> int:
        return self.end - self.start


class DelayIndex:
    """Owned by one store's task; no locking."""

    def __init__(self, limit: int, run_size: int = 4096, now: Callable[[], int] = lambda: 0) -> None:
        """`now`: the clock (ms) new buckets are sized by."""
        if limit < 4 or run_size < 1:
            raise ValueError("an index needs room for at least four keys in memory")
        self._now = now
        self.limit = limit
        self.run_size = run_size
        self._heap: list[int] = []
        self._pending: dict[int, int] = {}                   # offset -> due, of the keys in memory
        self._starts: list[int] = []                         # of the buckets, sorted
        self._buckets: dict[int, Bucket] = {}                # by start
        self._dissolving: Bucket | None = None
        self._snapshots: list[RunInfo] = []                  # runs of keys that joined the heap
        self._heap_added: list[int] = []                     # joined it since the last of those
        self._spills: dict[int, tuple[Bucket | None, list[Key]]] = {}    # being written
        self._ids = itertools.count(1)
        self.frontier: list[tuple[int, int, int]] = []       # (below offset, due, offset), see above
        self.cancelled: dict[int, Key] = {}
        self.indexed_to = 0       # every hold below this offset has been added

    # --- what is where ----------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys in memory."""
        return len(self._pending)

    @property
    def run_count(self) -> int:
        return sum(len(bucket.runs) for bucket in self._buckets.values())

    @property
    def bucket_count(self) -> int:
        return len(self._buckets)

    @property
    def horizon(self) -> int | None:
        """Keys due before this are all in the heap (None: every pending key is)."""
        if self._dissolving is not None:
            return self._dissolving.start
        return self._starts[0] if self._starts else None

    def is_released(self, key: Key) -> bool:
        for below, due, offset in self.frontier:
            if key[1] < below:
                return key <= (due, offset)
        return False

    def next_due(self) -> int | None:
        """When the next thing is due: the earliest key in the heap, or the earliest bucket."""
        top = self._top()
        horizon = self.horizon
        candidates = [at for at in (top[0] if top is not None else None, horizon) if at is not None]
        return min(candidates) if candidates else None

    # --- adding -----------------------------------------------------------------------------------

    def add(self, due: int, offset: int) -> bool:
        """A held message (or a key of a run being read); False if it is released, cancelled or
        already in memory."""
        key = (due, offset)
        if offset in self._pending or offset in self.cancelled or self.is_released(key):
            return False
        self._pending[offset] = due
        horizon = self.horizon
        dissolving = self._dissolving
        if horizon is None or due < horizon or (dissolving is not None and due < dissolving.end):
            packed = _pack(due, offset)
            heapq.heappush(self._heap, packed)
            self._heap_added.append(packed)
        else:
            self._bucket_for(due).buffer.append(key)
        return True

    def _bucket_for(self, due: int, floor: int | None = None) -> Bucket:
        at = bisect.bisect_right(self._starts, due) - 1
        if at >= 0:
            found = self._buckets[self._starts[at]]
            if due < found.end:
                return found
        width = NEW_WIDTH_MIN_MS
        while width * 8 < due - self._now() and width < 1 << 40:
            width <<= 1
        start, end = due - due % width, due - due % width + width
        if at >= 0:
            start = max(start, self._buckets[self._starts[at]].end)
        if floor is not None:
            start = max(start, floor)
        if at + 1 < len(self._starts):
            end = min(end, self._starts[at + 1])
        return self._new_bucket(start, end)

    def _new_bucket(self, start: int, end: int) -> Bucket:
        bucket = Bucket(start, end)
        bisect.insort(self._starts, start)
        self._buckets[start] = bucket
        return bucket

    def _drop_bucket(self, bucket: Bucket) -> None:
        del self._buckets[bucket.start]
        self._starts.remove(bucket.start)

    def note_indexed(self, end: int) -> None:
        """Every hold below `end` has been added."""
        self.indexed_to = max(self.indexed_to, end)

    # --- writing runs -------------------------------------------------------------------------------

    def overflow(self) -> list[tuple[int, list[Key]]]:
        """If memory holds more than `limit` keys: the runs to write, as (spill id, sorted keys),
        every bucket's buffer first, then (if the heap alone is over) its later half as a new
        earliest bucket. The store calls `stored(spill id, index offset)` for each."""
        if len(self._pending) <= self.limit:
            return []
        spills = []
        for bucket in list(self._buckets.values()):
            spills += self._write_buffer(bucket)
        if len(self._pending) > self.limit and self._dissolving is None:
            spills += self._cut_heap()
        return spills

    def flush_buffers(self) -> list[tuple[int, list[Key]]]:
        """Every bucket's buffer as runs to write (before a checkpoint, so that it lists runs that
        keep to their buckets and a restart finds the buckets as they were)."""
        spills = []
        for bucket in list(self._buckets.values()):
            spills += self._write_buffer(bucket)
        return spills

    def _write_buffer(self, bucket: Bucket) -> list[tuple[int, list[Key]]]:
        keys = sorted(key for key in bucket.buffer if self._pending.get(key[1]) == key[0])
        bucket.buffer = []
        spills = []
        for start in range(0, len(keys), self.run_size):
            chunk = keys[start:start + self.run_size]
            spill_id = next(self._ids)
            self._spills[spill_id] = (bucket, chunk)
            bucket.runs[spill_id] = None
            bucket.stored_keys += len(chunk)
            for _, offset in chunk:
                del self._pending[offset]
            spills.append((spill_id, chunk))
        return spills

    def _cut_heap(self) -> list[tuple[int, list[Key]]]:
        """The heap's later half (by due time) goes into buckets (the earliest of which then
        starts at or before the cut, so everything left in the heap is still released first)."""
        ordered = sorted(key for key in map(_unpack, self._heap) if self._pending.get(key[1]) == key[0])
        if len(ordered) < 2:
            return []
        cut_due = ordered[len(ordered) // 2][0]
        if cut_due == ordered[0][0]:           # the lower half is one instant: cut above it
            later = [key for key in ordered if key[0] > cut_due]
            if not later:
                return []                      # all due at one instant: they stay
            cut_due = later[0][0]
        self._heap = [_pack(*key) for key in ordered if key[0] < cut_due]     # sorted: a heap
        touched = {}
        for key in ordered:
            if key[0] >= cut_due:        # into buckets sized by distance, as a hold would be
                bucket = self._bucket_for(key[0], floor=cut_due)     # none reaches below the cut
                bucket.buffer.append(key)
                touched[bucket.start] = bucket
        spills = []
        for bucket in touched.values():
            spills += self._write_buffer(bucket)
        return spills

    def stored(self, spill_id: int, index_offset: int) -> RunInfo | None:
        """A run is durable at `index_offset` of __delayed_index."""
        bucket, keys = self._spills.pop(spill_id)
        if not keys:
            return None
        info = RunInfo(index_offset, keys[0], keys[-1], len(keys), min(offset for _, offset in keys))
        if bucket is not None:
            bucket = self._bucket_at(keys[0][0])      # the same, or the one it was merged into
            if bucket is not None and spill_id in bucket.runs:
                bucket.runs[spill_id] = info
        return info

    def spill_failed(self, spill_id: int) -> None:
        """Writing a run failed: its keys come back into memory (over the limit, until the next try)."""
        bucket, keys = self._spills.pop(spill_id)
        if bucket is not None:
            bucket = self._bucket_at(keys[0][0])
            if bucket is not None and spill_id in bucket.runs:
                del bucket.runs[spill_id]
                bucket.stored_keys -= len(keys)
        for due, offset in keys:
            self.add(due, offset)

    def restore_runs(self, runs: list[RunInfo]) -> None:
        """Runs to read again in their time: those a checkpoint lists (at start), or those a failed
        dissolve did not read. A bucket covers each (overlapping buckets are merged)."""
        for info in runs:
            bucket = self._cover(info.first[0], info.last[0] + 1)
            bucket.runs[next(self._ids)] = info
            bucket.stored_keys += info.count

    def _cover(self, start: int, end: int) -> Bucket:
        """The one bucket covering [start, end): the buckets it overlaps merged, widened."""
        at = bisect.bisect_right(self._starts, start) - 1
        low = at if at >= 0 and self._buckets[self._starts[at]].end > start else at + 1
        high = bisect.bisect_left(self._starts, end)
        merged = [self._buckets[first] for first in self._starts[low:high]]
        if len(merged) == 1 and merged[0].start <= start and merged[0].end >= end:
            return merged[0]
        for bucket in merged:
            self._drop_bucket(bucket)
        cover = self._new_bucket(min([start, *(b.start for b in merged)]), max([end, *(b.end for b in merged)]))
        for bucket in merged:
            cover.runs.update(bucket.runs)
            cover.buffer += bucket.buffer
            cover.stored_keys += bucket.stored_keys
        return cover

    def _bucket_at(self, due: int) -> Bucket | None:
        at = bisect.bisect_right(self._starts, due) - 1
        if at >= 0 and due < self._buckets[self._starts[at]].end:
            return self._buckets[self._starts[at]]
        return None

    # --- reading runs -------------------------------------------------------------------------------

    def waiting_for_spill(self) -> bool:
        """The earliest bucket has a run still being written."""
        horizon = self.horizon
        if horizon is None:
            return False
        return any(info is None for info in self._buckets[horizon].runs.values()) \
            if horizon in self._buckets else False

    def bucket_to_dissolve(self, now_ms: int) -> Bucket | None:
        """The earliest bucket, once it is near and fits in memory (or the heap is empty), and
        fully written."""
        if self._dissolving is not None or not self._starts:
            return None
        bucket = self._buckets[self._starts[0]]
        top = self._top()
        if top is not None and top[0] < bucket.start and (bucket.start - now_ms > PRELOAD_MS
                                                           or len(self._pending) + bucket.stored_keys > self.limit):
            return None       # the heap has earlier keys to release first
        if any(info is None for info in bucket.runs.values()):
            return None
        return bucket

    def begin_dissolve(self, bucket: Bucket) -> list[tuple[int, RunInfo]]:
        """Take the bucket apart; the store reads each run returned and calls `load`, then
        `end_dissolve`. Big and wide: split into narrower buckets; else its keys join the heap."""
        self._drop_bucket(bucket)
        buffer = bucket.buffer
        if bucket.stored_keys + len(buffer) > self.limit // 4 and bucket.width > MIN_WIDTH_MS:
            width = max(MIN_WIDTH_MS, -(-bucket.width // SPLIT_INTO))
            for start in range(bucket.start, bucket.end, width):
                self._new_bucket(start, min(start + width, bucket.end))
            for key in buffer:
                if self._pending.get(key[1]) == key[0]:
                    self._bucket_for(key[0]).buffer.append(key)
        else:
            self._dissolving = bucket
            for key in buffer:
                if self._pending.get(key[1]) == key[0]:
                    packed = _pack(*key)
                    heapq.heappush(self._heap, packed)
                    self._heap_added.append(packed)
        return [(run_id, info) for run_id, info in bucket.runs.items() if info is not None]

    def load(self, run_id: int, info: RunInfo, keys: list[Key]) -> None:
        """The keys of a run of the bucket being dissolved."""
        for due, offset in keys:
            self.add(due, offset)

    def end_dissolve(self) -> None:
        self._dissolving = None

    # --- releasing --------------------------------------------------------------------------------

    def _top(self) -> Key | None:
        heap, pending = self._heap, self._pending
        while heap:
            due, offset = _unpack(heap[0])
            found = pending.get(offset)
            if found == due:
                return due, offset
            heapq.heappop(heap)        # cancelled or moved meanwhile
        return None

    def pop_due(self, now_ms: int, max_count: int) -> list[Key]:
        """Up to `max_count` due keys, ascending, removed from memory; none at or beyond the horizon."""
        due_keys: list[Key] = []
        horizon = self.horizon
        while len(due_keys) < max_count:
            top = self._top()
            if top is None or top[0] > now_ms or (horizon is not None and top[0] >= horizon):
                break
            heapq.heappop(self._heap)
            del self._pending[top[1]]
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
        self._pending.pop(offset, None)

    # --- cancelling -------------------------------------------------------------------------------

    def cancel(self, due: int, offset: int) -> bool:
        """Cancel the held message at `offset` (due at `due`); False if it is not pending."""
        key = (due, offset)
        if self.is_released(key) or offset in self.cancelled:
            return False
        self._pending.pop(offset, None)
        self.cancelled[offset] = key      # until the frontier passes it: a run may still hold it
        return True

    # --- checkpoints --------------------------------------------------------------------------------

    def heap_keys(self) -> tuple[int, list[Key]] | None:
        """A spill of the keys that joined the heap (they are due before the first bucket) since
        the last one and are still pending; None if there are none. A checkpoint lists the spills
        of the heap still needed beside the buckets' runs, and that is every pending key."""
        added, self._heap_added = self._heap_added, []
        pending = self._pending
        keys = sorted(key for key in map(_unpack, added) if pending.get(key[1]) == key[0])
        if not keys:
            return None
        spill_id = next(self._ids)
        self._spills[spill_id] = (None, keys)
        return spill_id, keys

    def heap_stored(self, spill_id: int, index_offset: int) -> None:
        self._snapshots.append(self.stored(spill_id, index_offset))

    def heap_failed(self, spill_id: int) -> None:
        _, keys = self._spills.pop(spill_id)
        self._heap_added += [_pack(*key) for key in keys]

    def min_offset(self) -> int | None:
        """The smallest offset still pending (in memory or in a run), or None."""
        found = [min(self._pending)] if self._pending else []
        found += [info.min_offset for bucket in self._buckets.values() for info in bucket.runs.values()
                  if info is not None]
        found += [min(offset for _, offset in keys) for _, keys in self._spills.values() if keys]
        return min(found) if found else None

    def listed_runs(self) -> list[RunInfo]:
        """The runs a checkpoint made now must list: the buckets' and the heap's (just written)."""
        runs = [info for bucket in self._buckets.values() for info in bucket.runs.values() if info is not None]
        # A spill of the heap is needed while a key of it may still be in the heap: those that
        # left it were released, cancelled or written to runs of their buckets.
        top = self._top()
        self._snapshots = [info for info in self._snapshots if top is not None and info.last >= top]
        return runs + self._snapshots

"""Cursors: a named consumer position on a partition.

A cursor is a committed offset (everything below it is consumed: Pulsar's mark-delete position,
Kafka's committed offset) plus the set of offsets above it acknowledged one by one (per-message
acks of shared subscriptions and AMQP queues). Acknowledging the offset at the committed position
moves the position past every contiguous acknowledged offset.

Persisted at /cursors/<tenant>/<namespace>/<topic>/<partition>/<cursor name>:

    {"committed": int, "acked": [[first, end), ...], "metadata": str, "updated_ms": int,
     "delivered": int, "reserved": int, "handed_out": [[offset, times], ...],
     "parked": [[group (base64), offset], ...], "leader_epoch": int}

"delivered" (written only when set) is one past the highest offset handed out through the cursor
(a queue's deliveries) as of the write. "reserved" (written only while above "delivered") bounds
what may have been handed out since: a queue hands out an offset only once a reservation above
it is stored, so after a crash or a failover everything below `maybe_delivered_below` that is not
acknowledged may have been seen by a consumer and goes out again marked redelivered, although the
last "delivered" written is older than the last hand-out. A clean close drops the reservation.
"handed_out" (written only when not empty) counts the hand-outs of unacknowledged offsets handed
out more than once (a quorum queue's delivery count, which its delivery limit is checked against),
for at most MAX_COUNTED offsets at a time; one handed out once is covered by "delivered"/"reserved".
"parked" (written only when not empty) lists a key-shared queue's groups parked by a poison message
(core/queues/groups.py) and the offset of that message, until an operator releases them.
"leader_epoch" (written only when known) is the leader epoch a Kafka consumer committed with its
offset.
"""

from __future__ import annotations

import base64
import bisect
import json
from dataclasses import dataclass, field

from core.clock import Clock
from core.names import TopicName, check_name
from storage.api import MetadataStore, NoNode


MAX_COUNTED = 4096     # offsets whose hand-outs a cursor counts at a time (a bound on the document)


class AckSet:
    """Disjoint, sorted, half-open ranges [first, end) of acknowledged offsets."""

    __slots__ = ("_starts", "_ends")

    def __init__(self, ranges: list[tuple[int, int]] | None = None) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for first, end in ranges or ():
            self.add(first, end)

    def add(self, first: int, end: int) -> None:
        if end <= first:
            return
        # every range that overlaps or touches [first, end) merges into it
        lo = bisect.bisect_left(self._ends, first)
        hi = bisect.bisect_right(self._starts, end)
        if lo < hi:
            first = min(first, self._starts[lo])
            end = max(end, self._ends[hi - 1])
        self._starts[lo:hi] = [first]
        self._ends[lo:hi] = [end]

    def __contains__(self, offset: int) -> bool:
        i = bisect.bisect_right(self._starts, offset) - 1
        return i >= 0 and offset < self._ends[i]

    def drop_below(self, offset: int) -> None:
        """Forget everything below `offset` (it is covered by the committed position)."""
        i = bisect.bisect_right(self._ends, offset)
        del self._starts[:i], self._ends[:i]
        if self._starts and self._starts[0] < offset:
            self._starts[0] = offset

    def run_from(self, offset: int) -> int:
        """The end of the acknowledged run that starts at `offset` (offset itself if none)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i >= 0 and self._starts[i] <= offset < self._ends[i]:
            return self._ends[i]
        return offset

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends))

    def __len__(self) -> int:
        return sum(e - s for s, e in zip(self._starts, self._ends))


@dataclass(slots=True)
class CursorState:
    committed: int
    acked: AckSet
    metadata: str = ""
    delivered: int = 0
    reserved: int = 0        # hand-outs may reach up to here once it is stored
    handed_out: dict[int, int] = field(default_factory=dict)   # offset -> hand-outs, when more than one
    parked: dict[bytes, int] = field(default_factory=dict)      # group -> the offset that parked it
    leader_epoch: int = -1
    updated_ms: int = 0      # when last stored (0: never)


class Cursor:
    """One cursor; owned by the event loop. Changes are in memory until `flush`."""

    def __init__(self, store: MetadataStore, clock: Clock, topic: TopicName, partition: int, name: str,
                 state: CursorState, version: int | None) -> None:
        self.topic = topic
        self.partition = partition
        self.name = name
        self._store = store
        self._clock = clock
        self._state = state
        self._version = version
        self._dirty = False
        self._reserved_stored = max(state.delivered, state.reserved)   # as last stored (state is as loaded)

    @staticmethod
    def path(topic: TopicName, partition: int, name: str) -> str:
        return f"/cursors/{topic.path}/{partition}/{name}"

    @classmethod
    async def load(cls, store: MetadataStore, clock: Clock, topic: TopicName, partition: int, name: str,
                   *, initial_offset: int = 0) -> "Cursor":
        check_name("cursor", name)
        node = await store.get(cls.path(topic, partition, name))
        if node is None:
            return cls(store, clock, topic, partition, name, CursorState(initial_offset, AckSet()), None)
        doc = json.loads(node.value)
        state = CursorState(doc["committed"], AckSet([tuple(r) for r in doc["acked"]]), doc.get("metadata", ""),
                            delivered=doc.get("delivered", 0), reserved=doc.get("reserved", 0),
                            handed_out={offset: times for offset, times in doc.get("handed_out", ())},
                            parked={base64.b64decode(group): offset for group, offset in doc.get("parked", ())},
                            leader_epoch=doc.get("leader_epoch", -1), updated_ms=doc.get("updated_ms", 0))
        return cls(store, clock, topic, partition, name, state, node.version)

    @property
    def committed_offset(self) -> int:
        return self._state.committed

    @property
    def metadata(self) -> str:
        return self._state.metadata

    @property
    def leader_epoch(self) -> int:
        """The leader epoch committed with the offset (-1: none)."""
        return self._state.leader_epoch

    @property
    def updated_ms(self) -> int:
        """When the cursor was last stored (0: never): a commit's timestamp."""
        return self._state.updated_ms

    @property
    def exists(self) -> bool:
        return self._version is not None or self._dirty

    @property
    def delivered_offset(self) -> int:
        """One past the highest offset noted as handed out (0: none)."""
        return self._state.delivered

    def note_delivered(self, offset: int) -> None:
        """`offset` was handed out; persisted with the next flush."""
        if offset >= self._state.delivered:
            self._state.delivered = offset + 1
            self._dirty = True

    @property
    def delivery_reserved(self) -> int:
        """Offsets below this may be handed out: the bound a load would find in the store."""
        return self._reserved_stored

    def reserve_deliveries(self, end: int) -> None:
        """Ask for hand-outs below `end`: `delivery_reserved` covers them once the next flush stored it."""
        if end > self._state.reserved:
            self._state.reserved = end
            self._dirty = True

    def end_reservation(self) -> None:
        """Nothing more will be handed out through this cursor here (a clean close): the next flush
        stores what was really handed out, so a restart marks nothing beyond it as redelivered."""
        if self._state.reserved:
            self._state.reserved = 0
            self._dirty = True

    def maybe_delivered_below(self, earlier_end: int) -> int:
        """After a load: offsets below this may have been handed out by an earlier owner. The
        reservation counts only up to `earlier_end`, the log's end as this process found it:
        nothing past it existed to hand out."""
        return max(self._state.delivered, min(self._reserved_stored, earlier_end))

    def note_handed_out(self, offset: int, times: int) -> None:
        """`offset` was handed out for the `times`-th time (counted from the second, while fewer than
        MAX_COUNTED offsets are); persisted with the next flush, forgotten once it is acknowledged."""
        counted = self._state.handed_out
        if times > 1 and (offset in counted or len(counted) < MAX_COUNTED):
            counted[offset] = times
            self._dirty = True

    def times_handed_out(self, offset: int) -> int:
        """How often `offset` was handed out, as counted (0: not counted, at most once)."""
        return self._state.handed_out.get(offset, 0)

    @property
    def parked_groups(self) -> dict[bytes, int]:
        """A key-shared queue's parked groups, each with the offset of the message that parked it."""
        return dict(self._state.parked)

    def park_group(self, group: bytes, offset: int) -> None:
        self._state.parked[group] = offset
        self._dirty = True

    def release_group(self, group: bytes) -> None:
        if self._state.parked.pop(group, None) is not None:
            self._dirty = True

    def is_acked(self, offset: int) -> bool:
        return offset < self._state.committed or offset in self._state.acked

    def acked_ranges(self) -> list[tuple[int, int]]:
        return self._state.acked.ranges()

    def commit(self, offset: int, metadata: str = "", leader_epoch: int = -1) -> None:
        """Kafka-style: the position becomes `offset`, forwards or backwards (a reset)."""
        self._state.committed = offset
        self._state.metadata = metadata
        self._state.leader_epoch = leader_epoch
        self._state.acked.drop_below(offset)
        self._dirty = True

    def ack(self, first: int, end: int | None = None) -> None:
        """Acknowledge [first, end) (one offset without end); the position moves past any run at it."""
        end = first + 1 if end is None else end
        self._state.acked.add(max(first, self._state.committed), end)
        run_end = self._state.acked.run_from(self._state.committed)
        if run_end > self._state.committed:
            self._state.committed = run_end
            self._state.acked.drop_below(run_end)
        self._dirty = True

    async def flush(self) -> None:
        """Persist the cursor if it changed. Durable when it returns."""
        if not self._dirty:
            return
        self._state.updated_ms = self._clock.now_ms()
        fields = {"committed": self._state.committed, "acked": self._state.acked.ranges(),
                  "metadata": self._state.metadata, "updated_ms": self._state.updated_ms}
        delivered, reserved = self._state.delivered, self._state.reserved
        if delivered:
            fields["delivered"] = delivered
        if reserved > delivered:
            fields["reserved"] = reserved
        if self._state.handed_out:
            counted = self._state.handed_out = {offset: times for offset, times in self._state.handed_out.items()
                                                if not self.is_acked(offset)}
            if counted:
                fields["handed_out"] = sorted(counted.items())
        if self._state.parked:
            fields["parked"] = [[base64.b64encode(group).decode(), offset]
                                for group, offset in self._state.parked.items()]
        if self._state.leader_epoch >= 0:
            fields["leader_epoch"] = self._state.leader_epoch
        doc = json.dumps(fields, separators=(",", ":")).encode()
        self._dirty = False
        bound = max(delivered, reserved)
        # While the write is under way the store holds the old bound or the new: count on the lower.
        self._reserved_stored = min(self._reserved_stored, bound)
        try:
            self._version = await self._store.put(self.path(self.topic, self.partition, self.name), doc)
        except BaseException:
            self._dirty = True
            raise
        self._reserved_stored = bound

    async def delete(self) -> None:
        try:
            await self._store.delete(self.path(self.topic, self.partition, self.name))
        except NoNode:
            pass
        self._version = None
        self._dirty = False

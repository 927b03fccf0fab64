"""A managed log's ledger list, kept at /logs/<log name> and changed only by compare-and-set, and the
header each entry carries inside its ledger.

Ledger list, JSON:

    {"log_start_offset": int,
     "ledgers": [{"ledger_id": int, "first_offset": int,
                  "end_offset": int,       # one past the last offset; -1 while the ledger is open
                  "entries": int, "size_bytes": int, "max_timestamp_ms": int, "ctime_ms": int}, ...],
     "epochs": [[epoch, start_offset, "writer"], ...]}     # absent in lists written before epochs

Leader epochs (Kafka's KIP-101/320): a log's epoch changes each time a new writer takes it over, and
`epochs` records where each began, oldest first; the records a writer appends carry its epoch.
"writer" names the process that began the epoch, so that the same process opening the log again
(after closing it idle) keeps its epoch while any other process, or a restart, begins a new one.

Offsets are continuous across ledgers: each ledger starts where the previous one ended. This list is
the whole mapping from a log to its data, so a new owner takes a log over by fencing its last
ledger and swapping the list, without moving any data.

Entry header (28 bytes, big-endian), before the entry's own bytes:

    offset  size  field
    0       8     base offset          i64, first offset of the entry
    8       4     record count         i32, offsets the entry covers (>= 1)
    12      8     max timestamp        i64, largest timestamp inside the entry (ms)
    20      8     ledger max timestamp i64, largest timestamp in the ledger up to this entry, so
                                       entries are sorted by it and a time lookup can bisect
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass, field, replace

ENTRY_HEADER = struct.Struct(">qiqq")


@dataclass(frozen=True, slots=True)
class LedgerRange:
    ledger_id: int
    first_offset: int
    end_offset: int = -1
    entries: int = 0
    size_bytes: int = 0
    max_timestamp_ms: int = -1
    ctime_ms: int = 0

    @property
    def is_open(self) -> bool:
        return self.end_offset < 0

    def sealed(self, end_offset: int, entries: int, size_bytes: int, max_timestamp_ms: int) -> "LedgerRange":
        return replace(self, end_offset=end_offset, entries=entries, size_bytes=size_bytes,
                       max_timestamp_ms=max_timestamp_ms)


@dataclass(frozen=True, slots=True)
class EpochStart:
    epoch: int
    start_offset: int
    writer: str


NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class LedgerList:
    log_start_offset: int = 0
    ledgers: tuple[LedgerRange, ...] = field(default_factory=tuple)
    epochs: tuple[EpochStart, ...] = field(default_factory=tuple)

    def to_json(self) -> bytes:
        return json.dumps({"log_start_offset": self.log_start_offset,
                           "ledgers": [asdict(r) for r in self.ledgers],
                           "epochs": [[e.epoch, e.start_offset, e.writer] for e in self.epochs]},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "LedgerList":
        doc = json.loads(raw)
        return cls(doc["log_start_offset"], tuple(LedgerRange(**r) for r in doc["ledgers"]),
                   tuple(EpochStart(*e) for e in doc.get("epochs", ())))

    @property
    def end_offset(self) -> int:
        """One past the last offset of the closed ledgers (the log's end once none is open)."""
        return max(self.ledgers[-1].end_offset if self.ledgers else 0, self.log_start_offset)

    @property
    def leader_epoch(self) -> int:
        return self.epochs[-1].epoch if self.epochs else NO_EPOCH

    def taken_over_by(self, writer: str) -> "LedgerList":
        """The list with a new epoch begun by `writer` at the end of the log, unless `writer` began
        the current one."""
        if self.epochs and self.epochs[-1].writer == writer:
            return self
        return replace(self, epochs=self.epochs + (EpochStart(self.leader_epoch + 1, self.end_offset, writer),))

    def without_epochs_before(self, offset: int) -> "LedgerList":
        """The list without the epochs that ended at or before `offset` (the new log start)."""
        keep = len(self.epochs) - 1
        while keep > 0 and self.epochs[keep].start_offset > offset:
            keep -= 1
        return replace(self, epochs=self.epochs[keep:])

    def epoch_at(self, offset: int) -> int:
        """The epoch of the record at `offset`: NO_EPOCH before the first recorded epoch."""
        epoch = NO_EPOCH
        for entry in self.epochs:
            if entry.start_offset > offset:
                break
            epoch = entry.epoch
        return epoch

    def epoch_end(self, epoch: int, end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer for `epoch`, where `end_offset` is the log's end now:
        (the largest epoch <= `epoch`, the start of the epoch after it, or `end_offset` if it is the
        current one). An epoch older than every recorded one gets (epoch, start of the first
        recorded); a newer one than the current, or none recorded: (NO_EPOCH, -1)."""
        if not self.epochs or epoch > self.leader_epoch or epoch < 0:
            return NO_EPOCH, -1
        floor = None
        for entry in self.epochs:
            if entry.epoch > epoch:
                return (epoch if floor is None else floor.epoch), entry.start_offset
            floor = entry
        return floor.epoch, end_offset

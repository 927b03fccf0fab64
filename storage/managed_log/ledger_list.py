"""A managed log's ledger list, kept at /logs/<log name> and changed only by compare-and-set, and the
header each entry carries inside its ledger.

Ledger list, JSON:

    {"log_start_offset": int,
     "ledgers": [{"ledger_id": int, "first_offset": int,
                  "end_offset": int,       # one past the last offset; -1 while the ledger is open
                  "entries": int, "size_bytes": int, "max_timestamp_ms": int, "ctime_ms": int}, ...]}

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
class LedgerList:
    log_start_offset: int = 0
    ledgers: tuple[LedgerRange, ...] = field(default_factory=tuple)

    def to_json(self) -> bytes:
        return json.dumps({"log_start_offset": self.log_start_offset,
                           "ledgers": [asdict(r) for r in self.ledgers]}, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "LedgerList":
        doc = json.loads(raw)
        return cls(doc["log_start_offset"], tuple(LedgerRange(**r) for r in doc["ledgers"]))

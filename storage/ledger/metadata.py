"""A ledger's metadata, kept at /ledgers/<id> in the metadata store and changed only by compare-and-set.

JSON document:

    {"state": "OPEN" | "IN_RECOVERY" | "CLOSED",
     "last_entry_id": int,            # meaningful once CLOSED (-1: empty)
     "length": int,                   # payload bytes, once CLOSED
     "ensemble_size": E, "write_quorum": Qw, "ack_quorum": Qa,
     "ensembles": [[first_entry_id, [bookie id, ...]], ...],   # one fragment per ensemble change
     "properties": {str: str}, "ctime_ms": int}
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field, replace


class LedgerState(str, enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    ensembles: tuple[tuple[int, tuple[str, ...]], ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    ctime_ms: int = 0

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise ValueError("need ensemble >= write quorum >= ack quorum >= 1")

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble of the fragment that holds `entry_id`."""
        current = self.ensembles[0][1]
        for first_entry_id, bookies in self.ensembles:
            if first_entry_id > entry_id:
                break
            current = bookies
        return current

    def write_set(self, entry_id: int) -> tuple[str, ...]:
        """The Qw bookies that store `entry_id`: striped over the ensemble from index entry_id mod E."""
        ensemble = self.ensemble_for(entry_id)
        start = entry_id % self.ensemble_size
        return tuple(ensemble[(start + i) % self.ensemble_size] for i in range(self.write_quorum))

    def closed(self, last_entry_id: int, length: int) -> "LedgerMetadata":
        return replace(self, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)

    def to_json(self) -> bytes:
        doc = asdict(self)
        doc["state"] = self.state.value
        doc["ensembles"] = [[first, list(bookies)] for first, bookies in self.ensembles]
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "LedgerMetadata":
        doc = json.loads(raw)
        doc["state"] = LedgerState(doc["state"])
        doc["ensembles"] = tuple((first, tuple(bookies)) for first, bookies in doc["ensembles"])
        return cls(**doc)

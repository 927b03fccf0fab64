"""Settings of the storage layer (the gateway's `[storage]` config section)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StorageConfig:
    journal_max_wait_ms: float = 2.0            # group commit: flush once the oldest add waited this long
    journal_max_bytes: int = 512 * 1024         # ... or once this much is buffered
    journal_segment_bytes: int = 256 << 20      # roll the journal segment past this size
    index_sync_interval_s: float = 5.0          # how often the entry index is checkpointed to disk
    ledger_roll_bytes: int = 128 << 20          # managed log: close the current ledger past this size
    ledger_roll_ms: int = 4 * 3600 * 1000       # ... or past this age

    def __post_init__(self) -> None:
        if self.journal_max_wait_ms < 0 or self.journal_max_bytes <= 0:
            raise ValueError("journal group-commit bounds must be positive")
        if self.journal_segment_bytes < 1 << 20:
            raise ValueError("journal_segment_bytes must be at least 1 MiB")

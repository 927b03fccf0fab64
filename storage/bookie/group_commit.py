"""When the journal flushes: a pure decision, so it can be tested without a clock or a disk."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FlushReason(enum.Enum):
    MAX_WAIT = "max_wait"     # the oldest pending add waited long enough
    MAX_BYTES = "max_bytes"   # enough bytes are buffered
    IDLE = "idle"             # nothing else is queued: waiting longer only adds latency
    INLINE = "inline"         # the journal was idle: the event loop flushed its turn's adds itself


@dataclass(frozen=True, slots=True)
class GroupCommitPolicy:
    max_wait_ms: float = 2.0
    max_bytes: int = 512 * 1024
    flush_when_idle: bool = True


def should_flush(oldest_wait_ms: float, buffered_bytes: int, queue_empty: bool,
                 policy: GroupCommitPolicy) -> FlushReason | None:
    if buffered_bytes <= 0:
        return None
    if buffered_bytes >= policy.max_bytes:
        return FlushReason.MAX_BYTES
    if oldest_wait_ms >= policy.max_wait_ms:
        return FlushReason.MAX_WAIT
    if queue_empty and policy.flush_when_idle:
        return FlushReason.IDLE
    return None

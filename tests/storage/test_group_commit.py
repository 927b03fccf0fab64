"""The journal's flush decision, `should_flush`, as a table."""

from __future__ import annotations

import pytest

from storage.bookie.group_commit import FlushReason, GroupCommitPolicy, should_flush

DEFAULT = GroupCommitPolicy()  # max_wait_ms=2.0, max_bytes=512 KiB, flush_when_idle=True
NO_IDLE = GroupCommitPolicy(flush_when_idle=False)
SMALL = GroupCommitPolicy(max_wait_ms=0.5, max_bytes=100, flush_when_idle=False)


@pytest.mark.parametrize(("oldest_wait_ms", "buffered_bytes", "queue_empty", "policy", "expected"), [
    # nothing buffered: never a flush, whatever else holds
    (0.0, 0, True, DEFAULT, None),
    (1e6, 0, True, DEFAULT, None),
    (1e6, 0, False, SMALL, None),
    (1e6, -1, True, DEFAULT, None),
    # enough bytes
    (0.0, 512 * 1024, False, DEFAULT, FlushReason.MAX_BYTES),
    (0.0, 10 << 20, False, NO_IDLE, FlushReason.MAX_BYTES),
    (0.0, 100, False, SMALL, FlushReason.MAX_BYTES),
    (0.0, 512 * 1024 - 1, False, DEFAULT, None),
    # the oldest add waited long enough
    (2.0, 1, False, DEFAULT, FlushReason.MAX_WAIT),
    (50.0, 1, False, NO_IDLE, FlushReason.MAX_WAIT),
    (0.5, 99, False, SMALL, FlushReason.MAX_WAIT),
    (1.999, 1, False, DEFAULT, None),
    # nothing else queued
    (0.0, 1, True, DEFAULT, FlushReason.IDLE),
    (0.0, 1, True, NO_IDLE, None),
    (0.4, 99, True, SMALL, None),
    (0.0, 1, False, DEFAULT, None),
    # precedence when several hold: bytes, then wait, then idle
    (1e6, 512 * 1024, True, DEFAULT, FlushReason.MAX_BYTES),
    (1e6, 1, True, DEFAULT, FlushReason.MAX_WAIT),
])
def test_should_flush_returns_the_reason_the_table_gives(oldest_wait_ms: float, buffered_bytes: int,
                                                         queue_empty: bool, policy: GroupCommitPolicy,
                                                         expected: FlushReason | None) -> None:
    assert should_flush(oldest_wait_ms, buffered_bytes, queue_empty, policy) is expected


def test_zero_max_wait_flushes_anything_buffered_at_once() -> None:
    policy = GroupCommitPolicy(max_wait_ms=0.0, flush_when_idle=False)
    assert should_flush(0.0, 1, False, policy) is FlushReason.MAX_WAIT
    assert should_flush(0.0, 0, False, policy) is None

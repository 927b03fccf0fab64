"""Process faults by pid: crash (SIGKILL) and pause (SIGSTOP, then SIGCONT)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator


def kill9(pid: int) -> None:
    """The process dies at once, its page cache intact (which is why this cannot catch a missing
    fsync: see lazyfs.py for that)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def pause(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)


def resume(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def paused(pid: int) -> Iterator[None]:
    """The process is stopped for the block, and resumed whatever happens in it."""
    pause(pid)
    try:
        yield
    finally:
        resume(pid)

"""Frames written to one bookie connection during an event-loop turn go out in one `writelines`.

A ledger writer sends each add to every bookie of its write set, and a bookie answers each add when
its journal flush is durable; with many producers, several adds (and several answers) land on the
same connection in the same turn. Written one by one, each is a system call that on loopback also
runs the peer's TCP receive path; gathered, the turn costs one. The frames wait at most until the
loop's next turn (`call_soon`), or go at once past FLUSH_BYTES, so nothing large is held back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

FLUSH_BYTES = 256 * 1024


class TurnWriter:
    """Gathers the parts of frames for one transport; `flush` hands them over in order."""

    __slots__ = ("_loop", "_transport", "_parts", "_bytes", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport) -> None:
        self._loop = loop
        self._transport = transport
        self._parts: list = []
        self._bytes = 0
        self._scheduled = False

    def write(self, parts: Iterable) -> None:
        for part in parts:
            self._parts.append(part)
            self._bytes += len(part)
        if self._bytes >= FLUSH_BYTES:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if not self._parts:
            return
        parts, self._parts, self._bytes = self._parts, [], 0
        if not self._transport.is_closing():
            self._transport.writelines(parts)

    def drop(self) -> None:
        """Forget what was not written yet (the connection was aborted)."""
        self._parts, self._bytes = [], 0

"""One member of a membership group, as the group tracks it. Owned by its group."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    instance_id: str | None          # static membership: stable across restarts of the member
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]   # (name, metadata), in the member's preference order
    assignment: bytes = b""
    join_waiter: asyncio.Future | None = None  # set while the member waits for a rebalance to finish
    sync_waiter: asyncio.Future | None = None  # set while the member waits for the leader's assignment
    is_new: bool = False                       # joined, but no generation has included it yet
    deadline_ms: int | None = None             # when its session (or, while new, its join) expires

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: Iterable[str]) -> str:
        """The member's most preferred protocol among `candidates`."""
        allowed = set(candidates)
        for name in self.protocol_names:
            if name in allowed:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(allowed)}")

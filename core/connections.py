"""The client connections this process serves, whatever their protocol: for the admin API to list
and close them, and to close a user's connections once the user is deleted.

Connections are live objects of one process, so this registry is in memory; what it reacts to is
not: a watch on /users/<name> in the metadata store (one per user with an open connection) closes
that user's connections when the user node goes away, whichever process deleted it.

A protocol adapter registers each connection once it is accepted (`add`), says who logged in
(`logged_in`) and unregisters it when it ends (`remove`). Nothing here is touched per message.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from storage.api import MetadataStore

log = logging.getLogger("gateway.core.connections")

FETCH_RECENT_MS = 60_000   # a partition fetched this recently counts as being consumed

CloseFunction = Callable[[str], None]
"""Asks the connection to close, giving the reason; returns at once (the close is asynchronous)."""


def no_channels() -> list[dict]:
    return []


@dataclass(slots=True)
class ClientConnection:
    """One client connection as operators see it."""

    protocol: str                       # "kafka" or "amqp"
    address: str                        # the peer, "host:port"
    close: CloseFunction = field(repr=False)
    id: int = 0
    user: str | None = None             # None until logged in (or never, without authentication)
    tenant: str | None = None
    namespace: str | None = None
    client_id: str | None = None        # Kafka's client.id, AMQP's connection_name/product
    # How the user was authenticated: a SASL or AMQP mechanism (PLAIN, SCRAM-SHA-256, EXTERNAL, ...)
    # or "SSL" (Kafka's principal from the client certificate); None: not authenticated
    mechanism: str | None = None
    tls: dict | None = None             # protocol version, cipher, client certificate's DN; None: plaintext
    connected_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    # What the connection fetched (Kafka), topic -> {partition: when, in ms}: how the admin API shows
    # consumers that no group knows of (assign() mode).
    fetching: dict[str, dict[int, int]] = field(default_factory=dict)
    # The connection's channels as the protocol describes them (AMQP: number, prefetch, consumers...),
    # asked only when an operator lists them.
    channels: Callable[[], list[dict]] = field(default=no_channels, repr=False)

    def fetched(self, topic: str, partitions: list[int]) -> None:
        now_ms = int(time.time() * 1000)
        seen = self.fetching.get(topic)
        if seen is None:
            seen = self.fetching[topic] = {}
        for partition in partitions:
            seen[partition] = now_ms

    def fetching_now(self, topic: str, within_ms: int = FETCH_RECENT_MS) -> list[int]:
        """The partitions of `topic` this connection fetched lately."""
        since = int(time.time() * 1000) - within_ms
        return sorted(p for p, at in self.fetching.get(topic, {}).items() if at >= since)

    def to_doc(self) -> dict:
        return {"id": self.id, "protocol": self.protocol, "address": self.address, "user": self.user,
                "tenant": self.tenant, "namespace": self.namespace, "client_id": self.client_id,
                "mechanism": self.mechanism, "tls": self.tls, "connected_ms": self.connected_ms,
                "fetching": {topic: self.fetching_now(topic) for topic in self.fetching if self.fetching_now(topic)}}


class ClientConnections:
    """Owned by the event loop."""

    def __init__(self, metadata: MetadataStore,
                 max_connections: Callable[[str, str], Awaitable[int | None]] | None = None) -> None:
        self._metadata = metadata
        self._max_connections = max_connections   # a namespace's limit (its policies), None: none
        self._ids = itertools.count(1)
        self._open: dict[int, ClientConnection] = {}
        self._user_watches: dict[str, Callable[[], None]] = {}
        self._checks: set[asyncio.Task] = set()

    def add(self, connection: ClientConnection) -> ClientConnection:
        connection.id = next(self._ids)
        self._open[connection.id] = connection
        return connection

    def remove(self, connection: ClientConnection) -> None:
        self._open.pop(connection.id, None)
        user = connection.user
        if user is not None and not any(c.user == user for c in self._open.values()):
            cancel = self._user_watches.pop(user, None)
            if cancel is not None:
                cancel()

    def logged_in(self, connection: ClientConnection, user: str, tenant: str, namespace: str, *,
                  stored: bool = True) -> None:
        """`stored`: the user is one of the store's (the built-in loopback guest is not: its missing
        node, read again when a watch fires after a reconnection, must not close its connections)."""
        connection.user, connection.tenant, connection.namespace = user, tenant, namespace
        if stored and user not in self._user_watches:
            self._user_watches[user] = self._metadata.watch(f"/users/{user}", self._user_changed)

    async def enter(self, connection: ClientConnection, tenant: str, namespace: str) -> bool:
        """The connection works in tenant/namespace from now on (Kafka: its principal's; AMQP: its
        vhost's), unless the namespace's max_connections are open already: then False."""
        limit = None if self._max_connections is None else await self._max_connections(tenant, namespace)
        # No await from the count to the assignment: two connections cannot both take the last place.
        if limit is not None and sum(1 for c in self._open.values() if c is not connection
                                     and (c.tenant, c.namespace) == (tenant, namespace)) >= limit:
            return False
        connection.tenant, connection.namespace = tenant, namespace
        return True

    def all(self) -> list[ClientConnection]:
        return sorted(self._open.values(), key=lambda c: c.id)

    def get(self, connection_id: int) -> ClientConnection | None:
        return self._open.get(connection_id)

    def close(self, connection_id: int, reason: str) -> bool:
        connection = self._open.get(connection_id)
        if connection is None:
            return False
        log.info("closing %s connection %d from %s: %s", connection.protocol, connection_id, connection.address,
                 reason)
        connection.close(reason)
        return True

    def close_user(self, user: str, reason: str) -> int:
        """Close every connection of `user`; how many there were."""
        ids = [c.id for c in self._open.values() if c.user == user]
        for connection_id in ids:
            self.close(connection_id, reason)
        return len(ids)

    def _user_changed(self, path: str) -> None:
        # Watches fire on every change (and after a reconnection): look whether the user is gone.
        task = asyncio.get_running_loop().create_task(self._check_user(path.rsplit("/", 1)[-1]))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _check_user(self, user: str) -> None:
        try:
            if await self._metadata.get(f"/users/{user}") is None:
                self.close_user(user, f"user {user} was deleted")
        except Exception as exc:   # the store is unreachable: the next change fires again
            log.warning("checking user %s after a change failed: %s", user, exc)


def peer_address(peer: object) -> str:
    """"host:port" of a socket's peer name (IPv6 hosts in brackets)."""
    if isinstance(peer, tuple):
        host, port = peer[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(peer)

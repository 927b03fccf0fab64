"""The metadata store of a cluster: Apache ZooKeeper (3.8), through kazoo.

Layout under the root given in the URL (zk://host:port[,host:port]/root):

    <root>/nodes/<path>      one znode per metadata node; its data is the value, its version ours
    <root>/counters/<name>   next_id's counters: the znode's version, bumped by an unconditional
                             write, is the counter (a counter's n-th value is n - 1, as on SQLite)

Semantics match SqliteMetadataStore, with ZooKeeper's differences:
- a node is created with its missing parents, which ZooKeeper needs; they exist afterwards as nodes
  with an empty value, and a node with children cannot be deleted (StorageError);
- ephemeral nodes belong to the session and cannot have children;
- watches: one ZooKeeper watch per watched path, re-armed each time it fires, so changes that follow
  each other faster than the re-arm are reported once. This store's own write is reported before the
  write returns (ZooKeeper sends the notification before the reply, and both reach the loop through
  one queue, in order). After every reconnection every watch fires once (kazoo drops watches when the
  connection drops, so changes made meanwhile would otherwise go unseen);
- a guarded write is a multi-op transaction: the guard's `check`, then the write;
- values are limited by ZooKeeper's request size (jute.maxbuffer, 1 MiB by default): larger writes
  are refused before they are sent.

kazoo runs its own threads; every result and event is handed to the event loop with
call_soon_threadsafe, and the loop never waits on kazoo.

How long the session surely lasts (`session_alive_until`) is measured from the send time of the
latest request answered in it: a process paused past its timeout learns that from its own clock
before any late answer or state change reaches it. The timeout is the one asked for; ZooKeeper
negotiates it down only past its maxSessionTimeout (20 ticks, 40 s by default), so keep it below.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import (BadVersionError, KazooException, NoChildrenForEphemeralsError, NodeExistsError,
                              NoNodeError, NotEmptyError, RolledBackError)
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.retry import KazooRetry

from storage.api import (BadVersion, Fenced, Guard, NodeExists, NoNode, SessionCallback, SessionState, StorageError,
                         Versioned, WatchCallback)
from storage.metadata import session_file as session_files

log = logging.getLogger("gateway.storage.metadata")

MAX_VALUE_BYTES = (1 << 20) - (16 << 10)
"""The largest value written: ZooKeeper refuses requests past jute.maxbuffer (1 MiB less one byte by
default), and the request carries the path and headers beside the value."""
ARM_RETRY_S = 0.1   # a watch whose request failed is set again this much later (when connected)

# What ZooKeeper refuses in a path: control characters, surrogates, private use, specials.
_BAD_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff]")

# Errors that are the server's answer to a request (so the session was alive when it was sent).
_ANSWERS = (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError, NoChildrenForEphemeralsError)

_STATES = {KazooState.CONNECTED: SessionState.CONNECTED, KazooState.SUSPENDED: SessionState.SUSPENDED,
           KazooState.LOST: SessionState.LOST}


def _checked(path: str, *, directory: bool = False) -> str:
    """The path without a trailing slash (allowed for a directory: children("/t/")); ValueError if
    ZooKeeper could not store it (the same rule as SQLite's plus ZooKeeper's own)."""
    if directory and len(path) > 1:
        path = path.removesuffix("/")
    if (not path.startswith("/") or (path.endswith("/") and path != "/") or "//" in path
            or _BAD_CHARACTERS.search(path) or any(part in (".", "..") for part in path.split("/"))):
        raise ValueError(f"bad metadata path {path!r}")
    return path


def parse_url(url: str) -> tuple[str, str]:
    """zk://host:port[,host:port]/root -> ("host:port,...", "/root")."""
    parts = urlsplit(url)
    if parts.scheme != "zk" or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"bad ZooKeeper URL {url!r}: expected zk://host:port[,host:port]/root")
    root = parts.path or "/"
    _checked(root, directory=True)
    return parts.netloc, root.removesuffix("/") if root != "/" else ""


class _OrderedHandler(SequentialThreadingHandler):
    """kazoo's threading handler with watch notifications delivered through the completion queue, so
    they reach the loop in the order ZooKeeper sent them: a change's notification before the reply
    to the write that made it."""

    def dispatch_callback(self, callback: Any) -> None:
        self.completion_queue.put(lambda: callback.func(*callback.args))


class ZooKeeperMetadataStore:
    """MetadataStore on ZooKeeper. The public methods are called from one event loop."""

    def __init__(self, hosts: str, root: str, session_timeout_s: float, request_timeout_s: float,
                 session_file: Path | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._nodes = f"{root}/nodes"
        self._counters = f"{root}/counters"
        self._request_timeout_s = request_timeout_s
        self._session_timeout_s = session_timeout_s
        self._session_file = session_file        # session_file.py: for the next run to end this one's
        self._remembered: int | None = None
        self._answered_sent_at = -math.inf   # send time of the latest request answered in this session
        self._client = KazooClient(hosts=hosts, timeout=session_timeout_s, handler=_OrderedHandler(),
                                   connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0))
        self._closed = False
        self._session_id: int | None = None
        self._state = SessionState.SUSPENDED
        self._watches: dict[str, list[WatchCallback]] = defaultdict(list)
        self._armed: set[str] = set()
        # One function per watched path: kazoo keeps a set of them, so arming twice notifies once.
        self._watchers: dict[str, Callable[[WatchedEvent], None]] = {}
        self._session_callbacks: list[SessionCallback] = []
        self._client.add_listener(self._on_kazoo_state)

    @classmethod
    async def open(cls, url: str, *, session_timeout_s: float = 10.0, connect_timeout_s: float = 15.0,
                   request_timeout_s: float = 10.0, session_file: Path | None = None) -> "ZooKeeperMetadataStore":
        """Connect and start a session. A request waits up to `request_timeout_s` for an answer,
        across a reconnection; past it a StorageError says the outcome is unknown (a write may still
        be applied once the connection returns). With `session_file`, the session a previous run of
        this process left there is closed first (session_file.py)."""
        hosts, root = parse_url(url)
        if session_file is not None:
            await asyncio.to_thread(session_files.end_previous, hosts, session_file, session_timeout_s,
                                    connect_timeout_s)
        store = cls(hosts, root, session_timeout_s, request_timeout_s, session_file)
        try:
            await asyncio.to_thread(store._client.start, connect_timeout_s)
            for path in (store._nodes, store._counters):
                await store._call(store._client.ensure_path_async, path)
        except Exception as exc:
            await asyncio.to_thread(store._shut_down)
            raise StorageError(f"cannot open metadata store {url}: {exc or type(exc).__name__}") from exc
        return store

    # --- from kazoo's threads to the loop ---------------------------------------------------

    def _post(self, function: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(function, *args)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's connection thread: read the session id now, it is reset when the session ends.
        client_id = self._client.client_id
        if (state == KazooState.CONNECTED and client_id and self._session_file is not None
                and client_id[0] != self._remembered):
            try:
                session_files.remember(self._session_file, *client_id)
                self._remembered = client_id[0]
            except OSError as exc:
                log.warning("could not save the session for the next run in %s: %s", self._session_file, exc)
        self._post(self._on_state, _STATES[state], client_id[0] if client_id else None)

    def _on_kazoo_watch(self, path: str, event: WatchedEvent) -> None:
        self._post(self._on_watch_event, path, event.type)

    async def _call(self, request: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Send a kazoo request (one of its *_async methods) and await its result, settled on the loop."""
        if self._closed:
            raise StorageError("metadata store is closed")
        future = self._loop.create_future()
        sent_at, session = time.monotonic(), self._session_id
        async_result = request(*args, **kwargs)

        def settle(result: Any) -> None:
            if session is not None and session == self._session_id and (
                    result.successful() or isinstance(result.exception, _ANSWERS)):
                self._answered_sent_at = max(self._answered_sent_at, sent_at)
            if not future.done():
                if result.successful():
                    future.set_result(result.value)
                else:
                    future.set_exception(result.exception)
        async_result.rawlink(lambda result: self._post(settle, result))
        try:
            # Not asyncio.wait_for: on Python 3.11 it returns the result instead of raising when the
            # caller is cancelled as the answer arrives, and a cancelled lease or membership loop
            # would then run on.
            async with asyncio.timeout(self._request_timeout_s):
                return await future
        except TimeoutError:
            raise StorageError(f"metadata store did not answer within {self._request_timeout_s}s "
                               "(outcome unknown)") from None
        except _ANSWERS:
            raise  # the callers turn these into the store's errors
        except KazooException as exc:
            raise StorageError(f"metadata store request failed: {type(exc).__name__} {exc}") from exc

    # --- sessions and watches (on the loop) -------------------------------------------------

    def _on_state(self, state: SessionState, session_id: int | None) -> None:
        if self._closed:
            return
        if state is not SessionState.CONNECTED:
            self._armed.clear()  # kazoo dropped every watch with the connection
        reconnected = state is SessionState.CONNECTED and self._state is not SessionState.CONNECTED
        if state is SessionState.CONNECTED:
            if session_id != self._session_id:
                self._answered_sent_at = -math.inf
            self._session_id = session_id
        if state is SessionState.LOST:
            log.warning("metadata store session %#x expired", self._session_id or 0)
            self._session_id = None
            self._answered_sent_at = -math.inf
        elif state is SessionState.SUSPENDED:
            log.warning("metadata store connection lost")
        self._state = state
        for callback in list(self._session_callbacks):
            try:
                callback(state)
            except Exception:
                log.exception("metadata session callback failed")
        if reconnected:
            # Armed first: whatever the callbacks read next is covered by a watch again.
            for path in list(self._watches):
                self._arm(path)
            for path in list(self._watches):
                self._fire(path)

    def _arm(self, path: str, *, exists: bool | None = None) -> None:
        """Set ZooKeeper's watch on `path`. A session's requests are served in order, so what a
        callback reads through this store after this is covered by the watch. Another session may
        change the node before the watch reaches the server, though (a node deleted right after its
        creation fired the watch): when the answer finds the node's existence other than `exists`
        (what the event that re-arms said), the callbacks run once more. A request that fails (the
        connection dropped meanwhile) set no watch: the path is armed again, else a change would go
        unseen."""
        if path in self._armed or self._closed:
            return
        self._armed.add(path)
        watcher = self._watchers.setdefault(path, lambda event, path=path: self._on_kazoo_watch(path, event))
        self._client.exists_async(self._zk(path), watch=watcher).rawlink(
            lambda result: self._post(self._armed_as, path, exists, result))

    def _armed_as(self, path: str, expected: bool | None, result: Any) -> None:
        if not result.successful():
            self._armed.discard(path)
            if self._watches.get(path) and not self._closed:
                # Now if connected; else at reconnection (_on_state), which may also have come first.
                self._loop.call_later(ARM_RETRY_S, self._arm_if_connected, path)
        elif expected is not None and (result.get() is not None) != expected:
            self._fire(path)

    def _arm_if_connected(self, path: str) -> None:
        if self._state is SessionState.CONNECTED and self._watches.get(path):
            self._arm(path)

    def _on_watch_event(self, path: str, event_type: str) -> None:
        if event_type == EventType.NONE or self._closed:
            return  # NONE: the connection dropped; _on_state re-arms and fires at reconnection
        self._armed.discard(path)
        if self._watches.get(path):
            self._arm(path, exists=event_type != EventType.DELETED)
            self._fire(path)
        else:
            self._watchers.pop(path, None)

    def _fire(self, path: str) -> None:
        if self._closed:
            return
        for callback in list(self._watches.get(path, ())):
            try:
                callback(path)
            except Exception:
                log.exception("metadata watch on %s failed", path)

    # --- MetadataStore ----------------------------------------------------------------------

    def _zk(self, path: str) -> str:
        return self._nodes if path == "/" else self._nodes + path

    @staticmethod
    def _check_size(path: str, value: bytes) -> None:
        if len(value) > MAX_VALUE_BYTES:
            raise StorageError(f"{path}: value of {len(value)} bytes exceeds the metadata store's limit "
                               f"of {MAX_VALUE_BYTES} bytes")

    async def _bad_version(self, path: str, expected_version: int) -> StorageError:
        """The error for a lost compare-and-set, naming the version found (NoNode if it is gone by now)."""
        stat = await self._call(self._client.exists_async, self._zk(path))
        if stat is None:
            return NoNode(path)
        return BadVersion(f"{path}: version {stat.version}, expected {expected_version}")

    async def get(self, path: str, *, latest: bool = False) -> Versioned | None:
        zk_path = self._zk(_checked(path))
        if latest:   # the server catches up with its leader first
            await self._call(self._client.sync_async, zk_path)
        try:
            data, stat = await self._call(self._client.get_async, zk_path)
        except NoNodeError:
            return None
        return Versioned(data, stat.version)

    async def _guarded(self, guard: Guard, write: Callable[[TransactionRequest], None]) -> Any:
        """One write behind the guard's check, atomically: the write's result, or its error raised."""
        transaction = self._client.transaction()
        transaction.check(self._zk(_checked(guard.path)), guard.version)
        write(transaction)
        check, outcome = await self._call(transaction.commit_async)
        if isinstance(check, Exception) and not isinstance(check, RolledBackError):
            raise Fenced(f"guard {guard.path} is gone or not at version {guard.version}")
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def create(self, path: str, value: bytes, *, ephemeral: bool = False, guard: Guard | None = None) -> int:
        self._check_size(_checked(path), value)
        zk_path = self._zk(path)
        try:
            if guard is None:
                await self._call(self._client.create_async, zk_path, value, ephemeral=ephemeral, makepath=True)
            else:   # a transaction cannot make the parents: made first (empty nodes, as makepath does)
                await self._call(self._client.ensure_path_async, zk_path.rsplit("/", 1)[0])
                await self._guarded(guard, lambda t: t.create(zk_path, value, ephemeral=ephemeral))
        except NodeExistsError:
            raise NodeExists(path) from None
        except NoChildrenForEphemeralsError:
            raise StorageError(f"{path}: a parent is an ephemeral node, which cannot have children") from None
        return 0

    async def _set(self, zk_path: str, value: bytes, version: int, guard: Guard | None) -> int:
        if guard is None:
            return (await self._call(self._client.set_async, zk_path, value, version)).version
        return (await self._guarded(guard, lambda t: t.set_data(zk_path, value, version))).version

    async def put(self, path: str, value: bytes, expected_version: int | None = None, *,
                  guard: Guard | None = None) -> int:
        self._check_size(_checked(path), value)
        zk_path = self._zk(path)
        if expected_version is not None:
            try:
                return await self._set(zk_path, value, expected_version, guard)
            except NoNodeError:
                raise NoNode(path) from None
            except BadVersionError:
                raise await self._bad_version(path, expected_version) from None
        while True:  # create-or-overwrite: overwrite first (the common case), create when absent
            try:
                return await self._set(zk_path, value, -1, guard)
            except NoNodeError:
                pass
            try:
                await self.create(path, value, guard=guard)
                return 0
            except NodeExists:
                continue  # created by someone else meanwhile: overwrite it

    async def delete(self, path: str, expected_version: int | None = None, *, guard: Guard | None = None) -> None:
        zk_path = self._zk(_checked(path))
        version = -1 if expected_version is None else expected_version
        try:
            if guard is None:
                await self._call(self._client.delete_async, zk_path, version)
            else:
                await self._guarded(guard, lambda t: t.delete(zk_path, version))
        except NoNodeError:
            raise NoNode(path) from None
        except BadVersionError:
            raise await self._bad_version(path, expected_version) from None
        except NotEmptyError:
            raise StorageError(f"{path}: cannot delete a node that has children") from None

    async def children(self, path: str) -> list[str]:
        try:
            return sorted(await self._call(self._client.get_children_async, self._zk(_checked(path, directory=True))))
        except NoNodeError:
            return []

    async def next_id(self, counter: str) -> int:
        if not counter or "/" in counter or _BAD_CHARACTERS.search(counter) or counter in (".", ".."):
            raise ValueError(f"bad counter name {counter!r}")
        zk_path = f"{self._counters}/{counter}"
        while True:
            try:
                version = (await self._call(self._client.set_async, zk_path, b"")).version
                break
            except NoNodeError:
                try:
                    await self._call(self._client.create_async, zk_path, b"")
                except NodeExistsError:
                    pass
        if version <= 0:  # ZooKeeper's 32-bit version wrapped: refuse rather than reuse
            raise StorageError(f"counter {counter!r} is exhausted")
        return version - 1

    def watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        _checked(path)
        self._watches[path].append(callback)
        if self._state is SessionState.CONNECTED:
            self._arm(path)

        def cancel() -> None:
            callbacks = self._watches.get(path)
            if callbacks and callback in callbacks:
                callbacks.remove(callback)
                if not callbacks:
                    del self._watches[path]  # the armed ZooKeeper watch lapses when it next fires
        return cancel

    def on_session_event(self, callback: SessionCallback) -> Callable[[], None]:
        self._session_callbacks.append(callback)

        def cancel() -> None:
            if callback in self._session_callbacks:
                self._session_callbacks.remove(callback)
        return cancel

    @property
    def session_id(self) -> int | None:
        return self._session_id

    def session_alive_until(self) -> float:
        return self._answered_sent_at + self._session_timeout_s

    def _shut_down(self) -> None:
        # Closing the session deletes our ephemeral nodes at once (not after the session timeout).
        self._client.remove_listener(self._on_kazoo_state)
        self._client.stop()
        self._client.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._session_callbacks.clear()
        await asyncio.to_thread(self._shut_down)
        if self._session_file is not None:
            session_files.forget(self._session_file)

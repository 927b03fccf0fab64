"""Requests to the owner of a bundle, carried by the metadata store: what one broker needs done to
state another broker owns (a transaction marker on its partition, a transaction's offsets in its
group), answered by that broker.

    /cluster/mailbox/<t>/<ns>/<i>          rewritten with every request posted: the owner watches it
    /cluster/mailbox/<t>/<ns>/<i>/<name>   one request, {"kind": str, ...}; the owner adds "reply"
                                           ({"error": str} when it refused); the poster deletes it

The poster writes as the owner of a bundle of its own (`writer`, a guarded view): a broker that lost
that bundle posts nothing. The owner answers through the guard of its term on the bundle it was
asked, so an answer can come only from a broker that owned it. A request's name identifies it: a
post repeated after a failure (by the poster, or by the next owner of the poster's bundle) finds
the first one, answered or not. Requests outlive both brokers: the next owner of the asked bundle
answers what it finds when it takes the bundle. Handlers must therefore be idempotent.

A request may also outlive its bundle: one posted to a bundle that was split since (before the
split, or by a broker that had not read the new layout yet) is answered by the owners of its
halves, each watching and reading the mailboxes of the split ranges that overlap its own (the
splitting owner makes the parent's mailbox as it lets the bundle go, so that it is there to watch);
the owner of the other half refuses it as not its own (NotOwner, tried again later) until the right
one answered it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable

from core.cluster.broker_cluster import BrokerCluster
from core.cluster.bundles import Bundle
from core.errors import CoreError, RequestRefused, StorageUnavailable
from storage.api import BadVersion, Fenced, MetadataStore, NodeExists, NoNode, StorageError

log = logging.getLogger("gateway.cluster.mailbox")

MAILBOX = "/cluster/mailbox"
ANSWER_TIMEOUT_S = 30.0
RETRY_S = 1.0      # a request its owner could not answer yet is tried again this much later
TAKING_S = 0.05    # a bundle being taken is looked at again this much later
POLL_S = 2.0       # a poster looks at its request this often besides its watch

Handler = Callable[[Bundle, dict], Awaitable[dict]]


class Mailbox:
    def __init__(self, metadata: MetadataStore, cluster: BrokerCluster,
                 owner_metadata: Callable[[Bundle], MetadataStore]) -> None:
        self._metadata = metadata
        self._cluster = cluster
        self._owner_metadata = owner_metadata
        self._handlers: dict[str, Handler] = {}
        self._watches: dict[Bundle, Callable[[], None]] = {}
        self._split_watches: dict[Bundle, list[Callable[[], None]]] = {}    # mailboxes of split ranges
        self._draining: dict[Bundle, asyncio.Task] = {}
        self._again: set[Bundle] = set()
        cluster.on_acquire(self._open)
        cluster.on_release(self._close)

    def handle(self, kind: str, handler: Handler) -> None:
        """`handler(bundle, request)` answers requests of `kind` sent to a bundle this broker owns."""
        self._handlers[kind] = handler

    # --- posting ----------------------------------------------------------------------------

    async def ask(self, to: Bundle, name: str, request: dict, writer: MetadataStore,
                  timeout_s: float = ANSWER_TIMEOUT_S) -> dict:
        """Post `request` to the owner of `to` and return its reply (RequestRefused if it refused it,
        StorageUnavailable if no answer came in time: asking again with the same name waits on)."""
        path = f"{MAILBOX}/{to.path}/{name}"
        try:
            try:
                await writer.create(path, json.dumps(request, separators=(",", ":")).encode())
            except NodeExists:
                pass      # asked before: its answer is this one's
            await writer.put(f"{MAILBOX}/{to.path}", b"")
            reply = await self._answer(path, timeout_s)
        except Fenced as exc:
            raise StorageUnavailable(f"cannot ask bundle {to}: {exc}") from exc
        except StorageError as exc:
            raise StorageUnavailable(f"asking bundle {to} failed: {exc}") from exc
        try:
            await self._metadata.delete(path)
        except (NoNode, StorageError):
            pass      # deleted meanwhile, or left for a later ask: answered either way
        if "error" in reply:
            raise RequestRefused(f"bundle {to} refused {request.get('kind')}: {reply['error']}")
        return reply

    async def _answer(self, path: str, timeout_s: float) -> dict:
        changed = asyncio.Event()
        cancel = self._metadata.watch(path, lambda _path: changed.set())
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                node = await self._metadata.get(path)
                if node is None:
                    raise StorageUnavailable(f"request {path} vanished before it was answered")
                reply = json.loads(node.value).get("reply")
                if reply is not None:
                    return reply
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StorageUnavailable(f"request {path} not answered in {timeout_s:.0f} s "
                                             "(its bundle's owner is away?)")
                try:
                    async with asyncio.timeout(min(left, POLL_S)):
                        await changed.wait()
                except TimeoutError:
                    pass
                changed.clear()
        finally:
            cancel()

    # --- answering --------------------------------------------------------------------------

    async def _open(self, bundle: Bundle) -> None:
        if bundle not in self._watches:
            self._watches[bundle] = self._metadata.watch(f"{MAILBOX}/{bundle.path}", lambda _p: self._wake(bundle))
            try:
                self._split_watches[bundle] = [self._metadata.watch(path, lambda _p: self._wake(bundle))
                                               for path in await self._split_mailboxes(bundle)]
            except StorageError as exc:      # read again at every pass anyway
                log.warning("finding the mailboxes of split bundles failed: %s", exc)
        self._wake(bundle)

    async def _split_mailboxes(self, bundle: Bundle) -> list[str]:
        """The mailboxes of ranges that are no bundle any more (split) and overlap `bundle`."""
        current = self._cluster.layouts.bundles(bundle.tenant, bundle.namespace)
        found = []
        for name in await self._metadata.children(f"{MAILBOX}/{bundle.tenant}/{bundle.namespace}"):
            try:
                other = Bundle.parse(f"{bundle.tenant}/{bundle.namespace}/{name}")
            except ValueError:
                continue
            if other not in current and other.overlaps(bundle):
                found.append(f"{MAILBOX}/{other.path}")
        return found

    async def _close(self, bundle: Bundle) -> None:
        for cancel in [self._watches.pop(bundle, None), *self._split_watches.pop(bundle, ())]:
            if cancel is not None:
                cancel()
        self._again.discard(bundle)
        if bundle not in self._cluster.layouts.bundles(bundle.tenant, bundle.namespace):
            try:     # split: its mailbox is made now, so that the halves' owners watch it from the start
                await self._metadata.put(f"{MAILBOX}/{bundle.path}", b"")
            except StorageError as exc:
                log.warning("making the mailbox of split bundle %s failed: %s", bundle, exc)

    def close(self) -> None:
        for bundle in list(self._watches):
            self._watches.pop(bundle)()
        for cancels in self._split_watches.values():
            for cancel in cancels:
                cancel()
        self._split_watches.clear()
        for task in self._draining.values():
            task.cancel()

    def _wake(self, bundle: Bundle) -> None:
        if bundle not in self._watches:
            return
        if bundle in self._draining:
            self._again.add(bundle)      # looked at again once the running pass ends
            return
        task = asyncio.get_running_loop().create_task(self._drain(bundle), name=f"mailbox-{bundle}")
        self._draining[bundle] = task
        task.add_done_callback(lambda _t: self._drained(bundle))

    def _drained(self, bundle: Bundle) -> None:
        self._draining.pop(bundle, None)
        if bundle in self._again:
            self._again.discard(bundle)
            self._wake(bundle)

    async def _drain(self, bundle: Bundle) -> None:
        """Answer every unanswered request of the bundle; one that cannot be answered yet (a partition
        is still opening) is tried again RETRY_S later."""
        retry_in = None
        try:
            if not self._cluster.owns(bundle):
                retry_in = TAKING_S      # called while the bundle is being taken: once it is held
                return
            for mailbox in [f"{MAILBOX}/{bundle.path}", *await self._split_mailboxes(bundle)]:
                for name in await self._metadata.children(mailbox):
                    if not await self._answer_one(bundle, f"{mailbox}/{name}"):
                        retry_in = RETRY_S
        except StorageError as exc:
            log.warning("reading the requests to bundle %s failed, will retry: %s", bundle, exc)
            retry_in = RETRY_S
        finally:
            if retry_in is not None and bundle in self._watches:
                asyncio.get_running_loop().call_later(retry_in, self._wake, bundle)

    async def _answer_one(self, bundle: Bundle, path: str) -> bool:
        """Answer one request; False if it is left for a later pass."""
        node = await self._metadata.get(path)
        if node is None:
            return True
        request = json.loads(node.value)
        if "reply" in request:
            return True
        handler = self._handlers.get(request.get("kind"))
        try:
            if handler is None:
                raise RequestRefused(f"no handler for requests of kind {request.get('kind')!r}")
            reply = await handler(bundle, request)
        except RequestRefused as exc:
            reply = {"error": str(exc)}
        except CoreError as exc:
            if exc.retriable:
                log.info("request %s not answered yet: %s", path, exc)
                return False
            reply = {"error": str(exc)}
        except Exception as exc:     # a bug: refused, so that the poster does not wait for it forever
            log.exception("answering request %s failed", path)
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        try:
            await self._owner_metadata(bundle).put(
                path, json.dumps({**request, "reply": reply}, separators=(",", ":")).encode(), node.version)
        except (NoNode, BadVersion):
            pass      # withdrawn, or answered by another pass
        return True

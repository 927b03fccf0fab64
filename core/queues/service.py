"""Exchanges, bindings and queues per tenant/namespace: declaring, deleting, routing, publishing.

`QueueService(core)` hands out one `QueueNamespace` per tenant/namespace, loaded from the metadata
store on first use. Loading drops what does not outlive a restart (non-durable exchanges and
queues, exclusive queues, bindings whose ends are gone) and adds the predeclared exchanges:
amq.direct, amq.fanout, amq.topic, amq.headers and amq.match (never stored, never deletable).

Declarations, deletions and bindings of a namespace run one at a time (a lock), each stored before
it is visible. Routing and publishing take no lock: they read the in-memory routing table.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any

from core.cluster.bundles import Bundle, partition_bundle
from core.errors import (RESOURCE, CoreError, InequivalentDeclaration, InvalidArgument, NotPermitted, RequestRefused,
                         ReservedName, Resource, ResourceInUse, ResourceLocked, TopicExists, UnknownExchange,
                         UnknownQueue, UnknownTopic)
from core.names import TopicName
from core.partition import storage_errors
from core.delayed.held import Target
from core.delayed.store import SYSTEM_TOPIC as DELAYED_TOPIC
from core.queues.exchange import Binding, DestinationKind, Exchange, ExchangeType, check_binding, check_exchange
from core.queues.dead_letter import DeadLetterer
from core.queues.expiry import UnusedQueueTimer
from core.queues.forwarding import PUBLISH, declare_remote, decode_records, delete_remote, forward
from core.queues.peer_requests import PeerRequests
from core.queues.remote_subscription import RemoteSubscription
from core.queues.naming import queue_topic
from core.queues.policy import QueuePolicy, check_equivalent
from core.system_topics import refuse_change
from core.queues.queue import CURSOR_NAME, QUEUE_TOPIC_CONFIGS, REQUEUE_TARGET, Queue, QueueInfo
from core.queues.routing import DEFAULT_EXCHANGE, HeadersFunction, PropertiesFunction, RoutingTable, no_properties
from core.queues.store import NamespaceStore
from core.records.builder import Record
from storage.api import StorageError

log = logging.getLogger("gateway.core")

RESERVED_PREFIX = "amq."
FOLLOW_RETRY_S = 1.0
CANCEL_SETTLE_S = 2.0     # how long a cancel through another broker waits for its owner to apply it
LOCAL_NAME_TRIES = 200   # names tried for a server-named queue on a bundle of this broker (1/16 each at worst)
PREDECLARED_EXCHANGES = (
    Exchange("amq.direct", ExchangeType.DIRECT),
    Exchange("amq.fanout", ExchangeType.FANOUT),
    Exchange("amq.topic", ExchangeType.TOPIC),
    Exchange("amq.headers", ExchangeType.HEADERS),
    Exchange("amq.match", ExchangeType.HEADERS),
)
_PREDECLARED = frozenset(exchange.name for exchange in PREDECLARED_EXCHANGES)


class QueueNamespace:
    def __init__(self, core, tenant: str, namespace: str) -> None:
        self._core = core
        self.tenant = tenant
        self.namespace = namespace
        self._store = NamespaceStore(core.metadata, tenant, namespace)
        self.routing = RoutingTable()
        self.queues: dict[str, Queue] = {}
        self._lock = asyncio.Lock()
        self._unwatch: Callable[[], None] = lambda: None
        self._following: asyncio.Future | None = None
        self._follow_again = False
        self._closed = False

    def _topic(self, info: QueueInfo) -> TopicName:
        return TopicName(self.tenant, self.namespace, info.topic)

    def _serves(self, info: QueueInfo) -> bool:
        """This broker serves the queue (as Queue.served_here, for a queue not made yet)."""
        cluster = self._core.cluster
        return cluster is None or cluster.owns(partition_bundle(self.tenant, self.namespace, info.topic, 0))

    # --- loading --------------------------------------------------------------------------------

    async def load(self) -> None:
        for exchange in PREDECLARED_EXCHANGES:
            self.routing.put_exchange(exchange)
        if self._core.cluster is not None:
            self._unwatch = self._store.watch(self.changed_elsewhere)
        await self._follow_store()

    async def _follow_store(self) -> None:
        """Make the exchanges, queues and bindings in memory those of the store. Transient ones left
        behind by a process that is gone (this one's last run; in a cluster, any broker's) are deleted."""
        stored = await self._store.load()
        left_behind = await self._left_behind()
        exchanges: dict[str, Exchange] = {}
        for exchange in stored.exchanges:
            if exchange.name in _PREDECLARED:
                continue
            if exchange.durable or not left_behind(exchange.declared_by):
                exchanges[exchange.name] = exchange
            else:
                await self._store.delete_exchange(exchange.name)
        for name in [name for name in self.routing.exchanges if name not in exchanges and name not in _PREDECLARED]:
            self.routing.remove_exchange(name)
        for exchange in exchanges.values():
            if exchange.name not in self.routing.exchanges:
                self.routing.put_exchange(exchange)
        queues: dict[str, QueueInfo] = {}
        for info in stored.queues:
            if not (info.transient and left_behind(info.declared_by)):
                queues[info.name] = info
            elif self._serves(info):
                # Only the broker serving the queue deletes it: it closes the queue's log first. Another
                # broker deleting the ledgers under that open log made its close fail to seal it.
                # (Elsewhere it is only forgotten; a broker that takes the bundle over deletes it then.)
                await self._store.delete_queue(info.name)
                await self._delete_topic(info)
        for name, queue in list(self.queues.items()):
            if queues.get(name) != queue.info:    # deleted (or deleted and declared anew) elsewhere
                self._forget(queue)
        for info in queues.values():
            if info.name not in self.queues:
                self._adopt(info)
        removed = {binding.binding_id for bindings in self.routing.bindings.values() for binding in bindings.values()}
        for binding in stored.bindings:
            known = (binding.destination in queues if binding.kind is DestinationKind.QUEUE
                     else binding.destination in exchanges or binding.destination in _PREDECLARED)
            if known and (binding.source in exchanges or binding.source in _PREDECLARED):
                self.routing.add_binding(binding)
                removed.discard(binding.binding_id)
            elif self._core.cluster is None:
                # One broker: an end that is not there went before the binding did (a crash between).
                # In a cluster the binding may be newer than the rows read before it.
                await self._store.delete_binding(binding)
        for bindings in list(self.routing.bindings.values()):
            for binding in list(bindings.values()):
                if binding.binding_id in removed:
                    self.routing.remove_binding(binding)

    async def _left_behind(self) -> Callable[[str], bool]:
        """Whether a transient object declared by a process went with it."""
        cluster = self._core.cluster
        if cluster is None:
            return lambda _declared_by: True     # one broker: it is from this process's last run
        with storage_errors():
            live = await cluster.registered_processes() | {cluster.process}
        return lambda declared_by: declared_by not in live

    def changed_elsewhere(self, _path: str = "") -> None:
        """The namespace's rows changed (a broker of the cluster announced it, or one left): read them
        again; changes during a pass make one more."""
        self._follow_again = True
        if self._following is None:
            self._following = asyncio.ensure_future(self._follow())

    async def _follow(self) -> None:
        try:
            while self._follow_again and not self._closed:
                self._follow_again = False
                try:
                    async with self._lock:
                        await self._follow_store()
                except CoreError as exc:
                    log.warning("reading the exchanges and queues of %s/%s failed, will retry: %s",
                                self.tenant, self.namespace, exc)
                    await asyncio.sleep(FOLLOW_RETRY_S)
                    self._follow_again = True
        finally:
            self._following = None

    async def _announce(self) -> None:
        if self._core.cluster is not None:
            await self._store.announce()

    @property
    def _declared_by(self) -> str:
        cluster = self._core.cluster
        return "" if cluster is None else cluster.process

    # --- exchanges ------------------------------------------------------------------------------

    def exchange(self, name: str) -> Exchange:
        exchange = self.routing.exchanges.get(name)
        if exchange is None:
            raise UnknownExchange.about(Resource.exchange(name), f"no {RESOURCE}")
        return exchange

    async def declare_exchange(self, name: str, exchange_type: ExchangeType, *, durable: bool = True,
                               auto_delete: bool = False, internal: bool = False,
                               arguments: Mapping[str, Any] | None = None, passive: bool = False) -> Exchange:
        _not_default(name)
        if passive:
            return self.exchange(name)
        wanted = Exchange(name, exchange_type, durable, auto_delete, internal, dict(arguments or {}),
                          declared_by="" if durable else self._declared_by)
        async with self._lock:
            existing = self.routing.exchanges.get(name)
            if existing is not None:
                _check_exchange_equivalence(existing, wanted)
                return existing
            if name.startswith(RESERVED_PREFIX):
                raise ReservedName(f"exchange name '{name}' contains reserved prefix '{RESERVED_PREFIX}*'")
            try:
                check_exchange(wanted)
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from None
            stored = await self._store.create_exchange(wanted)
            if stored is not None and (stored.durable or not (await self._left_behind())(stored.declared_by)):
                # declared through another broker and not followed here yet: that one stands
                _check_exchange_equivalence(stored, wanted)
                self.routing.put_exchange(stored)
                return stored
            if stored is not None:       # a transient one whose process is gone: replaced
                await self._store.put_exchange(wanted)
            self.routing.put_exchange(wanted)
            await self._announce()
            return wanted

    async def delete_exchange(self, name: str, *, if_unused: bool = False) -> None:
        _not_default(name)
        if name in _PREDECLARED:
            raise NotPermitted.about(Resource.exchange(name), f"deletion of system {RESOURCE} not allowed")
        async with self._lock:
            if name not in self.routing.exchanges:
                return
            if if_unused and self.routing.bindings_from(name):
                raise ResourceInUse.about(Resource.exchange(name), f"{RESOURCE} in use")
            await self._remove_exchange(name)
            await self._announce()

    async def _remove_exchange(self, name: str) -> None:
        await self._store.delete_exchange(name)
        removed = self.routing.remove_exchange(name)
        for binding in removed:
            await self._store.delete_binding(binding)
        await self._auto_delete_sources(removed)

    async def _auto_delete_sources(self, removed: list[Binding]) -> None:
        """Auto-delete exchanges go when their last binding goes."""
        for source in {binding.source for binding in removed}:
            exchange = self.routing.exchanges.get(source)
            if exchange is not None and exchange.auto_delete and not self.routing.bindings_from(source):
                await self._remove_exchange(source)

    # --- bindings -------------------------------------------------------------------------------

    async def bind(self, binding: Binding, *, owner: Hashable | None = None) -> None:
        async with self._lock:
            self._check_binding_ends(binding, owner)
            try:
                check_binding(self.exchange(binding.source), binding)
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from None
            if binding.binding_id in self.routing.bindings.get(binding.source, {}):
                return
            await self._store.put_binding(binding)
            self.routing.add_binding(binding)
            await self._announce()

    async def unbind(self, binding: Binding, *, owner: Hashable | None = None) -> None:
        """Removing a binding whose queue, exchanges or itself is not there is no error (RabbitMQ
        3.10 answers unbind-ok): only the default exchange and another owner's exclusive queue are."""
        _not_default(binding.source)
        async with self._lock:
            if binding.kind is DestinationKind.QUEUE:
                if binding.destination in self.queues:
                    self.queue(binding.destination, owner)
            else:
                _not_default(binding.destination)
            if not self.routing.remove_binding(binding):
                return
            await self._store.delete_binding(binding)
            await self._auto_delete_sources([binding])
            await self._announce()

    def _check_binding_ends(self, binding: Binding, owner: Hashable | None) -> None:
        _not_default(binding.source)
        if binding.kind is DestinationKind.QUEUE:
            self.queue(binding.destination, owner)
        else:
            _not_default(binding.destination)
            self.exchange(binding.destination)
        self.exchange(binding.source)

    # --- queues ---------------------------------------------------------------------------------

    def local_name(self, generate: Callable[[], str]) -> str:
        """A name from `generate` for a new server-named queue. In a cluster it is one whose bundle
        this broker holds (if it holds any of the namespace's), so that the queue is served where the
        connection that declared it is: exclusive reply queues then never need another broker."""
        cluster = self._core.cluster
        held = [] if cluster is None else [b for b in cluster.held
                                           if (b.tenant, b.namespace) == (self.tenant, self.namespace)]
        name = generate()
        for _ in range(LOCAL_NAME_TRIES if held else 0):
            if partition_bundle(self.tenant, self.namespace, queue_topic(name), 0) in held:
                break
            name = generate()
        return name

    def queue(self, name: str, owner: Hashable | None = None) -> Queue:
        """The queue, if `owner` may use it (an exclusive queue only by its owner)."""
        queue = self.queues.get(name)
        if queue is None:
            raise UnknownQueue.about(Resource.queue(name), f"no {RESOURCE}")
        if queue.info.exclusive and queue.owner is not owner:
            raise _locked(name)
        return queue

    async def declare_queue(self, name: str, *, durable: bool = True, exclusive: bool = False,
                            auto_delete: bool = False, arguments: Mapping[str, Any] | None = None,
                            owner: Hashable | None = None, passive: bool = False,
                            server_named: bool = False, declared_by: str | None = None) -> Queue:
        """`declared_by`: the process a transient queue goes with (None: this one)."""
        if passive:
            queue = self.queue(name, owner)
            queue.touch()       # RabbitMQ counts a passive declare as a use too (x-expires)
            return queue
        arguments = dict(arguments or {})
        async with self._lock:
            existing = self.queues.get(name)
            if existing is not None:
                self.queue(name, owner)     # exclusive to someone else: RESOURCE_LOCKED
                if existing.info.exclusive != exclusive:    # RabbitMQ's strict exclusive-access check
                    raise _locked(name)
                if exclusive and declared_by is not None and existing.info.declared_by != declared_by:
                    raise _locked(name)     # a connection of another broker process holds it
                info = existing.info
                check_equivalent(name, (info.durable, info.auto_delete, info.arguments),
                                 (durable, auto_delete, arguments))
                existing.touch()
                return existing
            if self._core.cluster is not None:
                # Declared through another broker of the cluster since this one loaded the namespace:
                # attach the stored queue (its topic and position) instead of declaring it anew.
                stored = await self._store.get_queue(name)
                if stored is not None and stored.durable and not stored.exclusive:
                    check_equivalent(name, (stored.durable, stored.auto_delete, stored.arguments),
                                     (durable, auto_delete, arguments))
                    queue = self._adopt(stored)
                    queue.touch()
                    return queue
            if name.startswith(RESERVED_PREFIX) and not server_named:
                raise ReservedName(f"queue name '{name}' contains reserved prefix '{RESERVED_PREFIX}*'")
            refuse_change(queue_topic(name))   # a queue over a system topic would read held messages
            policy = QueuePolicy.of(name, arguments, durable=durable, exclusive=exclusive, auto_delete=auto_delete)
            bundle = partition_bundle(self.tenant, self.namespace, queue_topic(name), 0)
            cluster = self._core.cluster
            if cluster is not None and self._core.peers is not None and not cluster.owns(bundle):
                # Another broker serves it: declared there (its topic starts at the owner's end). An
                # exclusive one is locked there; its owner is the connection here, and it goes with
                # this process.
                doc = await declare_remote(self._core, bundle, name, durable=durable, auto_delete=auto_delete,
                                           exclusive=exclusive, arguments=arguments,
                                           declared_by=self._declared_by if exclusive or not durable else "")
                queue = self._adopt(QueueInfo.from_doc(doc))
                queue.owner = owner if exclusive else None
                queue.touch()
                return queue
            if declared_by is None:
                declared_by = self._declared_by if exclusive or not durable else ""
            info = QueueInfo(name, queue_topic(name), durable, exclusive, auto_delete, arguments,
                             declared_by=declared_by)
            created = await self._create_topic(info)
            info = replace(info, owns_topic=created)
            queue = self._attach(Queue(self._core, info, self._topic(info), self._core.clock,
                                       owner=owner if exclusive else None, policy=policy))
            await self._store.put_queue(info)
            self.queues[name] = queue
            await self._announce()
            return queue

    def _adopt(self, info: QueueInfo) -> Queue:
        queue = self.queues[info.name] = self._attach(
            Queue(self._core, info, self._topic(info), self._core.clock, restored=True))
        return queue

    async def take_over(self, bundle: Bundle) -> None:
        """This broker now serves `bundle`: what other brokers declared is read from the store first
        (a watch may not have told yet). Its queues consumed here through their previous owner are
        replaced by fresh copies; their consumers are cancelled (basic.cancel) and consume again here."""
        async with self._lock:
            await self._follow_store()
            for name, queue in list(self.queues.items()):
                if bundle.overlaps(queue.bundle) and isinstance(queue.subscription, RemoteSubscription):
                    consumers = queue.subscription.consumers
                    self._forget(queue)
                    self._adopt(queue.info)
                    for consumer in consumers:
                        consumer.queue_deleted()

    def serving(self, bundle: Bundle) -> None:
        """The bundle counts as owned now: its queues' background work starts here."""
        for queue in self.queues.values():
            if bundle.overlaps(queue.bundle):
                _start_background(queue)

    async def hand_over(self, bundle: Bundle) -> None:
        """Another broker serves the queues of `bundle` now: each is replaced by a fresh, unopened
        copy (refusing publishes and consumers here until the bundle comes back), its position is
        saved and its consumers are cancelled (basic.cancel), so clients reconnect to the owner."""
        for name, queue in list(self.queues.items()):
            if not bundle.overlaps(queue.bundle):
                continue
            consumers = list(queue.subscription.consumers) if queue.subscription is not None else []
            self.queues[name] = self._attach(Queue(self._core, queue.info, queue.topic, self._core.clock,
                                                   owner=queue.owner, restored=True))
            try:
                await queue.close()
            except (CoreError, StorageError) as exc:     # Fenced: the next owner reads what was saved
                log.warning("saving the position of queue %s failed: %s", name, exc)
            for consumer in consumers:
                consumer.queue_deleted()

    def _attach(self, queue: Queue) -> Queue:
        """Give a queue what its policy needs from the namespace: routing for its dead messages, a
        timer that deletes it when unused; one with background work (expiry, limits) opens now."""
        policy = queue.policy
        if policy.dead_letter_exchange is not None:
            queue.dead_letters = DeadLetterer(queue, self._route_dead, self.deliver)
        if policy.expires_ms is not None:
            queue.unused_timer = UnusedQueueTimer(queue, policy.expires_ms, self._core.clock, self._expire_queue)
        if queue.served_here:
            _start_background(queue)
        return queue

    async def _route_dead(self, exchange: str, routing_key: str, headers: HeadersFunction) -> list[Queue]:
        """Where a dead message goes: like a publish, but an internal exchange may take it. In a
        cluster a destination this broker has not seen may have been declared through another
        broker: it is looked up in the store rather than taken for missing (the message would go)."""
        if exchange != DEFAULT_EXCHANGE and exchange not in self.routing.exchanges:
            return []
        if self._core.cluster is None:
            queues = self.queues
            return [queues[name] for name in self.routing.route(exchange, routing_key, headers, queues)]
        found = []
        for name in self.routing.route(exchange, routing_key, headers, _ANY_QUEUE):
            queue = self.queues.get(name) or await self.stored_queue(name)
            if queue is not None:
                found.append(queue)
        return found

    async def _expire_queue(self, queue: Queue) -> None:
        async with self._lock:
            if self.queues.get(queue.name) is queue:
                log.info("queue %s in %s/%s expired (unused)", queue.name, self.tenant, self.namespace)
                await self._remove_queue(queue)

    async def _create_topic(self, info: QueueInfo) -> bool:
        """The queue's topic, starting empty: an existing one-partition topic is taken over from its
        current end (a queue over a Kafka topic). True if the topic is new."""
        topic = self._topic(info)
        created = True
        try:
            await self._core.create_topic(topic, 1, dict(QUEUE_TOPIC_CONFIGS))
        except TopicExists:
            created = False
            existing = await self._core.registry.get_topic(topic)
            if existing.partitions != 1:
                raise InequivalentDeclaration.about(Resource.queue(info.name), (
                    f"{RESOURCE} would use the topic '{info.topic}', which has {existing.partitions} partitions")
                ) from None
        partition = await self._core.partition(topic, 0)
        cursor = await self._core.cursor(topic, 0, CURSOR_NAME)
        cursor.commit(partition.high_watermark)
        with storage_errors():
            await cursor.flush()
        return created

    async def delete_queue(self, name: str, *, if_unused: bool = False, if_empty: bool = False,
                           owner: Hashable | None = None) -> int:
        """Returns how many messages were ready in it. A missing queue is not an error."""
        async with self._lock:
            if name not in self.queues:
                return 0
            queue = self.queue(name, owner)
            if not queue.served_here and self._core.peers is not None:   # deleted by the broker serving it
                count = await delete_remote(self._core, queue, if_unused=if_unused, if_empty=if_empty)
                if self.queues.get(name) is queue:
                    self._forget(queue)
                return count
            if if_unused and queue.consumer_count:
                raise ResourceInUse.about(Resource.queue(name), f"{RESOURCE} in use")
            count = await queue.message_count()
            if if_empty and count:
                raise ResourceInUse.about(Resource.queue(name), f"{RESOURCE} not empty")
            await self._remove_queue(queue)
            return count

    async def _remove_queue(self, queue: Queue) -> None:
        removed = self._forget(queue)
        await self._store.delete_queue(queue.name)
        for binding in removed:
            await self._store.delete_binding(binding)
        await self._delete_topic(queue.info)
        await self._auto_delete_sources(removed)
        await self._announce()

    def _forget(self, queue: Queue) -> list[Binding]:
        """Drop the queue from memory: its consumers are cancelled; returns its bindings."""
        consumers = list(queue.subscription.consumers) if queue.subscription is not None else []
        del self.queues[queue.name]
        queue.discard()
        for consumer in consumers:
            consumer.queue_deleted()
        return self.routing.remove_destination(DestinationKind.QUEUE, queue.name)

    async def _delete_topic(self, info: QueueInfo) -> None:
        """The queue's messages go with it: its topic, or only its cursor on a topic it took over."""
        topic = self._topic(info)
        try:
            if info.owns_topic:
                await self._core.delete_topic(topic)
            else:
                await (await self._core.cursor(topic, 0, CURSOR_NAME)).delete()
        except UnknownTopic:
            pass

    async def purge_queue(self, name: str, *, owner: Hashable | None = None) -> int:
        return await self.queue(name, owner).purge()

    async def consumer_removed(self, queue: Queue) -> None:
        """Call after removing a consumer: an auto-delete queue goes with its last consumer (decided
        by the broker serving it)."""
        queue.touch()
        if not queue.served_here:
            # Answered once the owner removed it (and deleted an auto-delete queue with its last
            # consumer), as RabbitMQ's cancel-ok is: a declare that follows finds what is left. Not
            # longer than a moment: an owner that is gone must not hold a channel's close.
            if isinstance(queue.subscription, RemoteSubscription):
                try:
                    async with asyncio.timeout(CANCEL_SETTLE_S):
                        await queue.subscription.settled()
                except TimeoutError:
                    pass
            return
        if queue.info.auto_delete and queue.had_consumers and not queue.consumer_count and not queue.deleted:
            async with self._lock:
                if self.queues.get(queue.name) is queue and not queue.consumer_count:
                    await self._remove_queue(queue)

    async def release_owner(self, owner: Hashable) -> None:
        """The owner (a connection) is gone: its exclusive queues are deleted."""
        owned = [queue for queue in self.queues.values() if queue.info.exclusive and queue.owner is owner]
        if not owned:
            return
        async with self._lock:
            for queue in owned:
                if self.queues.get(queue.name) is not queue:
                    continue
                if queue.served_here or self._core.peers is None:
                    await self._remove_queue(queue)
                else:                 # deleted by the broker serving it
                    try:
                        await delete_remote(self._core, queue, if_unused=False, if_empty=False)
                    except CoreError as exc:   # its row stays until this process leaves the cluster
                        log.warning("deleting exclusive queue %s at its broker failed: %s", queue.name, exc)
                    self._forget(queue)

    # --- publishing -----------------------------------------------------------------------------

    def route(self, exchange: str, routing_key: str, headers: HeadersFunction,
              properties: PropertiesFunction = no_properties) -> list[Queue]:
        """The queues a publish to `exchange` reaches; UnknownExchange / NotPermitted (internal)."""
        if exchange != DEFAULT_EXCHANGE:
            found = self.exchange(exchange)
            if found.internal:
                raise NotPermitted.about(Resource.exchange(exchange), f"cannot publish to internal {RESOURCE}")
        queues = self.queues
        return [queues[name] for name in self.routing.route(exchange, routing_key, headers, queues, properties)]

    @property
    def clustered(self) -> bool:
        return self._core.cluster is not None

    async def look_up(self, exchange: str, routing_key: str) -> None:
        """For a publish that found its exchange, or its queue through the default exchange, missing
        here: in a cluster it may have been declared through another broker a moment ago, before
        this one followed (an RPC reply to a reply queue just declared elsewhere). Route after this."""
        if self._core.cluster is None:
            return
        if exchange == DEFAULT_EXCHANGE:
            if routing_key and routing_key not in self.queues:     # "" names no queue
                await self.stored_queue(routing_key)
        elif exchange not in self.routing.exchanges and await self._store.get_exchange(exchange) is not None:
            async with self._lock:
                await self._follow_store()

    async def stored_queue(self, name: str) -> Queue | None:
        """The queue as declared through another broker and not followed here yet (None: none)."""
        stored = await self._store.get_queue(name)
        if stored is None:
            return None
        return self.queues.get(name) or self._adopt(stored)

    def held(self):
        """Where the namespace's held messages go (its `intake.wait_writable()` is back-pressure):
        its store, or the broker serving that store."""
        return self._core.delayed.intake(self.tenant, self.namespace)

    def hold(self, exchange: str, record: Record, due_ms: int) -> asyncio.Future:
        """Keep a message published to `exchange` (a delayed one) until `due_ms`, then route it as
        `release` does; the future resolves once it is durably held."""
        return self._core.delayed.hold(self.tenant, self.namespace, record, due_ms, Target(HELD_TARGET, exchange))

    def deliver(self, queue: Queue, records: list[Record], sender: Bundle) -> list[Awaitable]:
        """Append `records` (dead-lettered or released here) to `queue`: here, or at the broker
        serving it over the peer link as a client's publishes go, or without peer links through its
        mailbox (core/queues/forwarding.py); `sender` is the bundle the messages come from."""
        cluster = self._core.cluster
        if cluster is None or cluster.owns(queue.bundle) or self._core.peers is not None:
            return [queue.publish(record) for record in records]
        return [asyncio.ensure_future(forward(self._core, queue.name, queue.bundle, records, sender))]

    def release_routes(self, exchange: str, record: Record, headers: HeadersFunction,
                       properties: PropertiesFunction) -> list[tuple[str, int]]:
        """Where a held message that is due goes: its queues' topics (partition 0). An exchange
        deleted meanwhile routes nothing (the message is dropped)."""
        if exchange not in self.routing.exchanges:
            return []
        routing_key = (record.key or b"").decode("utf-8", "replace")
        queues = self.queues
        return [(queues[name].topic.topic, 0)
                for name in self.routing.route(exchange, routing_key, headers, queues, properties)]

    def publish_released(self, topic: str, records: list[Record]) -> list[Awaitable]:
        """Append released messages to the queue whose topic is `topic` (UnknownTopic: none is)."""
        for queue in self.queues.values():
            if queue.topic.topic == topic:
                return self.deliver(queue, records, partition_bundle(self.tenant, self.namespace, DELAYED_TOPIC, 0))
        raise UnknownTopic(f"no queue of {self.tenant}/{self.namespace} has topic {topic}")

    async def close(self) -> None:
        self._closed = True
        self._unwatch()
        if self._following is not None:
            self._following.cancel()
        for queue in list(self.queues.values()):
            try:
                await queue.close()
            except Exception as exc:
                log.warning("closing queue %s failed: %s", queue.name, exc)


class _AnyQueue:
    """Routes to every bound destination, known here or not."""

    def __contains__(self, name: object) -> bool:
        return True


_ANY_QUEUE = _AnyQueue()


class QueueService:
    """`message_facts`: how a protocol reads the headers and properties of a stored message, for
    routing a held message when it is due (the core never decodes a protocol's properties itself)."""

    def __init__(self, core, *, message_facts: "MessageFacts | None" = None) -> None:
        self._core = core
        self._namespaces: dict[tuple[str, str], QueueNamespace] = {}
        self._loading: dict[tuple[str, str], asyncio.Future] = {}
        self.message_facts: MessageFacts = message_facts or _no_facts
        core.delayed.register(HELD_TARGET, _HeldForExchanges(self))
        core.delayed.register(REQUEUE_TARGET, _HeldForQueue(self))
        if core.cluster is not None:
            core.cluster.on_release(self._hand_over)
            core.cluster.on_acquire(self._take_over)
            core.cluster.on_broker_left(self._broker_left)
            core.cluster.on_serving(self._serving)
        if core.mailbox is not None:
            core.mailbox.handle(PUBLISH, self._on_forwarded)
        if core.peers is not None:      # what other brokers' clients ask of the queues served here
            PeerRequests(core, self.namespace).register(core.peers)

    async def _on_forwarded(self, bundle: Bundle, request: dict) -> dict:
        """Messages another broker dead-lettered or released into a queue this one owns."""
        queue = (await self.namespace(bundle.tenant, bundle.namespace)).queues.get(request["queue"])
        records = decode_records(request["records"])
        if queue is None:
            log.warning("%d messages forwarded to queue %s of %s/%s dropped: no such queue", len(records),
                        request["queue"], bundle.tenant, bundle.namespace)
            return {"dropped": len(records)}
        results = await asyncio.gather(*(queue.publish(record) for record in records), return_exceptions=True)
        for result in results:   # a queue that refused a message (reject-publish) dealt with it
            if isinstance(result, CoreError) and not getattr(result, "refused", False):
                raise result
            if isinstance(result, BaseException) and not isinstance(result, CoreError):
                raise RequestRefused(f"queue {queue.name}: {result}")
        return {}

    async def _take_over(self, bundle: Bundle) -> None:
        space = self._namespaces.get((bundle.tenant, bundle.namespace))
        if space is not None:   # else loaded from the store when first used
            await space.take_over(bundle)

    def _serving(self, bundle: Bundle) -> None:
        space = self._namespaces.get((bundle.tenant, bundle.namespace))
        if space is not None:
            space.serving(bundle)

    def _broker_left(self) -> None:
        for space in self._namespaces.values():    # its transient queues and exchanges go
            space.changed_elsewhere()

    async def _hand_over(self, bundle: Bundle) -> None:
        space = self._namespaces.get((bundle.tenant, bundle.namespace))
        if space is not None:
            await space.hand_over(bundle)

    async def namespace(self, tenant: str, namespace: str) -> QueueNamespace:
        key = (tenant, namespace)
        found = self._namespaces.get(key)
        if found is not None:
            return found
        loading = self._loading.get(key)
        if loading is None:
            loading = asyncio.ensure_future(self._load(tenant, namespace))
            self._loading[key] = loading
            loading.add_done_callback(lambda _: self._loading.pop(key, None))
        return await asyncio.shield(loading)

    async def _load(self, tenant: str, namespace: str) -> QueueNamespace:
        await self._core.meters.load(tenant, namespace)   # its policies: a queue's default message TTL
        space = QueueNamespace(self._core, tenant, namespace)
        await space.load()
        self._namespaces[(tenant, namespace)] = space
        return space

    def loaded(self, tenant: str, namespace: str) -> QueueNamespace | None:
        """The namespace's queues if they are in memory (for views that must not load them)."""
        return self._namespaces.get((tenant, namespace))

    def loaded_namespaces(self) -> list[QueueNamespace]:
        """Every namespace whose queues are in memory (for metrics, which must not load any)."""
        return list(self._namespaces.values())

    async def forget(self, tenant: str, namespace: str) -> None:
        """Close and drop the namespace's queues in memory (its stored rows are being deleted)."""
        space = self._namespaces.pop((tenant, namespace), None)
        if space is not None:
            await space.close()

    async def close(self) -> None:
        for space in list(self._namespaces.values()):
            await space.close()


HELD_TARGET = "exchange"      # the kind of delayed-message target a queue namespace routes


class _HeldForExchanges:
    """The deliverer of held messages published to a delayed exchange (core/delayed/store.py)."""

    def __init__(self, service: QueueService) -> None:
        self._service = service

    async def route(self, tenant: str, namespace: str, exchange: str, record: Record) -> list[tuple[str, int]]:
        space = await self._service.namespace(tenant, namespace)
        headers, properties = self._service.message_facts(record)
        return space.release_routes(exchange, record, headers, properties)

    def publish(self, tenant: str, namespace: str, topic: str, partition: int, records: list[Record]) -> list:
        return [self._publish(tenant, namespace, topic, records)]

    async def _publish(self, tenant: str, namespace: str, topic: str, records: list[Record]) -> None:
        space = await self._service.namespace(tenant, namespace)
        for waiter in space.publish_released(topic, records):
            await waiter


class _HeldForQueue(_HeldForExchanges):
    """The deliverer of messages held for a queue's x-requeue-delay: back to that queue's tail."""

    async def route(self, tenant: str, namespace: str, queue: str, record: Record) -> list[tuple[str, int]]:
        found = (await self._service.namespace(tenant, namespace)).queues.get(queue)
        return [(found.topic.topic, 0)] if found is not None else []
MessageFacts = Callable[[Record], tuple[HeadersFunction, PropertiesFunction]]


def _no_facts(record: Record) -> tuple[HeadersFunction, PropertiesFunction]:
    return no_properties, no_properties


def _start_background(queue: Queue) -> None:
    """A queue whose policy has background work (expiry, limits) opens at once where it is served."""
    policy = queue.policy
    if policy.message_ttl_ms is not None or policy.dead_letter_exchange is not None or policy.limits_length:
        opening = asyncio.ensure_future(queue.open())
        opening.add_done_callback(lambda done: done.cancelled() or done.exception())


def publish(queues: list[Queue], record: Record) -> list[asyncio.Future]:
    """Append `record` to every queue; one future per queue, resolved once durable there."""
    return [queue.publish(record) for queue in queues]


# --- checks ---------------------------------------------------------------------------------------

def _not_default(name: str) -> None:
    if name == DEFAULT_EXCHANGE:
        raise NotPermitted("operation not permitted on the default exchange")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _inequivalent(arg: str, resource: Resource, received: Any, current: Any) -> CoreError:
    return InequivalentDeclaration.about(resource, f"inequivalent arg '{arg}' for {RESOURCE}: received "
                                                   f"'{_shown(received)}' but current is '{_shown(current)}'")


def _check_exchange_equivalence(existing: Exchange, wanted: Exchange) -> None:
    for arg, attr in (("type", "type"), ("durable", "durable"), ("auto_delete", "auto_delete"),
                      ("internal", "internal")):
        if getattr(existing, attr) != getattr(wanted, attr):
            raise _inequivalent(arg, Resource.exchange(existing.name), getattr(wanted, attr), getattr(existing, attr))
    if existing.alternate != wanted.alternate:
        raise _inequivalent("alternate-exchange", Resource.exchange(existing.name), wanted.alternate or "none",
                            existing.alternate or "none")


def _locked(name: str) -> CoreError:
    return ResourceLocked.about(Resource.queue(name), (
        f"cannot obtain exclusive access to locked {RESOURCE}. It could be originally declared on another "
        "connection or the exclusive property value does not match that of the original declaration."))

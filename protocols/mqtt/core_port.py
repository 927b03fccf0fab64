"""Every call the MQTT front end makes into the core, in one place (docs/MQTT.md lists them).

The rest of the package speaks of sessions, subscriptions and messages; this module turns them into
the core's words: users, namespaces, queues bound to the namespace's `amq.topic` exchange, records
appended to queues, a consumer's deliveries and acknowledgements, and small documents in the
metadata store (stored sessions and retained messages). When the core's front-end interface is
reshaped, this is the module that follows it.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable
from typing import Any

from core.auth import Principal, User, UserStore
from core.connections import ClientConnection, peer_address
from core.errors import InvalidName
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, check_name
from core.queues.exchange import Binding, DestinationKind
from core.queues.naming import name_of, storage_key
from core.queues.queue import Queue
from core.queues.service import QueueNamespace, QueueService
from core.queues.subscription import Consumer
from core.records.builder import Record
from storage.api import NoNode

TOPIC_EXCHANGE = "amq.topic"
GUEST = "guest"
DEFAULT_VHOST = "/"


class CorePort:
    def __init__(self, core, queues: QueueService) -> None:
        self._core = core
        self._queues = queues
        self._users = UserStore(core.metadata)

    # --- who ------------------------------------------------------------------------------------

    async def log_in(self, username: str, password: str, peer_host: str | None, *,
                     default_guest: bool) -> User | None:
        """The user these credentials are, or None. guest/guest (or no credentials at all, when
        `default_guest`) from a loopback address is RabbitMQ's default guest user on "/"."""
        if username:
            user = await self._users.verify(username, password)
            if user is not None:
                return user
        if default_guest and _is_loopback(peer_host) and await self._users.get(GUEST) is None:
            if (username, password) in (("", ""), (GUEST, GUEST)):
                return User(Principal(GUEST, DEFAULT_TENANT, DEFAULT_NAMESPACE), {})
        return None

    @staticmethod
    def may_open(user: User, tenant: str, namespace: str) -> bool:
        if user.principal.user == GUEST and not user.scram:
            return (tenant, namespace) == (DEFAULT_TENANT, DEFAULT_NAMESPACE)
        return user.permission_on(tenant, namespace) is not None

    # The authorization hooks: every publish and every subscription asks here first. Until the
    # shared permission model covers MQTT, a user logged in to a vhost may do both there.
    @staticmethod
    def may_publish(user: User, tenant: str, namespace: str, topic: str) -> bool:
        return True

    @staticmethod
    def may_subscribe(user: User, tenant: str, namespace: str, topic_filter: str) -> bool:
        return True

    @staticmethod
    def namespace_of(vhost: str) -> tuple[str, str] | None:
        """The tenant/namespace of a vhost as AMQP names them ("/", "ns" or "tenant/ns"), or None."""
        if vhost == DEFAULT_VHOST:
            return DEFAULT_TENANT, DEFAULT_NAMESPACE
        parts = vhost.split("/")
        if len(parts) == 1:
            parts = [DEFAULT_TENANT, parts[0]]
        if len(parts) != 2:
            return None
        try:
            return check_name("tenant", parts[0]), check_name("namespace", parts[1])
        except InvalidName:
            return None

    def connection_opened(self, address: tuple | None, close) -> ClientConnection:
        return self._core.connections.add(ClientConnection("mqtt", peer_address(address), close))

    def connection_closed(self, connection: ClientConnection) -> None:
        self._core.connections.remove(connection)

    def now_ms(self) -> int:
        return self._core.clock.now_ms()

    # --- queues, bindings, publishing -------------------------------------------------------------

    async def namespace(self, tenant: str, namespace: str) -> QueueNamespace:
        return await self._queues.namespace(tenant, namespace)

    async def open_queue(self, space: QueueNamespace, name: str, *, durable: bool,
                         auto_delete: bool = False) -> Queue:
        """The queue holding a session's (or a share group's) messages, declared if missing (one
        that exists is kept as it is, with what waits in it). A session that does not outlive its
        connection has a non-durable queue, deleted with it."""
        existing = space.queues.get(name)
        if existing is not None:
            return existing
        return await space.declare_queue(name, durable=durable, auto_delete=auto_delete)

    def existing_queue(self, space: QueueNamespace, name: str) -> Queue | None:
        return space.queues.get(name)

    async def delete_queue(self, space: QueueNamespace, name: str) -> None:
        if name in space.queues:
            await space.delete_queue(name)

    async def bind(self, space: QueueNamespace, queue: str, binding_key: str) -> None:
        await space.bind(Binding(TOPIC_EXCHANGE, queue, DestinationKind.QUEUE, binding_key))

    async def unbind(self, space: QueueNamespace, queue: str, binding_key: str) -> None:
        await space.unbind(Binding(TOPIC_EXCHANGE, queue, DestinationKind.QUEUE, binding_key))

    def publish(self, space: QueueNamespace, routing_key: str, record: Record, *,
                expires: bool = False) -> list[Awaitable]:
        """Route through amq.topic and append; one future per queue reached, done once durable.
        `expires`: the record has its own expiry, which the queues enforce while nobody consumes."""
        queues = space.route(TOPIC_EXCHANGE, routing_key, _no_headers)
        if expires:
            for queue in queues:
                queue.expect_expiring()
        return [queue.publish(record) for queue in queues]

    # --- consuming --------------------------------------------------------------------------------

    async def consume(self, queue: Queue, consumer: Consumer) -> None:
        await queue.add_consumer(consumer)

    async def stop_consuming(self, space: QueueNamespace, queue: Queue, consumer: Consumer) -> None:
        """No more deliveries; what the consumer held unacknowledged goes back to the queue."""
        if queue.subscription is not None and not queue.deleted:
            queue.subscription.remove_consumer(consumer)
            await space.consumer_removed(queue)

    @staticmethod
    def ack(queue: Queue, offsets: list[int]) -> None:
        if queue.subscription is not None and not queue.deleted:
            queue.subscription.ack(offsets)

    @staticmethod
    def wake(queue: Queue) -> None:
        if queue.subscription is not None and not queue.deleted:
            queue.subscription.wake()

    # --- stored documents (sessions, retained messages) --------------------------------------------

    @staticmethod
    def doc_path(kind: str, tenant: str, namespace: str, name: str | None = None) -> str:
        base = f"/mqtt/{kind}/{tenant}/{namespace}"
        return base if name is None else f"{base}/{storage_key(name)}"

    async def load_doc(self, path: str) -> dict[str, Any] | None:
        node = await self._core.metadata.get(path)
        return None if node is None else json.loads(node.value)

    async def save_doc(self, path: str, doc: dict[str, Any]) -> None:
        await self._core.metadata.put(path, json.dumps(doc, separators=(",", ":")).encode())

    async def drop_doc(self, path: str) -> None:
        try:
            await self._core.metadata.delete(path)
        except NoNode:
            pass

    async def doc_names(self, path: str) -> list[str]:
        return [name_of(key) for key in await self._core.metadata.children(path)]


def _no_headers() -> dict:
    return {}


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False



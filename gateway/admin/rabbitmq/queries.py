"""Reads of RabbitMQ's management API: overview, nodes, vhosts, users, permissions, exchanges, queues,
bindings, consumers, connections and channels. Plain functions of (state, caller, ...), so they are
tested without HTTP; every list holds only what the caller's tenancy lets it see."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.auth import Permission
from core.errors import RESOURCE, Resource, UnknownQueue
from core.names import TopicName
from core.queues.queue import CURSOR_NAME, Queue, QueueInfo
from gateway.admin.rabbitmq import shapes
from gateway.admin.rabbitmq.vhosts import vhost_name, visible_vhost, visible_vhosts

DISK_FREE_LIMIT = 50_000_000   # RabbitMQ's default disk_free_limit: below it the disk alarm is on
_RATE_MIN_INTERVAL_S = 1.0
_STARTED_S = time.monotonic()


@dataclass
class RabbitState:
    """What the API reads: the admin context, the listener addresses and data directory, and the last
    sample of each queue's counters (rates are the difference between two calls)."""

    context: Any                      # gateway.admin.api.AdminContext
    listeners: Mapping[str, str]      # "amqp" -> "host:port", ...
    data_dir: str
    samples: dict[tuple, tuple[float, int, int, float, float]] = field(default_factory=dict)

    @property
    def core(self):
        return self.context.core

    @property
    def tenancy(self):
        return self.context.tenancy

    def rates(self, key: tuple, end: int, position: int) -> tuple[float, float]:
        """(publish, acknowledge) per second since the last sample of `key` at least a second old."""
        now = time.monotonic()
        last = self.samples.get(key)
        if last is None:
            self.samples[key] = (now, end, position, 0.0, 0.0)
            return 0.0, 0.0
        at, last_end, last_position, publish, ack = last
        if now - at >= _RATE_MIN_INTERVAL_S:
            publish, ack = (end - last_end) / (now - at), (position - last_position) / (now - at)
            self.samples[key] = (now, end, position, max(0.0, publish), max(0.0, ack))
        return max(0.0, publish), max(0.0, ack)


# --- vhosts, users, permissions -------------------------------------------------------------------

async def vhosts(state: RabbitState, caller) -> list[dict[str, Any]]:
    found = []
    for vhost, tenant, namespace in await visible_vhosts(state.tenancy, caller):
        listed = await queues_of(state, caller, vhost)
        found.append(shapes.vhost_doc(vhost, ready=sum(q["messages_ready"] for q in listed),
                                      unacked=sum(q["messages_unacknowledged"] for q in listed)))
    return found


async def users(state: RabbitState, caller) -> list[dict[str, Any]]:
    store = state.context.users
    found = []
    for name in await store.names():
        user = await store.get(name)
        if user is not None and caller.sees(user.principal.tenant):
            found.append(shapes.user_doc(name, user.tags))
    return found


def effective_permissions(user) -> tuple[Permission, ...]:
    """A user without explicit permissions has everything on its own namespace."""
    if user.permissions is None:
        return (Permission(user.principal.tenant, user.principal.namespace),)
    return user.permissions


async def permissions(state: RabbitState, caller, *, vhost: str | None = None,
                      user_name: str | None = None) -> list[dict[str, Any]]:
    store = state.context.users
    wanted = None if vhost is None else await visible_vhost(state.tenancy, caller, vhost)
    found = []
    for name in [user_name] if user_name is not None else await store.names():
        user = await store.get(name)
        if user is None:
            continue
        for p in effective_permissions(user):
            if caller.sees(p.tenant) and (wanted is None or (p.tenant, p.namespace) == wanted):
                found.append(shapes.permission_doc(name, vhost_name(p.tenant, p.namespace),
                                                   p.configure, p.write, p.read))
    return found


# --- exchanges, queues, bindings ------------------------------------------------------------------

async def _spaces(state: RabbitState, caller, vhost: str | None):
    """(vhost, loaded QueueNamespace) of one vhost or of every visible one."""
    if vhost is not None:
        tenant, namespace = await visible_vhost(state.tenancy, caller, vhost)
        targets = [(vhost_name(tenant, namespace), tenant, namespace)]
    else:
        targets = await visible_vhosts(state.tenancy, caller)
    amqp = state.context.amqp
    return [(name, await amqp.queues.namespace(tenant, namespace)) for name, tenant, namespace in targets]


async def exchanges(state: RabbitState, caller, vhost: str | None = None) -> list[dict[str, Any]]:
    found = []
    for name, space in await _spaces(state, caller, vhost):
        found.append(shapes.default_exchange_doc(name))
        found += [shapes.exchange_doc(name, e) for _, e in sorted(space.routing.exchanges.items())]
    return found


async def exchange(state: RabbitState, caller, vhost: str, name: str) -> dict[str, Any]:
    (vhost_shown, space), = await _spaces(state, caller, vhost)
    if name in ("", "amq.default"):
        return shapes.default_exchange_doc(vhost_shown)
    return shapes.exchange_doc(vhost_shown, space.exchange(name))


async def _cursor_position(core, info: QueueInfo, tenant: str, namespace: str) -> int:
    node = await core.metadata.get(f"/cursors/{tenant}/{namespace}/{info.topic}/0/{CURSOR_NAME}")
    return 0 if node is None else json.loads(node.value)["committed"]


async def queue_counts(state: RabbitState, space, queue: Queue) -> tuple[int, int, int, int]:
    """(ready, unacknowledged, end offset, position): live counts when the queue is open here, else
    from its log's end and its stored cursor (without opening the queue)."""
    core = state.core
    partition = await core.partition(TopicName(space.tenant, space.namespace, queue.info.topic), 0)
    end = partition.high_watermark
    subscription = queue.subscription
    if queue.served_here and subscription is not None and hasattr(subscription, "ready_count"):
        subscription.note_high_watermark(end)
        position = subscription.cursor.committed_offset if hasattr(subscription, "cursor") else 0
        return subscription.ready_count, subscription.unacked_count, end, position
    position = await _cursor_position(core, queue.info, space.tenant, space.namespace)
    return max(0, end - position), 0, end, position


async def _queue_doc(state: RabbitState, vhost: str, space, queue: Queue) -> dict[str, Any]:
    ready, unacked, end, position = await queue_counts(state, space, queue)
    publish, ack = state.rates((space.tenant, space.namespace, queue.name), end, position)
    return shapes.queue_doc(vhost, queue.info, ready=ready, unacked=unacked, consumers=queue.consumer_count,
                            publish_rate=publish, ack_rate=ack, published=end)


async def queues_of(state: RabbitState, caller, vhost: str | None = None) -> list[dict[str, Any]]:
    found = []
    for name, space in await _spaces(state, caller, vhost):
        for _, queue in sorted(space.queues.items()):
            found.append(await _queue_doc(state, name, space, queue))
    return found


async def queue(state: RabbitState, caller, vhost: str, name: str) -> dict[str, Any]:
    (vhost_shown, space), = await _spaces(state, caller, vhost)
    return await _queue_doc(state, vhost_shown, space, existing_queue(space, name))


def existing_queue(space, name: str) -> Queue:
    """The queue, exclusive ones included (the owner check is for clients, not operators)."""
    found = space.queues.get(name)
    if found is None:
        raise UnknownQueue.about(Resource.queue(name), f"no {RESOURCE}")
    return found


def bindings_in(vhost: str, space) -> list[dict[str, Any]]:
    found = [shapes.default_binding_doc(vhost, name) for name in sorted(space.queues)]
    for source in sorted(space.routing.bindings):
        found += [shapes.binding_doc(vhost, b) for b in space.routing.bindings[source].values()]
    return found


async def bindings(state: RabbitState, caller, vhost: str | None = None) -> list[dict[str, Any]]:
    found = []
    for name, space in await _spaces(state, caller, vhost):
        found += bindings_in(name, space)
    return found


async def consumers(state: RabbitState, caller, vhost: str | None = None) -> list[dict[str, Any]]:
    found = []
    for name, space in await _spaces(state, caller, vhost):
        for queue_name, queue in sorted(space.queues.items()):
            subscription = queue.subscription
            for consumer in getattr(subscription, "consumers", []) if queue.served_here else []:
                channel = getattr(consumer, "channel", None)
                found.append({"queue": {"name": queue_name, "vhost": name},
                              "consumer_tag": getattr(consumer, "tag", ""), "exclusive": False,
                              "ack_required": not getattr(consumer, "auto_ack", False),
                              "prefetch_count": getattr(consumer, "prefetch", 0), "active": True,
                              "activity_status": "up", "arguments": {},
                              "channel_details": {"number": getattr(channel, "number", 0)}})
    return found


# --- connections and channels ---------------------------------------------------------------------

def _visible_connections(state: RabbitState, caller):
    return [c for c in state.core.connections.all()
            if (c.tenant is None and caller.tenant_scope is None) or (c.tenant is not None and caller.sees(c.tenant))]


def _connection_doc(state: RabbitState, connection) -> dict[str, Any]:
    vhost = None if connection.tenant is None else vhost_name(connection.tenant, connection.namespace)
    listener = state.listeners.get(connection.protocol, "")
    return shapes.connection_doc(connection, listener, vhost, len(connection.channels()))


def connections(state: RabbitState, caller) -> list[dict[str, Any]]:
    return [_connection_doc(state, c) for c in _visible_connections(state, caller)]


def find_connection(state: RabbitState, caller, name: str):
    """The connection of that RabbitMQ-style name ("peer -> listener") or gateway id; None: not visible."""
    for connection in _visible_connections(state, caller):
        if name in (_connection_doc(state, connection)["name"], str(connection.id)):
            return connection
    return None


def channels(state: RabbitState, caller, connection_name: str | None = None) -> list[dict[str, Any]]:
    found = []
    for connection in _visible_connections(state, caller):
        doc = _connection_doc(state, connection)
        if connection_name is None or doc["name"] == connection_name:
            found += [shapes.channel_doc(doc, channel) for channel in connection.channels()]
    return found


# --- overview, nodes, alarms ----------------------------------------------------------------------

def alarms(state: RabbitState) -> list[dict[str, Any]]:
    """RabbitMQ's resource alarms that mean something here: the data directory's disk running out."""
    try:
        free = shutil.disk_usage(state.data_dir).free
    except OSError:
        return []
    return [{"resource": "disk", "node": shapes.node_name()}] if free < DISK_FREE_LIMIT else []


def node(state: RabbitState) -> dict[str, Any]:
    try:
        free = shutil.disk_usage(state.data_dir).free
    except OSError:
        free = 0
    return {"name": shapes.node_name(), "type": "disc", "running": True, "os_pid": str(os.getpid()),
            "uptime": int((time.monotonic() - _STARTED_S) * 1000), "processors": os.cpu_count() or 1,
            "mem_used": _resident_bytes(), "mem_alarm": False, "disk_free": free,
            "disk_free_limit": DISK_FREE_LIMIT, "disk_free_alarm": free < DISK_FREE_LIMIT,
            "fd_used": _open_files(), "sockets_used": len(state.core.connections.all()),
            "partitions": [], "being_drained": False, "applications": [], "exchange_types": _exchange_types()}


async def overview(state: RabbitState, caller) -> dict[str, Any]:
    listed = await queues_of(state, caller)
    visible = _visible_connections(state, caller)
    ready = sum(q["messages_ready"] for q in listed)
    unacked = sum(q["messages_unacknowledged"] for q in listed)
    host, port = shapes.split_address(state.listeners.get("amqp", ""))
    return {"management_version": shapes.MANAGEMENT_VERSION, "rates_mode": "basic",
            "product_name": shapes.PRODUCT_NAME, "product_version": product_version(),
            "rabbitmq_version": shapes.MANAGEMENT_VERSION, "cluster_name": shapes.node_name(),
            "node": shapes.node_name(), "exchange_types": _exchange_types(),
            "disable_stats": False, "enable_queue_totals": True,
            "message_stats": {"publish_details": shapes.rate(sum(q["message_stats"]["publish_details"]["rate"]
                                                                 for q in listed))},
            "queue_totals": {"messages": ready + unacked, "messages_ready": ready,
                             "messages_unacknowledged": unacked},
            "object_totals": {"connections": len(visible), "channels": sum(len(c.channels()) for c in visible),
                              "consumers": sum(q["consumers"] for q in listed), "queues": len(listed),
                              "exchanges": len(await exchanges(state, caller))},
            "listeners": [{"node": shapes.node_name(), "protocol": "amqp", "ip_address": host, "port": port}],
            "contexts": []}


def _exchange_types() -> list[dict[str, Any]]:
    return [{"name": name, "description": "", "enabled": True}
            for name in ("direct", "fanout", "headers", "topic", "x-delayed-message", "x-consistent-hash")]


def product_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("gateway")
    except PackageNotFoundError:
        return "0"


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _open_files() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0

"""What a namespace holds, and who is connected.

    GET    /tenants/{t}/namespaces/{ns}/topics?offset=&limit=     names and partition counts, a page
    GET    /tenants/{t}/namespaces/{ns}/topics/{topic}             partitions: offsets, size; subscriptions
    DELETE /tenants/{t}/namespaces/{ns}/topics/{topic}
    GET    /tenants/{t}/namespaces/{ns}/subscriptions              Kafka groups and AMQP queues alike
    GET    /tenants/{t}/namespaces/{ns}/exchanges                  with their bindings
    GET    /tenants/{t}/namespaces/{ns}/queues                     with their subscription type, parked groups
    POST   /tenants/{t}/namespaces/{ns}/queues/{queue}/parked-groups/{group}/release
    GET    /connections                                            this process's client connections
    DELETE /connections/{id}
    GET    /acls, GET /quotas                                      Kafka ACLs and client quotas

A subscription is a cursor: a Kafka group's committed offsets or an AMQP queue's position. Its
backlog is the partition's end offset minus that position. Its consumers are group members, queue
consumers, and for Kafka consumers that fetch without a group (assign() mode) the connections that
fetched the topic's partitions in the last minute without being a member of one of its groups.
"""

# No `from __future__ import annotations` here: FastAPI must see the routes' annotations as
# objects (they name dependencies local to router()).

import functools
import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, status

from core.groups.naming import group_id_of
from core.groups.store import GroupKey
from core.errors import UnknownTopic
from core.names import TopicName
from core.queues.policy import subscription_type_of
from core.queues.queue import CURSOR_NAME
from core.queues.store import NamespaceStore
from core.system_topics import refuse_change
from gateway.admin import security
from gateway.admin.security import Caller

MAX_PAGE = 10_000


def router(context, authenticate) -> APIRouter:
    api = APIRouter(tags=["resources"])
    core = context.core
    Authenticated = Annotated[Caller, Depends(authenticate)]

    visible_namespace = functools.partial(security.visible_namespace, context.tenancy)

    @api.get("/tenants/{tenant}/namespaces/{namespace}/topics")
    async def list_topics(tenant: str, namespace: str, caller: Authenticated,
                          offset: Annotated[int, Query(ge=0)] = 0,
                          limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100) -> dict[str, Any]:
        await visible_namespace(caller, tenant, namespace)
        names = await core.registry.list_topics(tenant, namespace)
        page = []
        for name in names[offset:offset + limit]:
            info = await core.registry.get_topic(TopicName(tenant, namespace, name))
            page.append({"name": name, "partitions": info.partitions, "created_ms": info.created_ms})
        return {"total": len(names), "offset": offset, "topics": page}

    @api.get("/tenants/{tenant}/namespaces/{namespace}/topics/{topic}")
    async def get_topic(tenant: str, namespace: str, topic: str, caller: Authenticated) -> dict[str, Any]:
        await visible_namespace(caller, tenant, namespace)
        name = TopicName.of(topic, tenant, namespace)
        info = await core.registry.get_topic(name)
        partitions = []
        for index in range(info.partitions):
            partition = await core.partition(name, index)
            partitions.append({"partition": index, "start_offset": partition.log_start_offset,
                               "end_offset": partition.high_watermark, "size_bytes": partition.log.size_bytes})
        return {"name": topic, "topic_id": info.topic_id, "configs": info.configs, "partitions": partitions,
                "subscriptions": await topic_subscriptions(tenant, namespace, topic, partitions)}

    @api.delete("/tenants/{tenant}/namespaces/{namespace}/topics/{topic}", status_code=status.HTTP_204_NO_CONTENT)
    async def delete_topic(tenant: str, namespace: str, topic: str, caller: Authenticated) -> None:
        await visible_namespace(caller, tenant, namespace)
        refuse_change(topic)
        await core.delete_topic(TopicName.of(topic, tenant, namespace))

    @api.get("/tenants/{tenant}/namespaces/{namespace}/subscriptions")
    async def list_subscriptions(tenant: str, namespace: str, caller: Authenticated) -> list[dict[str, Any]]:
        await visible_namespace(caller, tenant, namespace)
        found = []
        # Each topic's first partition is asked for its cursors (the store has no index across topics).
        for topic in await core.registry.list_topics(tenant, namespace):
            try:
                info = await core.registry.get_topic(TopicName(tenant, namespace, topic))
            except UnknownTopic:
                continue   # deleted meanwhile
            if not await core.metadata.children(f"/cursors/{tenant}/{namespace}/{topic}/0") and \
                    not any(c.fetching_now(topic) for c in core.connections.all()):
                continue   # no subscription: its partitions stay closed
            ends = [{"partition": i, "end_offset": (await core.partition(info.name, i)).high_watermark}
                    for i in range(info.partitions)]
            for subscription in await topic_subscriptions(tenant, namespace, topic, ends):
                found.append({"topic": topic, **subscription})
        return found

    @api.get("/tenants/{tenant}/namespaces/{namespace}/queues")
    async def list_queues(tenant: str, namespace: str, caller: Authenticated) -> list[dict[str, Any]]:
        await visible_namespace(caller, tenant, namespace)
        stored = await NamespaceStore(core.metadata, tenant, namespace).load()
        queues = []
        for info in stored.queues:
            partition = await core.partition(TopicName(tenant, namespace, info.topic), 0)
            position = await _cursor_position(core, tenant, namespace, info.topic, 0, CURSOR_NAME)
            live = live_queue(tenant, namespace, info.name)
            parked = live.subscription.parked_groups if live is not None and live.subscription is not None else {}
            queues.append({"name": info.name, "topic": info.topic, "durable": info.durable,
                           "exclusive": info.exclusive, "auto_delete": info.auto_delete,
                           "subscription_type": subscription_type_of(info.name, info.arguments),
                           "messages": max(0, partition.high_watermark - (position or 0)),
                           "consumers": queue_consumers(tenant, namespace, info.name),
                           "parked_groups": [{"group": group.decode("utf-8", "replace"), "offset": offset}
                                             for group, offset in parked.items()]})
        return queues

    @api.post("/tenants/{tenant}/namespaces/{namespace}/queues/{queue}/parked-groups/{group}/release",
              status_code=status.HTTP_204_NO_CONTENT)
    async def release_parked_group(tenant: str, namespace: str, queue: str, group: str, caller: Authenticated) -> None:
        """A key-shared queue's group parked by a poison message goes on with its next message."""
        await visible_namespace(caller, tenant, namespace)
        live = live_queue(tenant, namespace, queue)
        if live is None or live.subscription is None or not live.subscription.release_group(group.encode()):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no parked group {group!r} in queue {queue!r} here")

    @api.get("/tenants/{tenant}/namespaces/{namespace}/exchanges")
    async def list_exchanges(tenant: str, namespace: str, caller: Authenticated) -> list[dict[str, Any]]:
        await visible_namespace(caller, tenant, namespace)
        stored = await NamespaceStore(core.metadata, tenant, namespace).load()
        bindings = [binding.to_doc() for binding in stored.bindings]
        return [{**exchange.to_doc(), "bindings": [b for b in bindings if b.get("source") == exchange.name]}
                for exchange in stored.exchanges]

    @api.get("/overview")
    async def overview(caller: Authenticated) -> dict[str, Any]:
        """Counts, connections per protocol, and per namespace the totals published and dispatched
        since this process started (a rate is the difference of two calls over their interval)."""
        tenants = [t for t in await context.tenancy.tenants() if caller.sees(t)]
        namespaces = sum([len(await context.tenancy.namespaces(t)) for t in tenants])
        connections: dict[str, int] = {}
        for connection in core.connections.all():
            if connection.tenant is None and caller.tenant_scope is None or \
                    connection.tenant is not None and caller.sees(connection.tenant):
                connections[connection.protocol] = connections.get(connection.protocol, 0) + 1
        meters = [{"tenant": m.tenant, "namespace": m.namespace, "published_messages": m.published_messages,
                   "published_bytes": m.published_bytes, "dispatched_bytes": m.dispatched_bytes}
                  for m in core.meters.all() if caller.sees(m.tenant)]
        return {"tenants": len(tenants), "namespaces": namespaces, "connections": connections,
                "meters": sorted(meters, key=lambda m: (m["tenant"], m["namespace"]))}

    @api.get("/connections")
    async def list_connections(caller: Authenticated) -> list[dict[str, Any]]:
        return [c.to_doc() for c in core.connections.all() if c.tenant is None and caller.tenant_scope is None
                or c.tenant is not None and caller.sees(c.tenant)]

    @api.delete("/connections/{connection_id}", status_code=status.HTTP_204_NO_CONTENT)
    async def close_connection(connection_id: int, caller: Authenticated) -> None:
        connection = core.connections.get(connection_id)
        if connection is None or not (caller.tenant_scope is None or connection.tenant == caller.tenant_scope):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no connection {connection_id}")
        core.connections.close(connection_id, f"closed by {caller.user} through the admin API")

    @api.get("/acls")
    async def list_acls(caller: Authenticated) -> list[dict[str, Any]]:
        if context.kafka is None:
            return []
        found = []
        for tenant in await context.tenancy.tenants():
            if caller.sees(tenant):
                found += [{"tenant": tenant, **acl.to_doc()} for acl in await context.kafka.authorizer.acls(tenant)]
        return found

    @api.get("/quotas")
    async def list_quotas(caller: Authenticated) -> list[dict[str, Any]]:
        caller.check_administrator()   # client quotas are not per tenant
        if context.kafka is None:
            return []
        return [{"entity": dict(entry.entity), "values": dict(entry.values)}
                for entry in await context.kafka.quotas.entries()]

    # --- subscriptions --------------------------------------------------------------------------

    async def topic_subscriptions(tenant: str, namespace: str, topic: str,
                                  partitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by_cursor: dict[str, list[dict[str, Any]]] = {}
        for part in partitions:
            index = part["partition"]
            for cursor in await core.metadata.children(f"/cursors/{tenant}/{namespace}/{topic}/{index}"):
                position = await _cursor_position(core, tenant, namespace, topic, index, cursor)
                if position is not None:
                    by_cursor.setdefault(cursor, []).append(
                        {"partition": index, "position": position, "backlog": max(0, part["end_offset"] - position)})
        found, members = [], set()
        for cursor, positions in sorted(by_cursor.items()):
            group_id = group_id_of(cursor)
            if group_id is not None:
                consumers = await group_consumers(tenant, namespace, group_id, topic)
                members.update((c["client_id"], c["address"]) for c in consumers)
                found.append({"kind": "kafka-group", "name": group_id, "partitions": positions,
                              "consumers": consumers})
            elif cursor == CURSOR_NAME:
                queue = await queue_of_topic(tenant, namespace, topic)
                found.append({"kind": "amqp-queue", "name": queue.name if queue else None,
                              "subscription_type": subscription_type_of(queue.name, queue.arguments) if queue else None,
                              "partitions": positions, "consumers": []})
            else:
                found.append({"kind": "cursor", "name": cursor, "partitions": positions, "consumers": []})
        for entry in found:
            if entry["kind"] == "amqp-queue" and entry["name"] is not None:
                entry["consumers"] = queue_consumers(tenant, namespace, entry["name"])
        assigned = [consumer_doc(c, c.fetching_now(topic)) for c in core.connections.all()
                    if (c.tenant or "public", c.namespace or "default") == (tenant, namespace)
                    and c.fetching_now(topic) and (c.client_id, _host(c.address)) not in members]
        if assigned:
            found.append({"kind": "kafka-assign", "name": None, "partitions": [], "consumers": assigned})
        return found

    async def group_consumers(tenant: str, namespace: str, group_id: str, topic: str) -> list[dict[str, Any]]:
        if context.kafka is None:
            return []
        summary = await context.kafka.groups.describe(GroupKey(tenant, namespace, group_id))
        consumers = []
        for member in summary.members:
            host = member.client_host.lstrip("/")   # Kafka shows "/1.2.3.4"
            partitions = sorted({p for c in core.connections.all()
                                 if c.client_id == member.client_id and _host(c.address) == host
                                 for p in c.fetching_now(topic)})
            consumers.append({"member_id": member.member_id, "client_id": member.client_id,
                              "address": host, "partitions": partitions})
        return consumers

    def live_queue(tenant: str, namespace: str, queue_name: str):
        space = context.amqp.queues.loaded(tenant, namespace) if context.amqp is not None else None
        return space.queues.get(queue_name) if space is not None else None

    def queue_consumers(tenant: str, namespace: str, queue_name: str) -> list[dict[str, Any]]:
        queue = live_queue(tenant, namespace, queue_name)
        if queue is None or queue.subscription is None:
            return []
        consumers = []
        for consumer in queue.subscription.consumers:
            client = getattr(consumer, "client", None)
            doc = consumer_doc(client, []) if client is not None else {}
            consumers.append({**doc, "consumer_tag": getattr(consumer, "tag", None)})
        return consumers

    async def queue_of_topic(tenant: str, namespace: str, topic: str):
        stored = await NamespaceStore(core.metadata, tenant, namespace).load()
        return next((info for info in stored.queues if info.topic == topic), None)

    return api


def consumer_doc(client, partitions: list[int]) -> dict[str, Any]:
    return {"connection": client.id, "protocol": client.protocol, "client_id": client.client_id,
            "address": client.address, "user": client.user, "partitions": partitions}


async def _cursor_position(core, tenant: str, namespace: str, topic: str, partition: int, cursor: str) -> int | None:
    node = await core.metadata.get(f"/cursors/{tenant}/{namespace}/{topic}/{partition}/{cursor}")
    return None if node is None else json.loads(node.value)["committed"]


def _host(address: str) -> str:
    return address.rsplit(":", 1)[0].strip("[]")

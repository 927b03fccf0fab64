"""Delayed messages (core/delayed) through the API: what is pending, and cancelling one.

    GET    /tenants/{t}/namespaces/{ns}/delayed                    pending per target, all kinds
    GET    /tenants/{t}/namespaces/{ns}/topics/{topic}/delayed     pending for the topic, per partition
    DELETE /tenants/{t}/namespaces/{ns}/topics/{topic}/delayed/{id}   cancel one held for the topic
    DELETE /tenants/{t}/namespaces/{ns}/delayed/{id}               cancel one, whatever its target

A held message's id is its offset in the namespace's __delayed_messages topic: the messages route
finds it there (e.g. ?key= or ?header=), and a released message carries it as header delayed.id.
Cancelling answers 204 once the cancel is durable, 404 if no message is pending under that id (or
it is not held for that topic).
"""

# No `from __future__ import annotations` here: FastAPI must see the routes' annotations as
# objects (they name dependencies local to router()).

import functools
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, status

from core.delayed.held import Target
from core.delayed.service import partition_of
from core.names import TopicName
from gateway.admin import security
from gateway.admin.security import Caller


def router(context, authenticate) -> APIRouter:
    api = APIRouter(tags=["delayed"])
    Authenticated = Annotated[Caller, Depends(authenticate)]
    core = context.core
    visible_namespace = functools.partial(security.visible_namespace, context.tenancy)
    MessageId = Annotated[int, Path(ge=0)]

    @api.get("/tenants/{tenant}/namespaces/{namespace}/delayed")
    async def pending(tenant: str, namespace: str, caller: Authenticated) -> dict[str, Any]:
        await visible_namespace(caller, tenant, namespace)
        counts = await core.delayed.pending(tenant, namespace)
        return {"pending": sum(counts.values()), "targets": counts}

    @api.get("/tenants/{tenant}/namespaces/{namespace}/topics/{topic}/delayed")
    async def topic_pending(tenant: str, namespace: str, topic: str, caller: Authenticated) -> dict[str, Any]:
        await visible_namespace(caller, tenant, namespace)
        await core.registry.get_topic(TopicName.of(topic, tenant, namespace))     # 404 if there is none
        by_partition: dict[int, int] = {}
        for target, count in (await core.delayed.pending(tenant, namespace)).items():
            index = partition_of(Target.decode(target.encode("utf-8", "surrogateescape")), topic)
            if index is not None:
                by_partition[index] = by_partition.get(index, 0) + count
        return {"topic": topic, "pending": sum(by_partition.values()),
                "partitions": [{"partition": index, "pending": count} for index, count in sorted(by_partition.items())]}

    @api.delete("/tenants/{tenant}/namespaces/{namespace}/topics/{topic}/delayed/{message_id}",
                status_code=status.HTTP_204_NO_CONTENT)
    async def cancel_for_topic(tenant: str, namespace: str, topic: str, message_id: MessageId,
                               caller: Authenticated) -> None:
        await visible_namespace(caller, tenant, namespace)
        if not await core.delayed.cancel(tenant, namespace, message_id, topic=topic):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no message of {topic} is pending with id {message_id}")

    @api.delete("/tenants/{tenant}/namespaces/{namespace}/delayed/{message_id}",
                status_code=status.HTTP_204_NO_CONTENT)
    async def cancel(tenant: str, namespace: str, message_id: MessageId, caller: Authenticated) -> None:
        await visible_namespace(caller, tenant, namespace)
        if not await core.delayed.cancel(tenant, namespace, message_id):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no message is pending with id {message_id}")

    return api

"""The broker cluster through the API (administrators only): its brokers, and moving a partition.

    GET /cluster                                                      brokers, leader, moves in progress
    PUT /tenants/{t}/namespaces/{ns}/topics/{topic}/partitions/{p}/owner   {"broker": id}: move it there

A move places the partition's bundle on the broker (core/cluster/placements.py), as Kafka's
AlterPartitionReassignments does: 202 with the bundle, whose other partitions move too; the move is
listed under "moves" until that broker holds the bundle. A broker that is not alive, or cannot own
partitions, is 400; so is any move in one process (no cluster: it serves every partition itself).
"""

# No `from __future__ import annotations` here: FastAPI must see the routes' annotations as
# objects (they name dependencies local to router()).

import functools
from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, status
from pydantic import BaseModel

from core.cluster.bundles import partition_bundle
from core.names import TopicName
from gateway.admin import security
from gateway.admin.security import Caller


class OwnerBody(BaseModel):
    broker: int


def router(context, authenticate) -> APIRouter:
    api = APIRouter(tags=["cluster"])
    Authenticated = Annotated[Caller, Depends(authenticate)]
    core = context.core
    visible_namespace = functools.partial(security.visible_namespace, context.tenancy)

    @api.get("/cluster")
    async def cluster(caller: Authenticated) -> dict[str, Any]:
        caller.check_administrator()
        members = core.cluster
        if members is None:
            return {"leader": None, "brokers": [], "moves": []}
        moves = await members.moves()
        owned = Counter(members.assignment.values())
        return {
            "leader": members.leader_id,
            "brokers": [{"id": b.id, "kafka": f"{b.kafka_host}:{b.kafka_port}", "amqp": b.amqp,
                         "rack": b.rack, "role": b.role, "bundles": owned.get(b.id, 0)}
                        for b in members.brokers()],
            "moves": [{"bundle": bundle.path, "to": placement.broker, "from": placement.source, "holder": holder}
                      for bundle, (placement, holder) in sorted(moves.items())],
        }

    @api.put("/tenants/{tenant}/namespaces/{namespace}/topics/{topic}/partitions/{partition}/owner",
             status_code=status.HTTP_202_ACCEPTED)
    async def move(tenant: str, namespace: str, topic: str, partition: Annotated[int, Path(ge=0)],
                   body: OwnerBody, caller: Authenticated) -> dict[str, Any]:
        caller.check_administrator()
        await visible_namespace(caller, tenant, namespace)
        info = await core.registry.get_topic(TopicName.of(topic, tenant, namespace))   # 404 if there is none
        if partition >= info.partitions:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"{topic} has no partition {partition}")
        bundle = partition_bundle(tenant, namespace, topic, partition)
        members = core.cluster
        live = [] if members is None else members.serving_ids()
        if members is None or body.broker not in live:
            raise HTTPException(status.HTTP_400_BAD_REQUEST,
                                f"broker {body.broker} is not a live broker that can own partitions")
        await members.place({bundle: body.broker})
        return {"bundle": bundle.path, "broker": body.broker}

    return api

"""The broker cluster through the API (administrators only): its brokers, moving a partition, and a
namespace's bundles.

    GET /cluster                                                      brokers, leader, moves in progress
    PUT /tenants/{t}/namespaces/{ns}/topics/{topic}/partitions/{p}/owner   {"broker": id}: move it there
    GET /tenants/{t}/namespaces/{ns}/bundles                          its hash ranges and their brokers
    PUT /tenants/{t}/namespaces/{ns}/bundles/{lower}_{upper}/split    {"at": hash} (optional): split it

A move places the partition's bundle on the broker (core/cluster/placements.py), as Kafka's
AlterPartitionReassignments does: 202 with the bundle, whose other partitions move too; the move is
listed under "moves" until that broker holds the bundle. A broker that is not alive, or cannot own
partitions, is 400; so is any move in one process (no cluster: it serves every partition itself).

A split, as Pulsar's `namespaces split-bundle`, is asked of the bundle's owner (core/cluster/splits.py):
202 with the bundle; the halves are listed once it is done. A bundle that is not one of the
namespace's now is 404; a hash outside it, or a split in one process, is 400.
"""

# No `from __future__ import annotations` here: FastAPI must see the routes' annotations as
# objects (they name dependencies local to router()).

import functools
from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, status
from pydantic import BaseModel

from core.cluster.bundles import Bundle, partition_bundle
from core.cluster.splits import request_split
from core.names import TopicName
from gateway.admin import security
from gateway.admin.security import Caller


class OwnerBody(BaseModel):
    broker: int


class SplitBody(BaseModel):
    at: int | None = None       # the hash the upper half starts at; by default where the traffic divides


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

    @api.get("/tenants/{tenant}/namespaces/{namespace}/bundles")
    async def bundles(tenant: str, namespace: str, caller: Authenticated) -> dict[str, Any]:
        caller.check_administrator()
        await visible_namespace(caller, tenant, namespace)
        members = core.cluster
        if members is None:
            return {"bundles": []}
        owners = members.assignment
        return {"bundles": [{"bundle": bundle.path, "lower": f"0x{bundle.lower:08x}", "upper": f"0x{bundle.upper:08x}",
                             "broker": owners.get(bundle)} for bundle in members.layouts.bundles(tenant, namespace)]}

    @api.put("/tenants/{tenant}/namespaces/{namespace}/bundles/{hashes}/split", status_code=status.HTTP_202_ACCEPTED)
    async def split(tenant: str, namespace: str, hashes: str, caller: Authenticated,
                    body: SplitBody | None = None) -> dict[str, Any]:
        caller.check_administrator()
        await visible_namespace(caller, tenant, namespace)
        members = core.cluster
        if members is None:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, "one process has no bundles to split")
        try:
            bundle = Bundle.parse(f"{tenant}/{namespace}/{hashes}")
        except ValueError:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no bundle {hashes}") from None
        if bundle not in members.layouts.bundles(tenant, namespace):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"{bundle} is not a bundle of {tenant}/{namespace} now")
        at = None if body is None else body.at
        try:
            await request_split(core.metadata, bundle, at)
        except ValueError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
        return {"bundle": bundle.path, "at": at}

    return api

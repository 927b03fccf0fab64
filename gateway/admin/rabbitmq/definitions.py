"""Definitions export and import (RabbitMQ's /api/definitions), so that a RabbitMQ setup can be moved
onto the gateway and back: vhosts, users, permissions, exchanges, queues and bindings.

What does not carry over is named in the import's answer instead of failing the whole file:
users given only a password_hash (only SCRAM keys are kept; give them a "password"), policies,
parameters and topic permissions (the gateway has namespace policies instead, docs/OPERATIONS.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import HTTPException

from core.errors import CoreError
from gateway.admin.rabbitmq import changes, queries, shapes
from gateway.admin.rabbitmq.changes import bad_request
from gateway.admin.rabbitmq.queries import RabbitState
from gateway.admin.rabbitmq.vhosts import visible_vhosts

log = logging.getLogger("gateway.admin")

_PREDECLARED = ("", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match")
_UNSUPPORTED = ("policies", "parameters", "topic_permissions", "operator_policies")


def _queue_entry(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {key: doc[key] for key in ("name", "vhost", "durable", "auto_delete", "arguments")}


def _exchange_entry(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {key: doc[key] for key in ("name", "vhost", "type", "durable", "auto_delete", "internal", "arguments")}


def _binding_entry(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {key: doc[key] for key in ("source", "vhost", "destination", "destination_type", "routing_key",
                                      "arguments")}


async def export(state: RabbitState, caller, vhost: str | None = None) -> dict[str, Any]:
    """Everything the caller sees; with `vhost`, that vhost's objects only and no "vhost" keys."""
    durable_queues = [q for q in await queries.queues_of(state, caller, vhost) if q["durable"] and not q["exclusive"]]
    exchanges = [e for e in await queries.exchanges(state, caller, vhost)
                 if e["durable"] and e["name"] not in _PREDECLARED]
    queue_names = {(q["vhost"], q["name"]) for q in durable_queues}
    exchange_names = {(e["vhost"], e["name"]) for e in exchanges}
    bindings = [b for b in await queries.bindings(state, caller, vhost) if b["source"]
                and (b["vhost"], b["destination"]) in (queue_names if b["destination_type"] == "queue"
                                                       else exchange_names | {(b["vhost"], n) for n in _PREDECLARED})]
    doc: dict[str, Any] = {"rabbit_version": shapes.MANAGEMENT_VERSION, "rabbitmq_version": shapes.MANAGEMENT_VERSION,
                           "product_name": shapes.PRODUCT_NAME, "product_version": queries.product_version()}
    if vhost is None:
        doc["users"] = await queries.users(state, caller)
        doc["vhosts"] = [{"name": name}
                         for name, _, _ in await visible_vhosts(state.tenancy, caller)]
        doc["permissions"] = [{k: p[k] for k in ("user", "vhost", "configure", "write", "read")}
                              for p in await queries.permissions(state, caller)]
        doc["topic_permissions"] = []
        doc["global_parameters"] = []
    doc["parameters"] = []
    doc["policies"] = []
    strip = (lambda entry: {k: v for k, v in entry.items() if k != "vhost"}) if vhost is not None else (lambda e: e)
    doc["queues"] = [strip(_queue_entry(q)) for q in durable_queues]
    doc["exchanges"] = [strip(_exchange_entry(e)) for e in exchanges]
    doc["bindings"] = [strip(_binding_entry(b)) for b in bindings]
    return doc


def _entries(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    entries = doc.get(key) or []
    if not isinstance(entries, list) or any(not isinstance(e, Mapping) for e in entries):
        raise bad_request(f"{key} must be a list of objects")
    return entries


async def import_(state: RabbitState, caller, doc: Any, vhost: str | None = None) -> list[dict[str, str]]:
    """Create what the definitions name (what exists stays, as RabbitMQ's import leaves it); returns
    what was skipped, each with the reason."""
    if not isinstance(doc, Mapping):
        raise bad_request("definitions are a JSON object")
    skipped: list[dict[str, str]] = []

    async def attempt(kind: str, name: str, change) -> None:
        try:
            await change
        except (HTTPException, CoreError) as exc:
            reason = exc.detail if isinstance(exc, HTTPException) else str(exc)
            skipped.append({"kind": kind, "name": name, "reason": str(reason)})

    def where(entry: Mapping[str, Any]) -> str:
        return vhost if vhost is not None else str(entry.get("vhost", "/"))

    if vhost is None:
        for entry in _entries(doc, "vhosts"):
            await attempt("vhost", str(entry.get("name")), changes.put_vhost(state, caller, str(entry.get("name"))))
        for entry in _entries(doc, "users"):
            name = str(entry.get("name"))
            body = {"tags": entry.get("tags", "")}
            if "password" in entry:
                body["password"] = entry["password"]
            elif await state.context.users.get(name) is None:
                skipped.append({"kind": "user", "name": name,
                                "reason": "only a password_hash: the gateway keeps SCRAM keys, give a password"})
                continue
            await attempt("user", name, changes.put_user(state, caller, name, body))
        for entry in _entries(doc, "permissions"):
            await attempt("permission", f"{entry.get('user')}@{entry.get('vhost')}",
                          changes.put_permission(state, caller, str(entry.get("vhost")), str(entry.get("user")), entry))
    for entry in _entries(doc, "exchanges"):
        if entry.get("name") in _PREDECLARED:
            continue
        await attempt("exchange", str(entry.get("name")),
                      changes.put_exchange(state, caller, where(entry), str(entry.get("name")), entry))
    for entry in _entries(doc, "queues"):
        await attempt("queue", str(entry.get("name")),
                      changes.put_queue(state, caller, where(entry), str(entry.get("name")), entry))
    for entry in _entries(doc, "bindings"):
        kind = "q" if entry.get("destination_type", "queue") == "queue" else "e"
        await attempt("binding", f"{entry.get('source')}->{entry.get('destination')}",
                      changes.add_binding(state, caller, where(entry), str(entry.get("source")), kind,
                                          str(entry.get("destination")), entry))
    for key in _UNSUPPORTED:
        for entry in _entries(doc, key):
            skipped.append({"kind": key, "name": str(entry.get("name", "")),
                            "reason": "not supported: use namespace policies (docs/OPERATIONS.md)"})
    if skipped:
        log.warning("definitions import skipped %d item(s): %s", len(skipped), skipped)
    return skipped

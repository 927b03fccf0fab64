"""Namespace policies: limits and defaults an operator sets on one tenant/namespace.

Stored at /policies/<tenant>/<namespace> as the JSON of the fields that are set; an absent field
means "no limit" (or the broker's default). Names follow Pulsar's namespace policies where one
exists, in the gateway's units (milliseconds, bytes, per second).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from core.errors import InvalidConfig
from storage.api import MetadataStore, NoNode

BACKLOG_ACTIONS = ("refuse_producers", "drop_oldest")   # Pulsar's producer_exception, consumer_backlog_eviction
_MAX_MS = 100 * 365 * 86_400_000    # a century: larger is surely a mistake


@dataclass(frozen=True, slots=True)
class NamespacePolicies:
    retention_ms: int | None = None          # records older than this go (topics without their own retention.ms)
    retention_bytes: int | None = None       # per partition (topics without their own retention.bytes)
    message_ttl_ms: int | None = None        # AMQP queues of the namespace: x-message-ttl when not declared
    backlog_quota_bytes: int | None = None   # per subscription: bytes not yet consumed
    backlog_quota_action: str = "refuse_producers"
    default_partitions: int | None = None    # of topics created without a partition count
    max_topics: int | None = None
    max_connections: int | None = None
    publish_rate_messages: int | None = None  # per second, Kafka and AMQP producers together
    dispatch_rate_bytes: int | None = None   # per second, Kafka fetches and AMQP deliveries together
    trace: bool = False                      # message trace (core/trace.py)

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "trace":
                if not isinstance(value, bool):
                    raise InvalidConfig(f"trace must be true or false, got {value!r}")
                continue
            if field.name == "backlog_quota_action":
                if value not in BACKLOG_ACTIONS:
                    raise InvalidConfig(f"backlog_quota_action must be one of {', '.join(BACKLOG_ACTIONS)}, "
                                        f"got {value!r}")
                continue
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidConfig(f"{field.name} must be an integer, got {value!r}")
            lowest = 1 if field.name in ("default_partitions",) else 0
            highest = _MAX_MS if field.name.endswith("_ms") else (1 << 62)
            if field.name == "default_partitions":
                highest = 10_000
            if not lowest <= value <= highest:
                raise InvalidConfig(f"{field.name} must be in {lowest}..{highest}, got {value}")

    @classmethod
    def from_doc(cls, doc: dict) -> "NamespacePolicies":
        if not isinstance(doc, dict):
            raise InvalidConfig("policies must be a JSON object")
        known = {field.name for field in fields(cls)}
        unknown = set(doc) - known
        if unknown:
            raise InvalidConfig(f"unknown polic{'ies' if len(unknown) > 1 else 'y'}: {', '.join(sorted(unknown))}; "
                                f"known: {', '.join(sorted(known))}")
        return cls(**doc)

    def to_doc(self) -> dict:
        return {name: value for name, value in asdict(self).items() if value is not None and value is not False}


class PolicyStore:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    async def get(self, tenant: str, namespace: str) -> NamespacePolicies:
        node = await self._metadata.get(_path(tenant, namespace))
        return NamespacePolicies() if node is None else NamespacePolicies.from_doc(json.loads(node.value))

    async def put(self, tenant: str, namespace: str, policies: NamespacePolicies) -> None:
        await self._metadata.put(_path(tenant, namespace), json.dumps(policies.to_doc()).encode())

    async def delete(self, tenant: str, namespace: str) -> None:
        try:
            await self._metadata.delete(_path(tenant, namespace))
        except NoNode:
            pass


def _path(tenant: str, namespace: str) -> str:
    return f"/policies/{tenant}/{namespace}"

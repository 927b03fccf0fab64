"""Client quotas: byte-rate limits per user and client id, and the throttle time that enforces them.

Quotas live at /quotas/<entity key> in the metadata store, one node per entity:

    {"entity": {"user": name | null, "client-id": name | null}, "values": {"producer_byte_rate": 1048576.0}}

An entity names a user, a client id, or both; a null name is that type's default. As in Kafka
(ClientQuotaManager), the quota that applies to a connection is the first one set among, in order:
user+client-id, user+default client-id, user, default user+client-id, default user+default
client-id, default user, client-id, default client-id. Usage is metered per applying entity
(clients sharing a user-level quota share its budget) over a sliding window of one-second samples,
and a request that takes the rate over the quota earns the client a throttle time:
(rate - quota) / quota x window, bounded by the window, as Kafka computes it.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.clock import Clock
from core.errors import InvalidArgument
from storage.api import MetadataStore, NoNode

USER, CLIENT_ID = "user", "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE = "producer_byte_rate", "consumer_byte_rate"
ENFORCED_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)
SAMPLES = 11                # Kafka's quota.window.num
SAMPLE_MS = 1000            # Kafka's quota.window.size.seconds
_ROOT = "/quotas"
_DEFAULT = object()         # marks "the default name" while resolving

# A quota entity: entity type -> name, None being the type's default.
Entity = Mapping[str, str | None]


@dataclass(frozen=True, slots=True)
class QuotaEntry:
    entity: dict[str, str | None]
    values: dict[str, float]


def entity_key(entity: Entity) -> str:
    """A stable node name for an entity (names may hold any character)."""
    parts = []
    for entity_type in ENTITY_TYPES:
        if entity_type in entity:
            name = entity[entity_type]
            parts.append(f"{entity_type}={'~' if name is None else urllib.parse.quote(name, safe='')}")
    return ",".join(parts)


def check_entity(entity: Entity) -> None:
    if not entity or any(entity_type not in ENTITY_TYPES for entity_type in entity):
        unknown = sorted(set(entity) - set(ENTITY_TYPES))
        raise InvalidArgument(f"Unhandled client quota entity type: {unknown[0]}" if unknown
                              else "Invalid empty client quota entity")


def check_value(key: str, value: float) -> None:
    if key not in ENFORCED_KEYS:
        raise InvalidArgument(f"Invalid configuration key {key}" if key not in _KAFKA_KEYS
                              else f"Quota key {key} is not supported by this broker")
    if not value > 0:
        raise InvalidArgument(f"Quota {key} must be a positive number, got {value}")


# Kafka's other quota keys: recognised, but not enforced here, so refused rather than ignored.
_KAFKA_KEYS = frozenset({*ENFORCED_KEYS, "request_percentage", "controller_mutation_rate", "connection_creation_rate"})


class ClientQuotas:
    """The stored quotas (cached; one process owns them) and the usage meters. Event loop only."""

    def __init__(self, metadata: MetadataStore, clock: Clock) -> None:
        self._metadata = metadata
        self._clock = clock
        self._entries: dict[str, QuotaEntry] | None = None
        self._meters: dict[tuple[str, str], _RateMeter] = {}

    @property
    def active(self) -> bool:
        """Whether any quota may apply (until first loaded: maybe)."""
        return self._entries is None or bool(self._entries)

    async def entries(self) -> list[QuotaEntry]:
        return list((await self._load()).values())

    async def alter(self, entity: Entity, changes: Mapping[str, float | None]) -> None:
        """Set (a value) or remove (None) quota keys of one entity; validated before anything is stored."""
        check_entity(entity)
        for key, value in changes.items():
            if value is not None:
                check_value(key, value)
        entries = await self._load()
        key = entity_key(entity)
        values = dict(entries[key].values) if key in entries else {}
        for name, value in changes.items():
            if value is None:
                values.pop(name, None)
            else:
                values[name] = float(value)
        path = f"{_ROOT}/{key}"
        if values:
            entry = QuotaEntry(dict(entity), values)
            await self._metadata.put(path, json.dumps({"entity": entry.entity, "values": values}).encode())
            entries[key] = entry
        elif key in entries:
            try:
                await self._metadata.delete(path)
            except NoNode:
                pass
            del entries[key]
        self._meters.clear()   # which entity applies may have changed

    async def throttle_ms(self, quota_key: str, user: str, client_id: str, size: int) -> int:
        """Count `size` bytes of use; how long the client must now wait (0 when within its quota)."""
        entries = await self._load()
        if not entries:
            return 0
        applying = _applying(entries, quota_key, user, client_id)
        if applying is None:
            return 0
        key, quota = applying
        meter = self._meters.get((quota_key, key))
        if meter is None:
            meter = self._meters[(quota_key, key)] = _RateMeter()
        now = self._clock.now_ms()
        meter.record(now, size)
        rate, window_ms = meter.rate(now)
        if rate <= quota:
            return 0
        return int(min((rate - quota) / quota * window_ms, SAMPLES * SAMPLE_MS))

    async def _load(self) -> dict[str, QuotaEntry]:
        if self._entries is None:
            entries = {}
            for key in await self._metadata.children(_ROOT):
                node = await self._metadata.get(f"{_ROOT}/{key}")
                if node is not None:
                    doc = json.loads(node.value)
                    entries[key] = QuotaEntry(doc["entity"], doc["values"])
            self._entries = entries
        return self._entries


def _applying(entries: Mapping[str, QuotaEntry], quota_key: str, user: str,
              client_id: str) -> tuple[str, float] | None:
    for entity in _precedence(user, client_id):
        entry = entries.get(entity_key(entity))
        if entry is not None and quota_key in entry.values:
            return entity_key(_named(entity, user, client_id)), entry.values[quota_key]
    return None


def _precedence(user: str, client_id: str) -> Iterable[dict[str, str | None]]:
    yield {USER: user, CLIENT_ID: client_id}
    yield {USER: user, CLIENT_ID: None}
    yield {USER: user}
    yield {USER: None, CLIENT_ID: client_id}
    yield {USER: None, CLIENT_ID: None}
    yield {USER: None}
    yield {CLIENT_ID: client_id}
    yield {CLIENT_ID: None}


def _named(entity: Mapping[str, str | None], user: str, client_id: str) -> dict[str, str | None]:
    """The metered entity: a default quota applies to each user / client id separately, as in Kafka."""
    return {entity_type: (user if entity_type == USER else client_id) for entity_type in entity}


class _RateMeter:
    """Bytes per second over the last SAMPLES one-second samples (the current one included)."""

    __slots__ = ("_samples",)

    def __init__(self) -> None:
        self._samples: list[list[int]] = []   # [start ms, bytes], oldest first

    def record(self, now_ms: int, size: int) -> None:
        start = now_ms - now_ms % SAMPLE_MS
        samples = self._samples
        if samples and samples[-1][0] == start:
            samples[-1][1] += size
        else:
            samples.append([start, size])
        while samples and samples[0][0] <= now_ms - SAMPLES * SAMPLE_MS:
            samples.pop(0)

    def rate(self, now_ms: int) -> tuple[float, int]:
        """(bytes per second, the window in ms): the window spans the kept samples up to now, and
        at least SAMPLES - 1 whole samples, so one burst right after an idle spell is not overrated."""
        total = sum(size for _, size in self._samples)
        elapsed = now_ms - self._samples[0][0] if self._samples else 0
        window_ms = max(elapsed, (SAMPLES - 1) * SAMPLE_MS)
        return total * 1000 / window_ms, window_ms

"""The registry of tenants, namespaces and topics, kept in the metadata store.

    /tenants/<tenant>                         {"created_ms": int}
    /namespaces/<tenant>/<namespace>          {"created_ms": int}
    /topics/<tenant>/<namespace>/<topic>      {"topic_id": hex, "partitions": int,
                                               "configs": {kafka config name: value}, "created_ms": int}

A topic is a metadata row until it is used: descriptions are loaded on demand and cached in a
bounded LRU, so a million topics cost rows on disk, not memory.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from core.clock import Clock
from core.errors import InvalidPartitions, PolicyViolation, TopicExists, UnknownTenant, UnknownTopic
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, TopicName, check_name
from core.policies import PolicyStore
from core.topic_config import EffectiveConfig, validate
from storage.api import BadVersion, MetadataStore, NodeExists, NoNode

MAX_PARTITIONS = 10_000
_CACHE_TOPICS = 10_000


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: TopicName
    topic_id: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    created_ms: int = 0

    @property
    def effective(self) -> EffectiveConfig:
        return EffectiveConfig.of(self.configs)

    def to_json(self) -> bytes:
        return json.dumps({"topic_id": self.topic_id, "partitions": self.partitions, "configs": self.configs,
                           "created_ms": self.created_ms}, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, name: TopicName, raw: bytes) -> "TopicInfo":
        doc = json.loads(raw)
        return cls(name, doc["topic_id"], doc["partitions"], doc["configs"], doc["created_ms"])


class Registry:
    """Owned by the event loop; every mutation goes to the metadata store before the cache."""

    def __init__(self, metadata: MetadataStore, clock: Clock) -> None:
        self._metadata = metadata
        self._clock = clock
        self._cache: OrderedDict[TopicName, TopicInfo] = OrderedDict()

    async def start(self) -> None:
        await self.ensure_namespace(DEFAULT_TENANT, DEFAULT_NAMESPACE)

    # --- tenants and namespaces ---------------------------------------------------------------

    async def ensure_namespace(self, tenant: str, namespace: str) -> None:
        check_name("tenant", tenant)
        check_name("namespace", namespace)
        stamp = json.dumps({"created_ms": self._clock.now_ms()}).encode()
        for path in (f"/tenants/{tenant}", f"/namespaces/{tenant}/{namespace}"):
            try:
                await self._metadata.create(path, stamp)
            except NodeExists:
                pass

    async def tenants(self) -> list[str]:
        return await self._metadata.children("/tenants")

    async def namespaces(self, tenant: str) -> list[str]:
        return await self._metadata.children(f"/namespaces/{tenant}")

    # --- topics -------------------------------------------------------------------------------

    async def create_topic(self, name: TopicName, partitions: int, configs: dict[str, str] | None = None,
                           *, validate_only: bool = False) -> TopicInfo:
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitions(f"partition count must be 1..{MAX_PARTITIONS}, got {partitions}")
        explicit = validate(configs or {})
        if await self._metadata.get(f"/namespaces/{name.tenant}/{name.namespace}") is None:
            raise UnknownTenant(f"namespace {name.tenant}/{name.namespace} does not exist")
        max_topics = (await PolicyStore(self._metadata).get(name.tenant, name.namespace)).max_topics
        if max_topics is not None and len(await self.list_topics(name.tenant, name.namespace)) >= max_topics:
            raise PolicyViolation(f"namespace {name.tenant}/{name.namespace} holds its maximum of {max_topics} topics")
        info = TopicInfo(name, uuid.uuid4().hex, partitions, explicit, self._clock.now_ms())
        if validate_only:
            if await self._metadata.get(self._path(name)) is not None:
                raise TopicExists(f"topic {name} already exists")
            return info
        try:
            await self._metadata.create(self._path(name), info.to_json())
        except NodeExists:
            raise TopicExists(f"topic {name} already exists") from None
        self._remember(info)
        return info

    async def get_topic(self, name: TopicName) -> TopicInfo:
        info = self._cache.get(name)
        if info is not None:
            self._cache.move_to_end(name)
            return info
        node = await self._metadata.get(self._path(name))
        if node is None:
            raise UnknownTopic(f"topic {name} does not exist")
        info = TopicInfo.from_json(name, node.value)
        self._remember(info)
        return info

    async def list_topics(self, tenant: str, namespace: str) -> list[str]:
        return await self._metadata.children(f"/topics/{tenant}/{namespace}")

    async def delete_topic(self, name: TopicName) -> TopicInfo:
        info = await self.get_topic(name)
        self._cache.pop(name, None)
        try:
            await self._metadata.delete(self._path(name))
        except NoNode:
            raise UnknownTopic(f"topic {name} does not exist") from None
        return info

    async def alter_configs(self, name: TopicName, changes: dict[str, str | None], *, replace_all: bool = False,
                            validate_only: bool = False) -> TopicInfo:
        """Set (value) or reset (None) settings; with replace_all, unnamed settings are reset too."""
        return await self._update(name, lambda info: replace(
            info, configs=_merge({} if replace_all else info.configs, changes)), validate_only)

    async def add_partitions(self, name: TopicName, total: int, *, validate_only: bool = False) -> TopicInfo:
        def grow(info: TopicInfo) -> TopicInfo:
            if total <= info.partitions:
                raise InvalidPartitions(f"topic {name} has {info.partitions} partitions; cannot go to {total}")
            if total > MAX_PARTITIONS:
                raise InvalidPartitions(f"at most {MAX_PARTITIONS} partitions")
            return replace(info, partitions=total)
        return await self._update(name, grow, validate_only)

    async def _update(self, name: TopicName, change, validate_only: bool) -> TopicInfo:
        for _ in range(10):
            node = await self._metadata.get(self._path(name))
            if node is None:
                raise UnknownTopic(f"topic {name} does not exist")
            updated = change(TopicInfo.from_json(name, node.value))
            if validate_only:
                return updated
            try:
                await self._metadata.put(self._path(name), updated.to_json(), node.version)
            except BadVersion:
                continue
            self._remember(updated)
            return updated
        raise BadVersion(f"topic {name} keeps changing")

    def cached(self, name: TopicName) -> TopicInfo | None:
        """The topic's description if it is cached (no metadata read)."""
        return self._cache.get(name)

    def _remember(self, info: TopicInfo) -> None:
        self._cache[info.name] = info
        self._cache.move_to_end(info.name)
        if len(self._cache) > _CACHE_TOPICS:
            self._cache.popitem(last=False)

    @staticmethod
    def _path(name: TopicName) -> str:
        return f"/topics/{name.tenant}/{name.namespace}/{name.topic}"


def _merge(base: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    merged = dict(base)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
    merged.update(validate(changes))
    return merged

"""Broker-level defaults of topic configs, changeable at run time (Kafka's dynamic broker configs).

Kafka keeps them at two levels: one broker's own and the cluster-wide default; a topic config not
set on the topic takes the broker's value, else the cluster's, else Kafka's default. Both levels
use the broker-level names (log.retention.ms for retention.ms, ...; core/topic_config.py's
synonyms) and are persisted, each as one node:

    /broker-configs/<broker id>   and   /broker-configs/default     {name: value, ...}

Owned by the event loop; `replace` is durable when it returns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from core.errors import InvalidConfig
from core.topic_config import TOPIC_CONFIGS
from storage.api import MetadataStore, NoNode

CLUSTER_DEFAULT = ""     # the scope name Kafka uses for the cluster-wide default
_ROOT = "/broker-configs"

# Broker-level name -> the topic config it is the default of; only those a topic may set.
DYNAMIC: Mapping[str, str] = {key.broker_synonym: key.name for key in TOPIC_CONFIGS.values() if not key.read_only}


def validate(configs: Mapping[str, str]) -> None:
    for name, value in configs.items():
        topic_name = DYNAMIC.get(name)
        if topic_name is None:
            raise InvalidConfig(f"{name} is not a dynamic broker config")
        try:
            TOPIC_CONFIGS[topic_name].parse(value)
        except InvalidConfig as exc:
            raise InvalidConfig(f"{name}: {exc}") from None


class BrokerConfigs:
    def __init__(self, metadata: MetadataStore, broker_id: str = "0") -> None:
        self.broker_id = broker_id
        self._metadata = metadata
        self._scopes: dict[str, dict[str, str]] = {}

    @staticmethod
    def _path(scope: str) -> str:
        return f"{_ROOT}/{scope or 'default'}"

    async def load(self) -> None:
        for scope in (self.broker_id, CLUSTER_DEFAULT):
            node = await self._metadata.get(self._path(scope))
            self._scopes[scope] = json.loads(node.value) if node is not None else {}

    def get(self, scope: str) -> dict[str, str]:
        """The configs set at `scope` (a broker id, or CLUSTER_DEFAULT)."""
        return dict(self._scopes.get(scope, {}))

    async def replace(self, scope: str, configs: Mapping[str, str]) -> None:
        """Set exactly `configs` at `scope` (this broker's id or CLUSTER_DEFAULT)."""
        if scope not in (self.broker_id, CLUSTER_DEFAULT):
            raise InvalidConfig(f"no broker {scope!r} here")
        validate(configs)
        if configs:
            await self._metadata.put(self._path(scope), json.dumps(dict(sorted(configs.items()))).encode())
        else:
            try:
                await self._metadata.delete(self._path(scope))
            except NoNode:
                pass
        self._scopes[scope] = dict(configs)

    def topic_defaults(self) -> dict[str, str]:
        """Topic config name -> the value a topic without its own takes from this broker."""
        merged = {**self._scopes.get(CLUSTER_DEFAULT, {}), **self._scopes.get(self.broker_id, {})}
        return {DYNAMIC[name]: value for name, value in merged.items()}

"""What every Kafka connection shares: the core, this broker's identity and settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT
from core.service import Core
from protocols.kafka.codec.frames import RequestHeader
from protocols.kafka.machine.connection import Limits


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    host: str
    port: int
    node_id: int = 0
    cluster_id: str = "gateway-cluster"
    rack: str | None = None
    auto_create_topics: bool = True     # Kafka's auto.create.topics.enable
    default_partitions: int = 1         # Kafka's num.partitions
    limits: Limits = field(default_factory=Limits)


class KafkaBroker:
    def __init__(self, core: Core, settings: KafkaSettings, api_versions: list[dict[str, int]]) -> None:
        self.core = core
        self.settings = settings
        self.api_versions = api_versions   # what ApiVersions answers: derived from the handler registry


@dataclass(slots=True)
class RequestContext:
    """One request as a handler sees it."""

    broker: KafkaBroker
    header: RequestHeader
    tenant: str = DEFAULT_TENANT
    namespace: str = DEFAULT_NAMESPACE

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def core(self) -> Core:
        return self.broker.core

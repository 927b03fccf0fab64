"""A broker as the others see it: what its registration node holds."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

SERVING = "serving"        # owns bundles: writes and serves their partitions, groups, queues
READ_ONLY = "read-only"    # owns nothing: serves Fetch from the shared storage (core/replicas.py)
ROLES = (SERVING, READ_ONLY)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    id: int
    kafka_host: str
    kafka_port: int
    amqp: str                 # "host:port"
    rack: str | None = None
    role: str = SERVING
    instance: str = ""        # unique per process and session: tells its nodes from older ones
    peer: str = ""            # "host:port" of its links with the other brokers (core/cluster/peers.py)
    kafka_tls_port: int | None = None   # its Kafka TLS listener's port; None: it has none
    pulsar: str = ""          # "host:port" of its Pulsar listener ("": none)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "BrokerInfo":
        doc = json.loads(raw)
        known = {field.name for field in fields(cls)}
        return cls(**{key: value for key, value in doc.items() if key in known})   # a newer broker's extras ignored

    def describe(self) -> str:
        return f"broker {self.id} (kafka {self.kafka_host}:{self.kafka_port}, amqp {self.amqp})"

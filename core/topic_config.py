"""Per-topic configuration, under Kafka's own config names and defaults.

Every topic keeps only the values set on it explicitly; everything else falls back to the broker
default, as in Kafka. `TOPIC_CONFIGS` is the table of what is known, with the broker-level synonym
of each key (what DescribeConfigs reports as the source of a default).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from core.errors import InvalidConfig


def _long(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise InvalidConfig(f"{raw!r} is not an integer") from None
        if value < minimum:
            raise InvalidConfig(f"{value} is below the minimum {minimum}")
        return value
    return parse


def _choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        values = [v.strip() for v in raw.split(",")]
        if not values or any(v not in options for v in values):
            raise InvalidConfig(f"{raw!r} is not one of {', '.join(options)}")
        return raw
    return parse


def _list_of(*options: str) -> Callable[[str], str]:
    """A comma-separated list of options, possibly empty (as Kafka's cleanup.policy may be)."""
    def parse(raw: str) -> str:
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if any(v not in options for v in values):
            raise InvalidConfig(f"{raw!r} is not one of {', '.join(options)} nor a list of them")
        return raw
    return parse


def _boolean(raw: str) -> bool:
    if raw.lower() not in ("true", "false"):
        raise InvalidConfig(f"{raw!r} is not true or false")
    return raw.lower() == "true"


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    default: str
    parse: Callable[[str], object]
    broker_synonym: str
    read_only: bool = False
    doc: str = ""


_KEYS = (
    ConfigKey("cleanup.policy", "delete", _list_of("delete", "compact"), "log.cleanup.policy",
              doc="delete: retention by time and size; compact: accepted, compaction not performed yet, "
                  "so without delete nothing is removed"),
    ConfigKey("retention.ms", "604800000", _long(-1), "log.retention.ms"),
    ConfigKey("retention.bytes", "-1", _long(-1), "log.retention.bytes"),
    ConfigKey("retention.consumed", "false", _boolean, "log.retention.consumed",
              doc="true: records below every subscription's committed position (Kafka groups and AMQP "
                  "queues alike) are deleted too, by whole ledgers (core/retention.py)"),
    ConfigKey("delayed.delivery.enable", "false", _boolean, "log.delayed.delivery.enable",
              doc="true: a record with a deliver-at-ms or deliver-after-ms header is held until due, then "
                  "appended at the end of its partition (core/delayed/produce.py)"),
    ConfigKey("mirror.source", "", str, "mirror.source",
              doc="set: a mirror of the topic of that name on the source cluster, which its replicator "
                  "copies here at the source's offsets; read-only for clients until this is removed "
                  "(protocols/kafka/mirror)"),
    ConfigKey("max.message.bytes", "1048588", _long(0), "message.max.bytes"),
    ConfigKey("segment.bytes", "134217728", _long(1 << 20), "log.segment.bytes",
              doc="a partition's ledger is rolled past this size"),
    ConfigKey("segment.ms", "604800000", _long(1), "log.roll.ms"),
    ConfigKey("message.timestamp.type", "CreateTime", _choice("CreateTime", "LogAppendTime"),
              "log.message.timestamp.type"),
    ConfigKey("min.insync.replicas", "1", _long(1), "min.insync.replicas"),
    ConfigKey("compression.type", "producer", _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
              "compression.type", doc="only 'producer' (batches stored as sent) is honoured"),
    ConfigKey("unclean.leader.election.enable", "false", _boolean, "unclean.leader.election.enable"),
    ConfigKey("message.downconversion.enable", "true", _boolean, "log.message.downconversion.enable"),
    ConfigKey("delete.retention.ms", "86400000", _long(0), "log.cleaner.delete.retention.ms"),
    ConfigKey("file.delete.delay.ms", "60000", _long(0), "log.segment.delete.delay.ms"),
    ConfigKey("flush.messages", "1", _long(1), "log.flush.interval.messages", read_only=True,
              doc="every acknowledged write is fsynced; not settable"),
    ConfigKey("flush.ms", "0", _long(0), "log.flush.interval.ms", read_only=True),
    ConfigKey("index.interval.bytes", "4096", _long(0), "log.index.interval.bytes"),
    ConfigKey("max.compaction.lag.ms", "9223372036854775807", _long(1), "log.cleaner.max.compaction.lag.ms"),
    ConfigKey("min.compaction.lag.ms", "0", _long(0), "log.cleaner.min.compaction.lag.ms"),
    ConfigKey("min.cleanable.dirty.ratio", "0.5", str, "log.cleaner.min.cleanable.ratio"),
    ConfigKey("preallocate", "false", _boolean, "log.preallocate"),
    ConfigKey("segment.index.bytes", "10485760", _long(4), "log.index.size.max.bytes"),
    ConfigKey("segment.jitter.ms", "0", _long(0), "log.roll.jitter.ms"),
    ConfigKey("message.timestamp.difference.max.ms", "9223372036854775807", _long(0),
              "log.message.timestamp.difference.max.ms"),
)

TOPIC_CONFIGS: Mapping[str, ConfigKey] = {key.name: key for key in _KEYS}


def validate(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check names and values; returns the explicit settings (None means "back to default")."""
    out = {}
    for name, raw in configs.items():
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            raise InvalidConfig(f"unknown topic config {name!r}")
        if raw is None:
            continue
        if key.read_only:
            raise InvalidConfig(f"topic config {name!r} cannot be changed")
        try:
            key.parse(raw)
        except InvalidConfig as exc:
            raise InvalidConfig(f"{name}: {exc}") from None
        out[name] = raw
    return out


@dataclass(frozen=True, slots=True)
class EffectiveConfig:
    """Typed view of the settings the core itself acts on."""

    retention_ms: int
    retention_bytes: int
    max_message_bytes: int
    segment_bytes: int
    segment_ms: int
    log_append_time: bool
    deletes: bool = True     # cleanup.policy includes "delete": retention by time and size applies
    retention_consumed: bool = False     # also delete what every subscription consumed
    delayed_delivery: bool = False       # records may ask to be delayed by a header
    mirror_source: str = ""              # set: a mirror topic, written only by its replicator

    @classmethod
    def of(cls, explicit: Mapping[str, str], broker_defaults: Mapping[str, str] | None = None) -> "EffectiveConfig":
        def get(name: str) -> str:
            if name in explicit:
                return explicit[name]
            if broker_defaults and name in broker_defaults:
                return broker_defaults[name]
            return TOPIC_CONFIGS[name].default
        return cls(int(get("retention.ms")), int(get("retention.bytes")), int(get("max.message.bytes")),
                   int(get("segment.bytes")), int(get("segment.ms")),
                   get("message.timestamp.type") == "LogAppendTime",
                   deletes="delete" in (policy.strip() for policy in get("cleanup.policy").split(",")),
                   retention_consumed=get("retention.consumed") == "true",
                   delayed_delivery=get("delayed.delivery.enable").lower() == "true",
                   mirror_source=get("mirror.source"))

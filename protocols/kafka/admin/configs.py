"""Configs as Kafka's protocol describes them (DescribeConfigs, CreateTopics v5+): each one's value,
where that value comes from, its synonyms, its type code and a line of documentation.

Topic configs are core/topic_config.py's table: a value set on the topic is DYNAMIC_TOPIC_CONFIG;
anything else falls back to the broker-level config of the same meaning, set for this broker
(DYNAMIC_BROKER_CONFIG) or cluster-wide (DYNAMIC_DEFAULT_BROKER_CONFIG) at run time
(core/broker_configs.py), else Kafka's default (DEFAULT_CONFIG). The broker's own configs are the
gateway's settings (STATIC_BROKER_CONFIG when the configuration sets them, else DEFAULT_CONFIG;
read-only, except the listeners, which Kafka reports as dynamic though they cannot be changed
here) plus those broker-level topic defaults, which are dynamic: not read-only, changeable by
AlterConfigs / IncrementalAlterConfigs.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from core.broker_configs import CLUSTER_DEFAULT, BrokerConfigs
from core.topic_config import TOPIC_CONFIGS, ConfigKey
from protocols.kafka.broker import KafkaSettings


class ConfigSource(enum.IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(enum.IntEnum):
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


# Kafka's type of each topic config (its broker synonym has the same one).
TOPIC_CONFIG_TYPES: Mapping[str, ConfigType] = {
    "cleanup.policy": ConfigType.LIST,
    "retention.ms": ConfigType.LONG,
    "retention.bytes": ConfigType.LONG,
    "max.message.bytes": ConfigType.INT,
    "segment.bytes": ConfigType.INT,
    "segment.ms": ConfigType.LONG,
    "message.timestamp.type": ConfigType.STRING,
    "min.insync.replicas": ConfigType.INT,
    "compression.type": ConfigType.STRING,
    "unclean.leader.election.enable": ConfigType.BOOLEAN,
    "message.downconversion.enable": ConfigType.BOOLEAN,
    "delete.retention.ms": ConfigType.LONG,
    "file.delete.delay.ms": ConfigType.LONG,
    "flush.messages": ConfigType.LONG,
    "flush.ms": ConfigType.LONG,
    "index.interval.bytes": ConfigType.INT,
    "max.compaction.lag.ms": ConfigType.LONG,
    "min.compaction.lag.ms": ConfigType.LONG,
    "min.cleanable.dirty.ratio": ConfigType.DOUBLE,
    "preallocate": ConfigType.BOOLEAN,
    "segment.index.bytes": ConfigType.INT,
    "segment.jitter.ms": ConfigType.LONG,
    "message.timestamp.difference.max.ms": ConfigType.LONG,
}

_TOPIC_DOCS: Mapping[str, str] = {
    "retention.ms": "How long records are kept before they may be deleted; -1 keeps them forever.",
    "retention.bytes": "How large a partition may grow before its oldest records may be deleted; -1: no limit.",
    "max.message.bytes": "The largest record batch a producer may send to this topic.",
    "segment.ms": "How long a partition keeps writing to one ledger before rolling to a new one.",
    "message.timestamp.type": "Whether record timestamps are the producer's (CreateTime) or the "
                              "gateway's at append (LogAppendTime).",
    "min.insync.replicas": "Accepted for compatibility; every write is acknowledged by the storage's ack quorum.",
    "unclean.leader.election.enable": "Accepted for compatibility; this broker always leads every partition.",
    "message.downconversion.enable": "Accepted for compatibility; records are served in the format they were stored.",
    "delete.retention.ms": "Accepted for compatibility (used by log compaction).",
    "file.delete.delay.ms": "Accepted for compatibility; deleted ledgers are removed at once.",
    "flush.ms": "Every acknowledged write is already fsynced; not settable.",
    "index.interval.bytes": "Accepted for compatibility; offsets are indexed per batch.",
    "max.compaction.lag.ms": "Accepted for compatibility (used by log compaction).",
    "min.compaction.lag.ms": "Accepted for compatibility (used by log compaction).",
    "min.cleanable.dirty.ratio": "Accepted for compatibility (used by log compaction).",
    "preallocate": "Accepted for compatibility; storage files are not preallocated per topic.",
    "segment.index.bytes": "Accepted for compatibility; the index is kept by the storage.",
    "segment.jitter.ms": "Accepted for compatibility.",
    "message.timestamp.difference.max.ms": "Accepted for compatibility; record timestamps are not checked.",
}


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    config_type: ConfigType
    documentation: str | None
    synonyms: tuple[Synonym, ...]   # highest precedence first; the first one's source is the entry's

    @property
    def source(self) -> ConfigSource:
        return self.synonyms[0].source if self.synonyms else ConfigSource.DEFAULT_CONFIG

    def described(self, include_synonyms: bool, include_documentation: bool) -> dict:
        """As a DescribeConfigs result entry."""
        return {
            "name": self.name, "value": self.value, "read_only": self.read_only,
            "is_default": self.source == ConfigSource.DEFAULT_CONFIG, "config_source": self.source,
            "is_sensitive": False,
            "synonyms": [{"name": s.name, "value": s.value, "source": s.source} for s in self.synonyms]
            if include_synonyms else [],
            "config_type": self.config_type,
            "documentation": self.documentation if include_documentation else None,
        }

    def created(self) -> dict:
        """As a CreateTopics (v5+) result config."""
        return {"name": self.name, "value": self.value, "read_only": self.read_only,
                "config_source": self.source, "is_sensitive": False}


@dataclass(frozen=True, slots=True)
class BrokerLevels:
    """The broker-level topic defaults set at run time: this broker's and the cluster-wide ones."""

    broker: Mapping[str, str]
    cluster: Mapping[str, str]

    @classmethod
    def of(cls, configs: BrokerConfigs) -> "BrokerLevels":
        return cls(configs.get(configs.broker_id), configs.get(CLUSTER_DEFAULT))

    def synonyms(self, key: ConfigKey) -> tuple[Synonym, ...]:
        """The broker-level values of a topic config, highest precedence first, ending with the default."""
        name = key.broker_synonym
        found = [Synonym(name, self.broker[name], ConfigSource.DYNAMIC_BROKER_CONFIG)] if name in self.broker else []
        if name in self.cluster:
            found.append(Synonym(name, self.cluster[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        return (*found, Synonym(name, key.default, ConfigSource.DEFAULT_CONFIG))


NO_LEVELS = BrokerLevels({}, {})


def topic_config_entries(explicit: Mapping[str, str], levels: BrokerLevels = NO_LEVELS) -> list[ConfigEntry]:
    """Every topic config of a topic whose explicitly set values are `explicit`."""
    entries = []
    for key in TOPIC_CONFIGS.values():
        synonyms = levels.synonyms(key)
        if key.name in explicit:
            synonyms = (Synonym(key.name, explicit[key.name], ConfigSource.DYNAMIC_TOPIC_CONFIG), *synonyms)
        entries.append(ConfigEntry(key.name, synonyms[0].value, key.read_only,
                                   TOPIC_CONFIG_TYPES.get(key.name, ConfigType.UNKNOWN),
                                   key.doc or _TOPIC_DOCS.get(key.name), synonyms))
    return entries


@dataclass(frozen=True, slots=True)
class _BrokerConfig:
    name: str
    config_type: ConfigType
    value: Callable[[KafkaSettings], str | None]
    doc: str
    setting: str | None = None   # the [kafka] setting it reflects: STATIC_BROKER_CONFIG when given
    always_set: bool = False     # what the gateway always configures (its id, listeners, data directory)
    # Dynamic in Kafka (per broker), so not read-only as Kafka reports it, though the gateway
    # cannot change it at run time (changing it is refused as for a static config).
    dynamic_in_kafka: bool = False


def _listener(settings: KafkaSettings) -> str:
    sasl = "SASL_" if settings.sasl_mechanisms else ""
    listeners = f"{sasl}PLAINTEXT://{settings.host}:{settings.port}"
    if settings.tls_port is not None:
        listeners += f",{sasl}SSL://{settings.host}:{settings.tls_port}"
    return listeners


def _setting(name: str) -> Callable[[KafkaSettings], str]:
    return lambda settings: str(getattr(settings, name))


_BROKER_CONFIGS = (
    _BrokerConfig("broker.id", ConfigType.INT, lambda s: str(s.node_id), "This broker's id.", always_set=True),
    _BrokerConfig("broker.rack", ConfigType.STRING, lambda s: s.rack, "This broker's rack, if any."),
    _BrokerConfig("listeners", ConfigType.STRING, _listener, "Where this broker listens for Kafka clients.",
                  always_set=True, dynamic_in_kafka=True),
    _BrokerConfig("advertised.listeners", ConfigType.STRING, _listener, "What clients are told to connect to.",
                  "advertised_host", dynamic_in_kafka=True),
    _BrokerConfig("log.dirs", ConfigType.STRING, lambda s: s.log_dir or None, "The gateway's data directory.",
                  always_set=True),
    _BrokerConfig("num.partitions", ConfigType.INT, _setting("default_partitions"),
                  "The partition count of topics created without one.", "default_partitions"),
    _BrokerConfig("auto.create.topics.enable", ConfigType.BOOLEAN, lambda s: str(s.auto_create_topics).lower(),
                  "Whether a Metadata request for an unknown topic creates it.", "auto_create_topics"),
    _BrokerConfig("socket.request.max.bytes", ConfigType.INT, lambda s: str(s.limits.max_frame_bytes),
                  "The largest request frame accepted.", "max_frame_bytes"),
    _BrokerConfig("group.initial.rebalance.delay.ms", ConfigType.INT, _setting("group_initial_rebalance_delay_ms"),
                  "How long a new consumer group waits for more members before its first assignment.",
                  "group_initial_rebalance_delay_ms"),
    _BrokerConfig("group.min.session.timeout.ms", ConfigType.INT, _setting("group_min_session_timeout_ms"),
                  "The shortest session timeout a group member may ask for.", "group_min_session_timeout_ms"),
    _BrokerConfig("group.max.session.timeout.ms", ConfigType.INT, _setting("group_max_session_timeout_ms"),
                  "The longest session timeout a group member may ask for.", "group_max_session_timeout_ms"),
    _BrokerConfig("group.max.size", ConfigType.INT, _setting("group_max_size"),
                  "The most members of one consumer group.", "group_max_size"),
    _BrokerConfig("offsets.retention.minutes", ConfigType.INT, _setting("offsets_retention_minutes"),
                  "Committed offsets of a group empty this long are deleted.", "offsets_retention_minutes"),
    _BrokerConfig("offsets.retention.check.interval.ms", ConfigType.LONG,
                  _setting("offsets_retention_check_interval_ms"), "How often expired committed offsets are "
                  "looked for.", "offsets_retention_check_interval_ms"),
    _BrokerConfig("transaction.abort.timed.out.transaction.cleanup.interval.ms", ConfigType.INT,
                  _setting("transaction_cleanup_interval_ms"), "How often timed-out transactions are aborted.",
                  "transaction_cleanup_interval_ms"),
    _BrokerConfig("transaction.max.timeout.ms", ConfigType.INT, _setting("transaction_max_timeout_ms"),
                  "The longest transaction timeout a producer may ask for."),
    _BrokerConfig("default.replication.factor", ConfigType.INT, lambda s: "1",
                  "One replica per partition: durability comes from the storage's write quorum."),
    _BrokerConfig("offsets.topic.replication.factor", ConfigType.SHORT, lambda s: "1", "As default.replication.factor."),
    _BrokerConfig("transaction.state.log.replication.factor", ConfigType.SHORT, lambda s: "1",
                  "As default.replication.factor."),
    _BrokerConfig("transaction.state.log.min.isr", ConfigType.INT, lambda s: "1", "As min.insync.replicas."),
    _BrokerConfig("delete.topic.enable", ConfigType.BOOLEAN, lambda s: "true", "Topics may be deleted."),
)

STATIC_BROKER_CONFIG_NAMES = frozenset(config.name for config in _BROKER_CONFIGS)


def broker_config_entries(settings: KafkaSettings, levels: BrokerLevels) -> list[ConfigEntry]:
    """This broker's configs: its settings (read-only), then every topic config's broker-level
    default (dynamic unless the topic config cannot be changed here)."""
    entries: list[ConfigEntry] = []
    for config in _BROKER_CONFIGS:
        value = config.value(settings)
        given = config.always_set or config.setting in settings.given
        source = ConfigSource.STATIC_BROKER_CONFIG if given else ConfigSource.DEFAULT_CONFIG
        synonyms = (Synonym(config.name, value, source),) if value is not None else ()
        entries.append(ConfigEntry(config.name, value, not config.dynamic_in_kafka, config.config_type, config.doc,
                                   synonyms))
    named = {entry.name for entry in entries}
    for key in TOPIC_CONFIGS.values():
        if key.broker_synonym in named:
            continue
        named.add(key.broker_synonym)
        synonyms = levels.synonyms(key)
        entries.append(ConfigEntry(
            key.broker_synonym, synonyms[0].value, key.read_only, TOPIC_CONFIG_TYPES.get(key.name, ConfigType.UNKNOWN),
            f"The default of the topic config {key.name}.", synonyms))
    return entries


def cluster_default_entries(levels: BrokerLevels) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults that are set (a BROKER resource named "")."""
    by_synonym = {key.broker_synonym: key for key in TOPIC_CONFIGS.values()}
    return [ConfigEntry(name, value, False, TOPIC_CONFIG_TYPES.get(by_synonym[name].name, ConfigType.UNKNOWN),
                        f"The default of the topic config {by_synonym[name].name}.",
                        (Synonym(name, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),))
            for name, value in sorted(levels.cluster.items())]

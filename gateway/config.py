"""The gateway's settings, resolved once from defaults < TOML file < environment < command-line flags.

Everything else in the process reads the frozen `GatewayConfig` this module produces; nothing else
looks at the environment or the config file.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from core.cluster.members import ROLES, SERVING
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT
from core.queues.ack_timeout import DEFAULT_TIMEOUT_MS
from gateway.tls import CLIENT_AUTH, TlsSettings
from protocols.amqp.vhosts import vhost_namespace
from protocols.kafka.principal_rules import parse_rules
from storage.config import REPLICATED, StorageConfig

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")

# The settings that may come from every source, and the environment variable naming each.
ENV_VARS: Mapping[str, str] = {
    "data_dir": "GATEWAY_DATA_DIR",
    "host": "GATEWAY_HOST",
    "kafka_port": "GATEWAY_KAFKA_PORT",
    "amqp_port": "GATEWAY_AMQP_PORT",
    "mqtt_port": "GATEWAY_MQTT_PORT",
    "pulsar_port": "GATEWAY_PULSAR_PORT",
    "admin_port": "GATEWAY_ADMIN_PORT",
    "peer_port": "GATEWAY_PEER_PORT",
    "log_level": "GATEWAY_LOG_LEVEL",
    "broker_id": "GATEWAY_BROKER_ID",
    "rack": "GATEWAY_RACK",
    "retention_check_interval_ms": "GATEWAY_RETENTION_CHECK_INTERVAL_MS",
    "amqp_consumer_timeout_ms": "GATEWAY_AMQP_CONSUMER_TIMEOUT_MS",
    "admin_tls_cert": "GATEWAY_ADMIN_TLS_CERT",
    "admin_tls_key": "GATEWAY_ADMIN_TLS_KEY",
    "delayed_memory_keys": "GATEWAY_DELAYED_MEMORY_KEYS",
    "load_shed_interval_ms": "GATEWAY_LOAD_SHED_INTERVAL_MS",
    "load_shed_threshold_percent": "GATEWAY_LOAD_SHED_THRESHOLD_PERCENT",
    "bundle_split_messages_per_s": "GATEWAY_BUNDLE_SPLIT_MESSAGES_PER_S",
    "bundle_split_mbytes_per_s": "GATEWAY_BUNDLE_SPLIT_MBYTES_PER_S",
    "bundles_max_per_namespace": "GATEWAY_BUNDLES_MAX_PER_NAMESPACE",
    "role": "GATEWAY_ROLE",
    "audit_log": "GATEWAY_AUDIT_LOG",
    "audit_refusal_interval_s": "GATEWAY_AUDIT_REFUSAL_INTERVAL_S",
    # TLS listeners (gateway/tls.py): their ports, and the certificate settings they share
    "kafka_tls_port": "GATEWAY_KAFKA_TLS_PORT",
    "amqp_tls_port": "GATEWAY_AMQP_TLS_PORT",
    "tls_cert": "GATEWAY_TLS_CERT",
    "tls_key": "GATEWAY_TLS_KEY",
    "tls_ca": "GATEWAY_TLS_CA",
    "tls_client_auth": "GATEWAY_TLS_CLIENT_AUTH",
    "tls_handshake_timeout_ms": "GATEWAY_TLS_HANDSHAKE_TIMEOUT_MS",
    "tls_crl": "GATEWAY_TLS_CRL",
}
PORT_SETTINGS = ("kafka_port", "amqp_port", "mqtt_port", "pulsar_port", "admin_port", "peer_port")
TLS_PORT_SETTINGS = ("kafka_tls_port", "amqp_tls_port")   # None: no such listener
INT_SETTINGS = (*PORT_SETTINGS, "broker_id", "retention_check_interval_ms", "amqp_consumer_timeout_ms",
                "delayed_memory_keys", "load_shed_interval_ms", "load_shed_threshold_percent",
                "bundle_split_messages_per_s", "bundle_split_mbytes_per_s", "bundles_max_per_namespace",
                "audit_refusal_interval_s", *TLS_PORT_SETTINGS, "tls_handshake_timeout_ms")
STORAGE_TABLE = "storage"
KAFKA_TABLE = "kafka"
METRICS_TABLE = "metrics"
USERS_KEY = "users"
REPLICATION_KEY = "replication"
PERMISSIONS_KEY = "permissions"
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

# The [kafka] table's keys, their types, and the environment variable naming each. On the command
# line (and in resolve_config's `flags`) each is `kafka_<key>`, e.g. --kafka-default-partitions.
KAFKA_SETTINGS: Mapping[str, type] = {
    "auto_create_topics": bool,
    "default_partitions": int,
    "advertised_host": str,
    "advertised_port": int,
    "cluster_id": str,
    "max_frame_bytes": int,
    "sasl_mechanisms": str,
    "super_users": str,
    "group_initial_rebalance_delay_ms": int,
    "group_min_session_timeout_ms": int,
    "group_max_session_timeout_ms": int,
    "group_max_size": int,
    "group_consumer_session_timeout_ms": int,
    "group_consumer_heartbeat_interval_ms": int,
    "offsets_retention_minutes": int,
    "offsets_retention_check_interval_ms": int,
    "transaction_cleanup_interval_ms": int,
    "group_share_record_lock_duration_ms": int,
    "group_share_delivery_count_limit": int,
    "group_share_session_timeout_ms": int,
    "group_share_heartbeat_interval_ms": int,
    "share_auto_offset_reset": str,
    # Bearer tokens (Kafka OAUTHBEARER, AMQP's token as the password): see core/tokens.py
    "oauth_jwks_url": str,
    "oauth_jwks_file": str,
    "oauth_issuer": str,
    "oauth_audience": str,
    "oauth_principal_claim": str,
    "oauth_tenant_claim": str,
    "oauth_clock_skew_s": int,
    "ssl_principal_mapping_rules": str,
}
KAFKA_ENV_VARS: Mapping[str, str] = {name: f"GATEWAY_KAFKA_{name.upper()}" for name in KAFKA_SETTINGS}
KAFKA_FLAG_PREFIX = "kafka_"
MIN_FRAME_BYTES = 1024          # below this not even a Metadata response fits
MAX_FRAME_BYTES = 0x7FFFFFFF    # a frame's size is an int32 on the wire
MAX_TIMEOUT_MS = 0x7FFFFFFF     # about 24.8 days
_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off")


class ConfigError(ValueError):
    """The configuration cannot be used; the message says which setting and where it came from."""


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    """The Kafka listener's broker settings (the `[kafka]` table)."""

    auto_create_topics: bool = True         # Kafka's auto.create.topics.enable
    default_partitions: int = 1             # Kafka's num.partitions: for auto-created topics
    advertised_host: str | None = None      # what Metadata tells clients to connect to; None: the bind host
    advertised_port: int | None = None      # and the port (behind a proxy or NAT); None: the bound one
    cluster_id: str = "gateway-cluster"
    max_frame_bytes: int = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
    sasl_mechanisms: str = ""               # e.g. "PLAIN,SCRAM-SHA-256": empty means no authentication
    super_users: str = ""                   # Kafka's super.users, e.g. "User:admin": never refused by ACLs
    group_initial_rebalance_delay_ms: int = 3000  # Kafka's group.initial.rebalance.delay.ms
    group_min_session_timeout_ms: int = 6_000     # Kafka's group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000  # Kafka's group.max.session.timeout.ms
    group_max_size: int = 0x7FFFFFFF              # Kafka's group.max.size: members per group
    group_consumer_session_timeout_ms: int = 45_000     # Kafka's group.consumer.session.timeout.ms
    group_consumer_heartbeat_interval_ms: int = 5_000   # Kafka's group.consumer.heartbeat.interval.ms
    offsets_retention_minutes: int = 10_080       # Kafka's offsets.retention.minutes (7 days)
    offsets_retention_check_interval_ms: int = 600_000   # Kafka's offsets.retention.check.interval.ms
    # Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms: how often transactions
    # past their timeout are looked for and aborted
    transaction_cleanup_interval_ms: int = 10_000
    # Share groups (KIP-932), Kafka's names
    group_share_record_lock_duration_ms: int = 30_000   # how long an acquired record stays locked
    group_share_delivery_count_limit: int = 5           # deliveries before a record is archived
    group_share_session_timeout_ms: int = 45_000
    group_share_heartbeat_interval_ms: int = 5_000
    share_auto_offset_reset: str = "latest"   # where a group's share partition starts: latest or earliest
    # Bearer tokens, for Kafka's OAUTHBEARER and as AMQP passwords (core/tokens.py): the issuer's key
    # set (JWKS) from a URL or a file, one of them; "" for issuer/audience: not checked
    oauth_jwks_url: str = ""
    oauth_jwks_file: str = ""
    oauth_issuer: str = ""
    oauth_audience: str = ""
    oauth_principal_claim: str = "sub"
    oauth_tenant_claim: str = ""     # the claim naming an unknown user's tenant[/namespace]; "": the default
    oauth_clock_skew_s: int = 30     # Kafka's sasl.oauthbearer.clock.skew.seconds
    # Kafka's ssl.principal.mapping.rules: the principal a client certificate's subject maps to
    # (protocols/kafka/principal_rules.py); DEFAULT: its CN
    ssl_principal_mapping_rules: str = "DEFAULT"
    # The keys some source set (DescribeConfigs tells them from defaults); not part of the value.
    given: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.auto_create_topics, bool):
            raise ConfigError(f"kafka.auto_create_topics must be true or false, got {self.auto_create_topics!r}")
        if not _is_int(self.default_partitions) or not 1 <= self.default_partitions <= 0x7FFFFFFF:
            raise ConfigError(f"kafka.default_partitions must be a positive integer, got {self.default_partitions!r}")
        if self.advertised_host is not None and (not isinstance(self.advertised_host, str) or not self.advertised_host):
            raise ConfigError(f"kafka.advertised_host must be a non-empty host name, got {self.advertised_host!r}")
        if self.advertised_port is not None and (not _is_int(self.advertised_port)
                                                 or not 1 <= self.advertised_port <= 65535):
            raise ConfigError(f"kafka.advertised_port must be a port number, got {self.advertised_port!r}")
        if not isinstance(self.cluster_id, str) or not self.cluster_id:
            raise ConfigError(f"kafka.cluster_id must be a non-empty string, got {self.cluster_id!r}")
        for mechanism in self.mechanisms:
            if mechanism not in SASL_MECHANISMS:
                raise ConfigError(f"kafka.sasl_mechanisms: unknown mechanism {mechanism!r}; "
                                  f"known: {', '.join(SASL_MECHANISMS)}")
        if not _is_int(self.max_frame_bytes) or not MIN_FRAME_BYTES <= self.max_frame_bytes <= MAX_FRAME_BYTES:
            raise ConfigError(f"kafka.max_frame_bytes must be an integer in {MIN_FRAME_BYTES}..{MAX_FRAME_BYTES}, "
                              f"got {self.max_frame_bytes!r}")
        if not _is_int(self.group_initial_rebalance_delay_ms) or not 0 <= self.group_initial_rebalance_delay_ms <= 300_000:
            raise ConfigError("kafka.group_initial_rebalance_delay_ms must be an integer in 0..300000, "
                              f"got {self.group_initial_rebalance_delay_ms!r}")
        for key, low in (("group_min_session_timeout_ms", 0), ("group_max_session_timeout_ms", 0),
                         ("group_max_size", 1), ("offsets_retention_minutes", 1),
                         ("group_consumer_session_timeout_ms", 1), ("group_consumer_heartbeat_interval_ms", 1),
                         ("offsets_retention_check_interval_ms", 1)):
            value = getattr(self, key)
            if not _is_int(value) or not low <= value <= 0x7FFFFFFF:
                raise ConfigError(f"kafka.{key} must be an integer in {low}..2147483647, got {value!r}")
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ConfigError(f"kafka.group_consumer_heartbeat_interval_ms ({self.group_consumer_heartbeat_interval_ms}) "
                              f"must be below kafka.group_consumer_session_timeout_ms "
                              f"({self.group_consumer_session_timeout_ms})")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError(f"kafka.group_min_session_timeout_ms ({self.group_min_session_timeout_ms}) is above "
                              f"kafka.group_max_session_timeout_ms ({self.group_max_session_timeout_ms})")
        if not _is_int(self.transaction_cleanup_interval_ms) or not 1 <= self.transaction_cleanup_interval_ms <= 3_600_000:
            raise ConfigError("kafka.transaction_cleanup_interval_ms must be an integer in 1..3600000, "
                              f"got {self.transaction_cleanup_interval_ms!r}")
        for key, low, high in (("group_share_record_lock_duration_ms", 1_000, 3_600_000),
                               ("group_share_delivery_count_limit", 2, 10),
                               ("group_share_session_timeout_ms", 1, 0x7FFFFFFF),
                               ("group_share_heartbeat_interval_ms", 1, 0x7FFFFFFF)):
            value = getattr(self, key)
            if not _is_int(value) or not low <= value <= high:
                raise ConfigError(f"kafka.{key} must be an integer in {low}..{high}, got {value!r}")
        if self.share_auto_offset_reset not in ("latest", "earliest"):
            raise ConfigError("kafka.share_auto_offset_reset must be latest or earliest, "
                              f"got {self.share_auto_offset_reset!r}")
        try:
            parse_rules(self.ssl_principal_mapping_rules)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"kafka.ssl_principal_mapping_rules: {exc}") from None
        self._check_oauth()

    def _check_oauth(self) -> None:
        for key in ("oauth_jwks_url", "oauth_jwks_file", "oauth_issuer", "oauth_audience", "oauth_principal_claim",
                    "oauth_tenant_claim"):
            if not isinstance(getattr(self, key), str):
                raise ConfigError(f"kafka.{key} must be a string, got {getattr(self, key)!r}")
        if self.oauth_jwks_url and self.oauth_jwks_file:
            raise ConfigError("kafka.oauth_jwks_url and kafka.oauth_jwks_file: set one of them, not both")
        if self.oauth_jwks_url and not self.oauth_jwks_url.startswith(("https://", "http://")):
            raise ConfigError(f"kafka.oauth_jwks_url must be an http(s) URL, got {self.oauth_jwks_url!r}")
        if self.oauth_jwks_file and not os.path.isfile(self.oauth_jwks_file):
            raise ConfigError(f"kafka.oauth_jwks_file: no such file {self.oauth_jwks_file!r}")
        if "OAUTHBEARER" in self.mechanisms and not self.tokens_enabled:
            raise ConfigError("kafka.sasl_mechanisms: OAUTHBEARER needs kafka.oauth_jwks_url or kafka.oauth_jwks_file")
        if not self.oauth_principal_claim:
            raise ConfigError("kafka.oauth_principal_claim must name a claim")
        if not _is_int(self.oauth_clock_skew_s) or not 0 <= self.oauth_clock_skew_s <= 3600:
            raise ConfigError(f"kafka.oauth_clock_skew_s must be an integer in 0..3600, got {self.oauth_clock_skew_s!r}")

    @property
    def tokens_enabled(self) -> bool:
        """Whether bearer tokens are accepted (a key set is configured)."""
        return bool(self.oauth_jwks_url or self.oauth_jwks_file)


    @property
    def mechanisms(self) -> tuple[str, ...]:
        return _words(self.sasl_mechanisms)

    @property
    def super_user_list(self) -> tuple[str, ...]:
        return _words(self.super_users)


@dataclass(frozen=True, slots=True)
class PermissionConfig:
    """One `[[users.permissions]]` entry: RabbitMQ's configure / write / read patterns on one vhost."""

    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"

    def __post_init__(self) -> None:
        if not isinstance(self.vhost, str) or vhost_namespace(self.vhost) is None:
            raise ConfigError(f"users.permissions: vhost must be \"/\", \"<namespace>\" or \"<tenant>/<namespace>\" "
                              f"(names of [A-Za-z0-9._-]), got {self.vhost!r}")
        for key in ("configure", "write", "read"):
            pattern = getattr(self, key)
            if not isinstance(pattern, str):
                raise ConfigError(f"users.permissions: {key} must be a string (a regular expression), got {pattern!r}")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"users.permissions: {key} {pattern!r} is not a regular expression: {exc}") from None

    @property
    def tenant_namespace(self) -> tuple[str, str]:
        return vhost_namespace(self.vhost)


@dataclass(frozen=True, slots=True)
class UserConfig:
    """One `[[users]]` entry: a login for SASL (Kafka) and AMQP, scoped to a tenant/namespace.

    `permissions` None: every AMQP permission on the vhost of its own tenant/namespace and no other;
    otherwise exactly the vhosts listed."""

    name: str
    password: str
    tenant: str = "public"
    namespace: str = "default"
    permissions: tuple[PermissionConfig, ...] | None = None
    tags: tuple[str, ...] = ()   # RabbitMQ's user tags: "administrator" may use the admin API

    def __post_init__(self) -> None:
        for key in ("name", "password", "tenant", "namespace"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise ConfigError(f"users: {key} must be a non-empty string")
        if not isinstance(self.tags, tuple) or not all(isinstance(tag, str) and tag for tag in self.tags):
            raise ConfigError(f"users: {self.name}: tags must be a list of non-empty strings")
        if self.permissions is not None:
            vhosts = [permission.vhost for permission in self.permissions]
            if len(set(vhosts)) != len(vhosts):
                raise ConfigError(f"users: {self.name}: more than one [[users.permissions]] for one vhost")


def _words(text: str) -> tuple[str, ...]:
    return tuple(word.strip() for word in text.split(",") if word.strip())


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The `[metrics]` table: how many labelled series /metrics may grow to."""

    per_topic: bool = False     # also series per topic (open partitions only); off: per namespace only
    max_series: int = 1000      # per family: namespaces (or topics) beyond are summed into "_other"

    def __post_init__(self) -> None:
        if not isinstance(self.per_topic, bool):
            raise ConfigError(f"metrics.per_topic must be true or false, got {self.per_topic!r}")
        if not _is_int(self.max_series) or not 1 <= self.max_series <= 1_000_000:
            raise ConfigError(f"metrics.max_series must be an integer in 1..1000000, got {self.max_series!r}")


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
LINK_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """One `[[replication]]` entry: a namespace's topics copied to a remote cluster as mirror topics
    at the same offsets (protocols/kafka/mirror)."""

    name: str                          # the link: the mirrors' mirror.source and the metrics' label
    remote: str                        # the remote cluster's Kafka bootstrap, "host:port[,host:port...]"
    namespace: str = f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}"   # the local tenant/namespace copied
    topics: str = ".*"                 # a regular expression the topic names must match
    # How the link reaches the remote, with Kafka clients' names: security.protocol (PLAINTEXT, SSL,
    # SASL_PLAINTEXT or SASL_SSL), sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with the
    # user the mirrors are written as (the remote's tenant and namespace are that user's), and for
    # TLS the CA to trust (None: the system's), whether the certificate must name the host, and the
    # link's own certificate and key (PEM) for a remote that wants one (mutual TLS; librdkafka's
    # ssl.certificate.location / ssl.key.location).
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str = ""
    sasl_password: str = ""
    ssl_ca_file: str | None = None
    ssl_check_hostname: bool = True
    ssl_certificate_file: str | None = None
    ssl_key_file: str | None = None
    # Copy each topic's settings (those set on it, not defaults) to its mirror, and again when they change.
    sync_topic_configs: bool = True
    # Copy the ACLs naming each copied topic to the remote, as MirrorMaker 2's sync.topic.acls
    # (protocols/kafka/mirror/replicator.py: no ALLOW of WRITE, ALLOW of ALL as READ).
    sync_topic_acls: bool = True

    def __post_init__(self) -> None:
        for key in ("name", "remote", "namespace", "topics"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise ConfigError(f"replication: {key} must be a non-empty string")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"replication: {self.name}: security_protocol must be one of "
                              f"{', '.join(SECURITY_PROTOCOLS)}, got {self.security_protocol!r}")
        if self.sasl:
            if self.sasl_mechanism not in LINK_SASL_MECHANISMS:
                raise ConfigError(f"replication: {self.name}: sasl_mechanism must be one of "
                                  f"{', '.join(LINK_SASL_MECHANISMS)}, got {self.sasl_mechanism!r}")
            if not (isinstance(self.sasl_username, str) and self.sasl_username
                    and isinstance(self.sasl_password, str) and self.sasl_password):
                raise ConfigError(f"replication: {self.name}: {self.security_protocol} needs sasl_username "
                                  "and sasl_password")
        for key in ("ssl_ca_file", "ssl_certificate_file", "ssl_key_file"):
            if getattr(self, key) is not None and not Path(getattr(self, key)).is_file():
                raise ConfigError(f"replication: {self.name}: {key} {getattr(self, key)} is not a file")
        if (self.ssl_certificate_file is None) != (self.ssl_key_file is None):
            raise ConfigError(f"replication: {self.name}: ssl_certificate_file and ssl_key_file go together")
        for key in ("ssl_check_hostname", "sync_topic_configs", "sync_topic_acls"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"replication: {self.name}: {key} must be true or false")
        if self.namespace.count("/") != 1:
            raise ConfigError(f"replication: {self.name}: namespace must be \"<tenant>/<namespace>\", "
                              f"got {self.namespace!r}")
        try:
            self.bootstrap
            re.compile(self.topics)
        except (ValueError, re.error) as exc:
            raise ConfigError(f"replication: {self.name}: {exc}") from None

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def bootstrap(self) -> list[tuple[str, int]]:
        out = []
        for address in self.remote.split(","):
            host, _, port = address.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"remote {address!r} is not host:port")
            out.append((host, int(port)))
        return out


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    data_dir: Path = Path("data")
    host: str = "127.0.0.1"
    kafka_port: int = 9092
    amqp_port: int = 5672
    mqtt_port: int = 1883
    pulsar_port: int = 6650           # Pulsar's binary protocol (pulsar://host:port)
    admin_port: int = 8080
    # In a cluster: the port of this broker's links with the other brokers (publishes into queues
    # they serve); 0 picks a free one, registered with the broker.
    peer_port: int = 0
    log_level: str = "info"
    storage: StorageConfig = field(default_factory=StorageConfig)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    users: tuple[UserConfig, ...] = ()
    replication: tuple[ReplicationConfig, ...] = ()
    # In a cluster (replicated storage): this broker's id (Kafka's broker.id; None: one is allocated
    # at the first start and kept in the data directory) and its rack (Kafka's broker.rack).
    broker_id: int | None = None
    rack: str | None = None
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    # How often the core enforces retention and namespaces' backlog quotas (Kafka's
    # log.retention.check.interval.ms; Pulsar checks backlog quotas every 60 s).
    retention_check_interval_ms: int = 60_000
    # RabbitMQ's consumer_timeout: an AMQP channel holding a delivery unacknowledged longer than this
    # is closed (queues may set their own, x-consumer-timeout); 0: no limit.
    amqp_consumer_timeout_ms: int = DEFAULT_TIMEOUT_MS
    # HTTPS on the admin port: a PEM certificate (chain) and its private key; both or neither.
    admin_tls_cert: str | None = None
    admin_tls_key: str | None = None
    # Keys of held (delayed) messages each namespace keeps in memory; the rest wait on storage.
    delayed_memory_keys: int = 100_000
    # In a cluster, the leader moves one bundle per interval off a broker whose share of the load is
    # above the mean by more than the threshold, in percentage points (Pulsar's threshold shedder:
    # 1 minute, 10 points); 0 ms: never.
    load_shed_interval_ms: int = 60_000
    load_shed_threshold_percent: int = 10
    # In a cluster, the owner of a bundle splits it in two when it takes more messages or megabytes
    # per second than these (and its traffic is not all one partition's), up to the most bundles a
    # namespace may have (Pulsar's defaults: 30,000 msg/s, 100 MB/s, 128); 0 msg/s: never.
    bundle_split_messages_per_s: int = 30_000
    bundle_split_mbytes_per_s: int = 100
    bundles_max_per_namespace: int = 128
    # In a cluster: "serving" (owns partitions, groups and queues) or "read-only" (owns nothing and
    # writes nothing: serves Kafka fetches of any partition from the shared storage, core/replicas.py).
    role: str = SERVING
    # The audit log (admin changes, refused logins and operations, as JSON lines): a file, relative
    # to data_dir unless absolute, "" for none; repeated refusals are one line per interval with a count.
    audit_log: str = "audit.log"
    audit_refusal_interval_s: int = 60
    # TLS listeners: Kafka's (SSL, or SASL_SSL with kafka.sasl_mechanisms) and AMQP's (amqps), each
    # beside its plaintext port (0 picks a free one; None: none), with one PEM certificate and key,
    # the CA client certificates must chain to, and whether clients must show one.
    kafka_tls_port: int | None = None
    amqp_tls_port: int | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    tls_client_auth: str = "none"          # none | requested | required
    tls_handshake_timeout_ms: int = 10_000   # a client not through its handshake by then is dropped
    tls_crl: str | None = None             # the CA's revocation list (PEM): revoked client certificates are refused

    @property
    def tls(self) -> TlsSettings | None:
        """The TLS listeners' settings, None without a TLS listener."""
        if self.kafka_tls_port is None and self.amqp_tls_port is None:
            return None
        return TlsSettings(self.tls_cert, self.tls_key, self.tls_ca, self.tls_client_auth,
                           self.tls_handshake_timeout_ms / 1000, self.tls_crl)

    def __post_init__(self) -> None:
        # Validated here so that no GatewayConfig, however built, can hold an unusable value.
        for name in PORT_SETTINGS:
            port = getattr(self, name)
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
                raise ConfigError(f"{name} must be an integer in 0..65535 (0 picks a free port), got {port!r}")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")
        if not self.host:
            raise ConfigError("host must not be empty")
        if self.broker_id is not None and (isinstance(self.broker_id, bool) or not isinstance(self.broker_id, int)
                                           or not 0 <= self.broker_id < 2**31):
            raise ConfigError(f"broker_id must be an integer in 0..2147483647, got {self.broker_id!r}")
        if not _is_int(self.delayed_memory_keys) or not 16 <= self.delayed_memory_keys <= 100_000_000:
            raise ConfigError(f"delayed_memory_keys must be an integer in 16..100000000, "
                              f"got {self.delayed_memory_keys!r}")
        if not isinstance(self.data_dir, Path):
            raise ConfigError(f"data_dir must be a path, got {self.data_dir!r}")
        if not _is_int(self.retention_check_interval_ms) or not 10 <= self.retention_check_interval_ms <= 86_400_000:
            raise ConfigError("retention_check_interval_ms must be an integer in 10..86400000, "
                              f"got {self.retention_check_interval_ms!r}")
        if not _is_int(self.amqp_consumer_timeout_ms) or not 0 <= self.amqp_consumer_timeout_ms <= MAX_TIMEOUT_MS:
            raise ConfigError(f"amqp_consumer_timeout_ms must be an integer in 0..{MAX_TIMEOUT_MS} (0: no limit), "
                              f"got {self.amqp_consumer_timeout_ms!r}")
        if not _is_int(self.load_shed_interval_ms) or not 0 <= self.load_shed_interval_ms <= 86_400_000:
            raise ConfigError(f"load_shed_interval_ms must be an integer in 0..86400000 (0: never), "
                              f"got {self.load_shed_interval_ms!r}")
        if not _is_int(self.load_shed_threshold_percent) or not 0 <= self.load_shed_threshold_percent <= 100:
            raise ConfigError(f"load_shed_threshold_percent must be an integer in 0..100, "
                              f"got {self.load_shed_threshold_percent!r}")
        for name in ("bundle_split_messages_per_s", "bundle_split_mbytes_per_s"):
            if not _is_int(getattr(self, name)) or not 0 <= getattr(self, name) <= 1_000_000_000:
                raise ConfigError(f"{name} must be an integer in 0..1000000000, got {getattr(self, name)!r}")
        if not _is_int(self.bundles_max_per_namespace) or not 16 <= self.bundles_max_per_namespace <= 4096:
            raise ConfigError(f"bundles_max_per_namespace must be an integer in 16..4096, "
                              f"got {self.bundles_max_per_namespace!r}")
        if self.role not in ROLES:
            raise ConfigError(f"role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if self.role != SERVING and self.storage.mode != REPLICATED:
            raise ConfigError(f"role {self.role} needs a cluster: [storage] mode = \"replicated\"")
        if not isinstance(self.audit_log, str):
            raise ConfigError(f"audit_log must be a file name (\"\" for none), got {self.audit_log!r}")
        if not _is_int(self.audit_refusal_interval_s) or not 1 <= self.audit_refusal_interval_s <= 86_400:
            raise ConfigError(f"audit_refusal_interval_s must be an integer in 1..86400, "
                              f"got {self.audit_refusal_interval_s!r}")
        if (self.admin_tls_cert is None) != (self.admin_tls_key is None):
            raise ConfigError("admin_tls_cert and admin_tls_key go together: give both or neither")
        for name in ("admin_tls_cert", "admin_tls_key"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"{name}: no such file {path!r}")
        self._check_tls()

    def _check_tls(self) -> None:
        for name in TLS_PORT_SETTINGS:
            port = getattr(self, name)
            if port is not None and (not _is_int(port) or not 0 <= port <= 65535):
                raise ConfigError(f"{name} must be an integer in 0..65535 (0 picks a free port), got {port!r}")
        if self.tls_client_auth not in CLIENT_AUTH:
            raise ConfigError(f"tls_client_auth must be one of {', '.join(CLIENT_AUTH)}, got {self.tls_client_auth!r}")
        if not _is_int(self.tls_handshake_timeout_ms) or not 100 <= self.tls_handshake_timeout_ms <= 600_000:
            raise ConfigError("tls_handshake_timeout_ms must be an integer in 100..600000, "
                              f"got {self.tls_handshake_timeout_ms!r}")
        if self.tls is None:
            return
        if self.tls_cert is None or self.tls_key is None:
            raise ConfigError("a TLS listener (kafka_tls_port, amqp_tls_port) needs tls_cert and tls_key")
        if self.tls_client_auth != "none" and self.tls_ca is None:
            raise ConfigError(f"tls_client_auth {self.tls_client_auth} needs tls_ca: the CA client certificates "
                              "are checked against")
        if self.tls_crl is not None and self.tls_client_auth == "none":
            raise ConfigError("tls_crl is for client certificates: it needs tls_client_auth requested or required")
        for name in ("tls_cert", "tls_key", "tls_ca", "tls_crl"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"{name}: no such file {path!r}")


def resolve_config(
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> GatewayConfig:
    """Merge the sources (later ones win) and validate the result.

    `env` defaults to os.environ; `flags` holds only the options given on the command line (None
    values count as not given). A relative data_dir is taken relative to the working directory.
    """
    env = os.environ if env is None else env
    settings: dict[str, Any] = {}
    storage_table: Mapping[str, Any] = {}
    kafka_settings: dict[str, Any] = {}
    users: tuple[UserConfig, ...] = ()
    replication: tuple[ReplicationConfig, ...] = ()
    metrics = MetricsConfig()
    if config_file is not None:
        file_settings, storage_table, kafka_table, users, metrics, replication = _read_toml(config_file)
        settings.update(file_settings)
        kafka_settings.update(kafka_table)
    settings.update(_settings_from_env(env))
    kafka_settings.update(_kafka_settings_from_env(env))
    storage_table = {**storage_table, **_storage_settings_from_env(env)}
    for name, value in (flags or {}).items():
        if value is None:
            continue
        kafka_name = name.removeprefix(KAFKA_FLAG_PREFIX)
        if name.startswith(KAFKA_FLAG_PREFIX) and kafka_name in KAFKA_SETTINGS:
            kafka_settings[kafka_name] = value
        else:
            settings[name] = value

    unknown_flags = set(settings) - set(ENV_VARS)
    if unknown_flags:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown_flags))}")
    if "data_dir" in settings:
        settings["data_dir"] = Path(settings["data_dir"]).expanduser()
    if isinstance(settings.get("log_level"), str):
        settings["log_level"] = settings["log_level"].lower()

    config = GatewayConfig(**settings, storage=_storage_config(storage_table, config_file),
                           kafka=KafkaConfig(**kafka_settings, given=frozenset(kafka_settings)),
                           users=users, metrics=metrics, replication=replication)
    # The READY line and the storage layer want one unambiguous directory, whatever the cwd later is.
    return dataclasses.replace(config, data_dir=Path(os.path.abspath(config.data_dir)))


def _read_toml(path: Path) -> tuple[dict[str, Any], Mapping[str, Any], dict[str, Any], tuple[UserConfig, ...],
                                    MetricsConfig, tuple[ReplicationConfig, ...]]:
    try:
        with path.open("rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc

    storage_table = document.pop(STORAGE_TABLE, {})
    if not isinstance(storage_table, dict):
        raise ConfigError(f"{path}: [{STORAGE_TABLE}] must be a table")
    kafka_table = document.pop(KAFKA_TABLE, {})
    if not isinstance(kafka_table, dict):
        raise ConfigError(f"{path}: [{KAFKA_TABLE}] must be a table")
    users = _read_users(document.pop(USERS_KEY, []), path)
    replication = _read_replication(document.pop(REPLICATION_KEY, []), path)
    metrics_table = document.pop(METRICS_TABLE, {})
    unknown_metrics = set(metrics_table) - {"per_topic", "max_series"} if isinstance(metrics_table, dict) else None
    if unknown_metrics is None or unknown_metrics:
        raise ConfigError(f"{path}: [{METRICS_TABLE}] must be a table of per_topic and max_series")
    try:
        metrics = MetricsConfig(**metrics_table)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    unknown = set(document) - set(ENV_VARS)
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(ENV_VARS)}, [{STORAGE_TABLE}], [{KAFKA_TABLE}], [{METRICS_TABLE}], [[{USERS_KEY}]], "
            f"[[{REPLICATION_KEY}]]"
        )
    for name, value in document.items():
        expected = int if name in INT_SETTINGS else str
        if isinstance(value, bool) or not isinstance(value, expected):
            raise ConfigError(f"{path}: {name} must be a {expected.__name__}, got {value!r}")
    return document, storage_table, _check_kafka_table(kafka_table, path), users, metrics, replication


def _tables(entries: Any, path: Path, name: str, known: set[str], required: tuple[str, ...],
            needs: str) -> list[dict]:
    """The tables of a `[[name]]` array, each with only `known` keys and every `required` one."""
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ConfigError(f"{path}: {name} must be an array of tables ([[{name}]])")
    for entry in entries:
        unknown = set(entry) - known
        if unknown:
            raise ConfigError(f"{path}: [[{name}]]: unknown key(s) {', '.join(sorted(unknown))}")
        if any(key not in entry for key in required):
            raise ConfigError(f"{path}: [[{name}]] needs {needs}")
    return entries


def _read_replication(entries: Any, path: Path) -> tuple[ReplicationConfig, ...]:
    links = []
    for entry in _tables(entries, path, "replication", {f.name for f in fields(ReplicationConfig)},
                         ("name", "remote"), "a name and a remote"):
        try:
            links.append(ReplicationConfig(**entry))
        except (ConfigError, TypeError) as exc:
            raise ConfigError(f"{path}: {exc}") from None
    if len({link.name for link in links}) != len(links):
        raise ConfigError(f"{path}: [[replication]] names must differ")
    return tuple(links)


def _read_users(entries: Any, path: Path) -> tuple[UserConfig, ...]:
    users = []
    for entry in _tables(entries, path, "users", {"name", "password", "tenant", "namespace", "tags", PERMISSIONS_KEY},
                         ("name", "password"), "a name and a password"):
        if PERMISSIONS_KEY in entry:
            entry = {**entry, PERMISSIONS_KEY: _read_permissions(entry[PERMISSIONS_KEY], path)}
        if isinstance(entry.get("tags"), list):
            entry = {**entry, "tags": tuple(entry["tags"])}
        try:
            users.append(UserConfig(**entry))
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return tuple(users)


def _read_permissions(entries: Any, path: Path) -> tuple[PermissionConfig, ...]:
    permissions = []
    for entry in _tables(entries, path, "users.permissions", {"vhost", "configure", "write", "read"},
                         ("vhost",), "a vhost"):
        try:
            permissions.append(PermissionConfig(**entry))
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return tuple(permissions)


def _check_kafka_table(table: Mapping[str, Any], path: Path) -> dict[str, Any]:
    where = f"{path}: [{KAFKA_TABLE}]"
    unknown = set(table) - set(KAFKA_SETTINGS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(KAFKA_SETTINGS)}")
    for name, value in table.items():
        if not _fits(value, KAFKA_SETTINGS[name]):
            raise ConfigError(f"{where}: {name} must be a {KAFKA_SETTINGS[name].__name__}, got {value!r}")
    return dict(table)


def _kafka_settings_from_env(env: Mapping[str, str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for name, var in KAFKA_ENV_VARS.items():
        raw = env.get(var, "").strip()
        if not raw:
            continue  # as above: empty means "not set"
        expected = KAFKA_SETTINGS[name]
        if expected is bool:
            if raw.lower() not in _TRUE_WORDS + _FALSE_WORDS:
                raise ConfigError(f"{var} must be true or false, got {raw!r}")
            settings[name] = raw.lower() in _TRUE_WORDS
        elif expected is int:
            try:
                settings[name] = int(raw)
            except ValueError:
                raise ConfigError(f"{var} must be an integer, got {raw!r}") from None
        else:
            settings[name] = raw
    return settings


def _settings_from_env(env: Mapping[str, str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for name, var in ENV_VARS.items():
        raw = env.get(var, "").strip()
        if not raw:
            continue  # an empty variable (FOO= in a compose file) means "not set"
        if name in INT_SETTINGS:
            try:
                settings[name] = int(raw)
            except ValueError:
                raise ConfigError(f"{var} must be an integer, got {raw!r}") from None
        else:
            settings[name] = raw
    return settings


# [storage] keys that may also come from the environment (a container's way to point at its cluster).
STORAGE_ENV_VARS = {
    "mode": "GATEWAY_STORAGE_MODE",
    "metadata": "GATEWAY_STORAGE_METADATA",
    "secret": "GATEWAY_STORAGE_SECRET",
}


def _storage_settings_from_env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: env[var].strip() for name, var in STORAGE_ENV_VARS.items() if env.get(var, "").strip()}


def resolve_storage_config(config_file: Path | None, env: Mapping[str, str] | None = None,
                           **overrides: Any) -> StorageConfig:
    """The [storage] settings alone (for `gateway bookie`): TOML < environment < `overrides`."""
    env = os.environ if env is None else env
    table: dict[str, Any] = {}
    if config_file is not None:
        table.update(_read_toml(config_file)[1])
    table.update(_storage_settings_from_env(env))
    table.update({name: value for name, value in overrides.items() if value is not None})
    table.pop("mode", None)   # a bookie serves replicated storage whatever the gateways' mode says
    return _storage_config(table, config_file)


def _storage_config(table: Mapping[str, Any], source: Path | None) -> StorageConfig:
    where = f"{source}: [{STORAGE_TABLE}]" if source else f"[{STORAGE_TABLE}]"
    field_types = typing.get_type_hints(StorageConfig)
    unknown = set(table) - set(field_types)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(field_types)}"
        )
    values = {}
    for name, value in table.items():
        expected = field_types[name]
        if not _fits(value, expected):
            raise ConfigError(f"{where}: {name} must be a {_type_name(expected)}, got {value!r}")
        values[name] = float(value) if expected is float else value
    try:
        return StorageConfig(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _fits(value: Any, expected: Any) -> bool:
    # TOML booleans are Python ints; never let `true` pass as a size or a count.
    if isinstance(value, bool):
        return expected is bool
    if expected is float:
        return isinstance(value, (int, float))  # TOML writes 2 for 2.0
    if isinstance(expected, type):
        return isinstance(value, expected)
    return True  # a type this check does not model: StorageConfig validates it itself


def _type_name(expected: Any) -> str:
    return expected.__name__ if isinstance(expected, type) else str(expected)

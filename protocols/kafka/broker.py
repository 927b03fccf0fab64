"""What every Kafka connection shares: the core, this broker's identity and settings."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from core.acl import Authorizer
from core.auth import Principal, User, UserStore
from core.connections import ClientConnection
from core.groups.coordinator import GroupCoordinator
from core.groups.settings import GroupSettings
from core.quotas import ClientQuotas
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT
from core.service import Core
from core.shares.coordinator import ShareCoordinator, ShareSettings
from core.tokens import TokenValidator
from core.transactions.coordinator import TransactionCoordinator, TransactionSettings
from protocols.kafka.consumer_offsets import ConsumerOffsetsLog
from protocols.kafka.share_sessions import ShareSessions
from protocols.kafka.codec.frames import RequestHeader
from protocols.kafka.machine.connection import Limits
from protocols.kafka.sasl.scram import ScramServer


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
    log_dir: str = ""                   # Kafka's log.dirs: what DescribeLogDirs reports (the data directory)
    sasl_mechanisms: tuple[str, ...] = ()   # empty: no authentication (PLAINTEXT listener)
    tls_port: int | None = None             # the advertised port of the TLS listener (SSL/SASL_SSL); None: none
    super_users: tuple[str, ...] = ()       # Kafka's super.users, e.g. ("User:admin",): never refused by ACLs
    group_initial_rebalance_delay_ms: int = 3000   # Kafka's group.initial.rebalance.delay.ms
    group_min_session_timeout_ms: int = 6_000      # Kafka's group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000  # Kafka's group.max.session.timeout.ms
    group_max_size: int = 0x7FFFFFFF               # Kafka's group.max.size
    group_consumer_session_timeout_ms: int = 45_000      # Kafka's group.consumer.session.timeout.ms
    group_consumer_heartbeat_interval_ms: int = 5_000    # Kafka's group.consumer.heartbeat.interval.ms
    offsets_retention_minutes: int = 10_080        # Kafka's offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000   # Kafka's offsets.retention.check.interval.ms
    transaction_max_timeout_ms: int = 900_000      # Kafka's transaction.max.timeout.ms
    # Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms
    transaction_cleanup_interval_ms: int = 10_000
    share: ShareSettings = field(default_factory=ShareSettings)   # share groups (KIP-932)
    given: frozenset[str] = frozenset()   # the [kafka] settings the configuration set (the rest are defaults)

PRODUCER_ID_COUNTER = "kafka-producer-id"   # one counter for idempotent and transactional producers


def group_settings(settings: KafkaSettings) -> GroupSettings:
    return GroupSettings(initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
                         min_session_timeout_ms=settings.group_min_session_timeout_ms,
                         max_session_timeout_ms=settings.group_max_session_timeout_ms,
                         max_size=settings.group_max_size,
                         consumer_session_timeout_ms=settings.group_consumer_session_timeout_ms,
                         consumer_heartbeat_interval_ms=settings.group_consumer_heartbeat_interval_ms,
                         offsets_retention_ms=settings.offsets_retention_minutes * 60_000,
                         offsets_retention_check_ms=settings.offsets_retention_check_interval_ms)


class KafkaBroker:
    def __init__(self, core: Core, settings: KafkaSettings, api_versions: list[dict[str, int]], *,
                 tokens: TokenValidator | None = None) -> None:
        self.core = core
        self.settings = settings
        self.api_versions = api_versions   # what ApiVersions answers: derived from the handler registry
        self.users = UserStore(core.metadata)
        self.tokens = tokens               # OAUTHBEARER's validator; None: no key set configured
        # ACLs are stored always but enforced only with SASL on (protocols/kafka/authorization.py).
        self.authorizer = Authorizer(core.metadata, super_users=settings.super_users)
        self.quotas = ClientQuotas(core.metadata, core.clock)
        self.consumer_offsets = ConsumerOffsetsLog(core)   # the __consumer_offsets topic
        self.groups = GroupCoordinator(core, group_settings(settings), observer=self.consumer_offsets)
        self.shares = ShareCoordinator(core, settings.share, other_kind=self.groups.exists)
        self.share_sessions = ShareSessions()
        self.groups.share_group_active = self.shares.active
        self.transactions = TransactionCoordinator(
            core, self.groups, lambda: core.metadata.next_id(PRODUCER_ID_COUNTER),
            TransactionSettings(max_timeout_ms=settings.transaction_max_timeout_ms,
                                cleanup_interval_ms=settings.transaction_cleanup_interval_ms))
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass   # no loop yet: the coordinator starts on its first request
        else:
            self.transactions.start()   # now, so transactions a crash left open get aborted
            self.groups.start()

    def close(self) -> None:
        """Stop background work (group timers, transaction cleanup); stored state needs no saving."""
        self.groups.close()
        self.transactions.close()
        self.consumer_offsets.close()
        self.authorizer.close()


@dataclass(slots=True)
class ConnectionSession:
    """What one connection has established: its SASL exchange and, once done, who it is.

    A connection logged in may log in again (KIP-368 re-authentication): SaslHandshake starts a new
    exchange while `principal` stays who it was until the exchange succeeds."""

    principal: Principal | None = None
    mechanism: str | None = None          # chosen by the latest SaslHandshake
    exchanging: bool = False              # a SaslHandshake started an exchange not finished yet
    logged_in_with: str | None = None     # the mechanism of the last successful exchange
    scram: ScramServer | None = None
    scram_user: User | None = None
    token_refused: str | None = None      # OAUTHBEARER: the error sent, awaiting the client's %x01
    stored_user: bool = True              # False: a token's user the store lacks (nothing to watch)
    # When the login expires (time.monotonic()): a request other than re-authentication after it
    # closes the connection, as Kafka does (KIP-368); None: never
    expires_at: float | None = None
    close_after_response: bool = False   # a failed login: answer, wait a little, close
    client_host: str | None = None       # the peer's IP address, for ACL host matching; None: unknown
    client: ClientConnection | None = None   # the connection as the admin API lists it
    tls: bool = False                    # came in on the TLS listener: told that listener's address
    # The listener takes client certificates as logins (TLS, client auth, no SASL): ACLs apply, to
    # the certificate's principal or, without a certificate, to no principal
    certificate_login: bool = False

    @property
    def authenticated(self) -> bool:
        return self.principal is not None


@dataclass(slots=True)
class RequestContext:
    """One request as a handler sees it."""

    broker: KafkaBroker
    header: RequestHeader
    session: ConnectionSession = field(default_factory=ConnectionSession)

    @property
    def tenant(self) -> str:
        principal = self.session.principal
        return principal.tenant if principal is not None else DEFAULT_TENANT

    @property
    def namespace(self) -> str:
        principal = self.session.principal
        return principal.namespace if principal is not None else DEFAULT_NAMESPACE

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def core(self) -> Core:
        return self.broker.core

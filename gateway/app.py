"""The `gateway serve` process: start storage, core and listeners, announce READY, stop on a signal.

Lifecycle: STARTING -> RUNNING -> STOPPING -> STOPPED. The first SIGTERM/SIGINT starts an orderly
shutdown (while starting: once the current start-up step is done, without announcing READY); a
second one exits at once with code 1.
"""

from __future__ import annotations

import asyncio
import enum
import importlib.metadata
import json
import logging
import os
import signal
import socket
import sys
import uuid
from dataclasses import replace
from collections.abc import Awaitable, Callable
from typing import Protocol, TextIO

from core.auth import Permission, UserStore
from core.cluster.broker_cluster import BrokerCluster
from core.cluster.members import SERVING, BrokerInfo
from core.cluster.peers import PeerService
from core.cluster.splits import SplitLimits
from core.queues.ack_timeout import DEFAULT_TIMEOUT_MS
from core.service import Core
from core.shares.coordinator import ShareSettings
from core.tokens import TokenSettings, TokenValidator
from gateway.admin import AdminContext, AdminServer, GatewayInfo, create_admin_app
from gateway.config import GatewayConfig, KafkaConfig
from gateway.data_dir import SESSION_FILE, DataDirInUse, lock_data_dir
from gateway.listeners import ConnectionHandler, Listener, bind_socket, format_address, share_close
from gateway.tls import ServerTls, TlsConfigError
from gateway.metrics import GatewayMetrics
from gateway.queue_metrics import QueueCollector
from gateway.runtime import event_loop_factory, tune_gc
from gateway.session_metrics import SessionCollector
from protocols.amqp import server as amqp_server
from protocols.amqp.server import AmqpSettings
from protocols.pulsar import server as pulsar_server
from protocols.pulsar.server import PulsarSettings
from protocols.kafka import server as kafka_server
from protocols.kafka.broker import KafkaSettings
from protocols.kafka.mirror.client import LinkSecurity, RemoteCluster
from protocols.kafka.principal_rules import parse_rules
from protocols.kafka.mirror.replicator import Replicator
from protocols.kafka.machine.connection import Limits
from protocols.mqtt import server as mqtt_server
from storage.config import REPLICATED
from storage.embedded import EmbeddedStorage
from storage.api import MetadataStore
from storage.replicated import ReplicatedStorage

log = logging.getLogger("gateway")

READY_PREFIX = "GATEWAY READY "
BROKER_ID_FILE = "broker-id"
BROKER_ID_COUNTER = "broker-id"
SHUTDOWN_GRACE_S = 5.0   # how long open connections get to finish their in-flight work
CLOSE_TIMEOUT_S = 10.0   # bound on core.close() and storage.close(), so a hang cannot stall the exit
EXIT_OK = 0
EXIT_FAILURE = 1

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
TLS_LISTENERS = ("kafka_tls", "amqp_tls")   # each beside the plaintext listener of its protocol


class State(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


_ALLOWED_TRANSITIONS = {
    State.STARTING: {State.RUNNING, State.STOPPING},
    State.RUNNING: {State.STOPPING},
    State.STOPPING: {State.STOPPED},
    State.STOPPED: set(),
}


class _Server(Protocol):
    """What shutdown needs from a client-facing server (protocol listeners and the admin API)."""

    name: str
    address: str  # "host:port" it listens on

    def stop_accepting(self) -> None: ...

    async def close_connections(self, grace_s: float) -> None: ...


class _StopRequested(Exception):
    """A signal arrived while starting: abandon the remaining start-up steps."""


class StartupError(Exception):
    """An expected start-up failure (e.g. a port in use); its message says it all, no traceback."""


def run(config: GatewayConfig) -> int:
    """Run the gateway until it is told to stop; returns the process exit code."""
    tune_gc()
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        return runner.run(Gateway(config).run())


def protocol_handlers(core: Core, sockets: dict[str, socket.socket],
                      kafka_config: KafkaConfig | None = None, *, log_dir: str = "", node_id: int = 0,
                      rack: str | None = None, amqp_consumer_timeout_ms: int = DEFAULT_TIMEOUT_MS,
                      tls_client_auth: str = "none") -> dict[str, ConnectionHandler]:
    """The connection handler of each protocol listener, each built on the core: "kafka" and
    "amqp", and "kafka_tls" and "amqp_tls" where `sockets` has those (over the same brokers)."""
    kafka_config = kafka_config or KafkaConfig()
    host, port = sockets["kafka"].getsockname()[:2]
    tls_port = sockets["kafka_tls"].getsockname()[1] if "kafka_tls" in sockets else None
    tokens = token_validator(kafka_config)
    kafka = kafka_server.make_broker(core, kafka_settings(kafka_config, host, port, log_dir=log_dir,
                                                          node_id=node_id, rack=rack, tls_port=tls_port),
                                     tokens=tokens)
    amqp = amqp_server.make_broker(core, AmqpSettings(consumer_timeout_ms=amqp_consumer_timeout_ms or None),
                                   tokens=tokens)
    # MQTT shares AMQP's exchanges and queues: its topics route through the namespace's amq.topic.
    mqtt = mqtt_server.make_broker(core, amqp.queues)
    handlers = {"kafka": kafka_server.connection_handler(kafka), "amqp": amqp_server.connection_handler(amqp),
                "mqtt": mqtt_server.connection_handler(mqtt)}
    if "pulsar" in sockets:
        pulsar_host, pulsar_port = sockets["pulsar"].getsockname()[:2]
        # lookups name this broker as the Kafka listener does: its advertised host, else the bind address
        pulsar = pulsar_server.make_broker(core, PulsarSettings(
            host=advertised_host(kafka_config, pulsar_host), port=pulsar_port))
        handlers["pulsar"] = pulsar_server.connection_handler(pulsar)
    if "kafka_tls" in sockets:
        # SSL: the client certificate is the login; SASL_SSL: SASL is, as on the plaintext port
        certificates = tls_client_auth != "none" and not kafka_config.mechanisms
        rules = parse_rules(kafka_config.ssl_principal_mapping_rules) if certificates else None
        handlers["kafka_tls"] = kafka_server.connection_handler(kafka, kafka_server.TlsListener(rules))
        share_close(handlers["kafka"], handlers["kafka_tls"])
    if "amqp_tls" in sockets:
        handlers["amqp_tls"] = amqp_server.connection_handler(amqp)
        share_close(handlers["amqp"], handlers["amqp_tls"])
    return handlers


def token_validator(config: KafkaConfig) -> TokenValidator | None:
    """One validator (one cached key set) for Kafka's OAUTHBEARER and AMQP's token passwords."""
    if not config.tokens_enabled:
        return None
    return TokenValidator(TokenSettings(jwks_url=config.oauth_jwks_url, jwks_file=config.oauth_jwks_file,
                                        issuer=config.oauth_issuer, audience=config.oauth_audience,
                                        principal_claim=config.oauth_principal_claim,
                                        tenant_claim=config.oauth_tenant_claim,
                                        clock_skew_s=config.oauth_clock_skew_s))


_WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def kafka_settings(config: KafkaConfig, bind_host: str, port: int, *, log_dir: str = "", node_id: int = 0,
                   rack: str | None = None, tls_port: int | None = None) -> KafkaSettings:
    """The Kafka broker's settings: the [kafka] config, advertising the bind address unless told otherwise."""
    host = advertised_host(config, bind_host)
    if host in _WILDCARD_HOSTS:
        # Clients would be told to connect to "0.0.0.0"; Kafka refuses such a listener outright.
        log.warning("Kafka listener bound to %r advertises that address; set kafka.advertised_host", host)
    return KafkaSettings(host=host, port=config.advertised_port or port, node_id=node_id, rack=rack, cluster_id=config.cluster_id,
                         auto_create_topics=config.auto_create_topics,
                         default_partitions=config.default_partitions,
                         limits=Limits(max_frame_bytes=config.max_frame_bytes), log_dir=log_dir,
                         sasl_mechanisms=config.mechanisms, super_users=config.super_user_list, tls_port=tls_port,
                         group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                         group_min_session_timeout_ms=config.group_min_session_timeout_ms,
                         group_max_session_timeout_ms=config.group_max_session_timeout_ms,
                         group_max_size=config.group_max_size,
                         group_consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
                         group_consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
                         offsets_retention_minutes=config.offsets_retention_minutes,
                         offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
                         transaction_cleanup_interval_ms=config.transaction_cleanup_interval_ms,
                         share=ShareSettings(record_lock_duration_ms=config.group_share_record_lock_duration_ms,
                                             delivery_count_limit=config.group_share_delivery_count_limit,
                                             session_timeout_ms=config.group_share_session_timeout_ms,
                                             heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
                                             auto_offset_reset=config.share_auto_offset_reset),
                         given=config.given)


def advertised_host(config: KafkaConfig, bind_host: str) -> str:
    return config.advertised_host or bind_host


async def broker_id(config: GatewayConfig, metadata: MetadataStore) -> int:
    """The configured id, else the one allocated at this data directory's first start."""
    if config.broker_id is not None:
        return config.broker_id
    path = config.data_dir / BROKER_ID_FILE
    try:
        return int(path.read_text())
    except FileNotFoundError:
        pass
    # Above Kafka's reserved.broker.max.id (1000), as Kafka's generated ids are.
    allocated = 1001 + await metadata.next_id(BROKER_ID_COUNTER)
    path.write_text(f"{allocated}\n")
    return allocated


class Gateway:
    def __init__(self, config: GatewayConfig, *, stdout: TextIO | None = None) -> None:
        self.config = config
        self.state = State.STARTING
        self.version = _installed_version()
        self.metrics = GatewayMetrics(self.version)
        self._stdout = stdout if stdout is not None else sys.stdout
        self._stop_requested = asyncio.Event()
        self._storage: EmbeddedStorage | ReplicatedStorage | None = None
        self._core: Core | None = None
        self._cluster: BrokerCluster | None = None
        self._peers: PeerService | None = None
        self._broker_id = 0
        self._unserved_sockets: dict[str, socket.socket] = {}  # bound, not yet owned by a server
        self._servers: list[_Server] = []
        self._replicators: list[Replicator] = []
        self._data_dir_lock: int | None = None
        self._tls: ServerTls | None = None   # the TLS listeners' certificates, re-read on SIGHUP

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_stop_signal, sig)
        loop.add_signal_handler(signal.SIGHUP, self._reload_tls)
        log.info("starting gateway %s (pid %d), data dir %s", self.version, os.getpid(), self.config.data_dir)
        log.debug("configuration: %s", self.config)
        try:
            await self._start()
        except _StopRequested:
            log.info("stop requested during start-up")
            return await self._shut_down()
        except StartupError as exc:
            log.error("start-up failed: %s", exc)
            await self._shut_down()
            return EXIT_FAILURE
        except Exception:
            log.exception("start-up failed")
            await self._shut_down()
            return EXIT_FAILURE
        self._transition(State.RUNNING)
        self.metrics.up.set(1)
        self._announce_ready()
        await self._stop_requested.wait()
        return await self._shut_down()

    # --- start-up ---------------------------------------------------------------------------------

    async def _start(self) -> None:
        config = self.config
        # Bind first: a port conflict is reported before the data directory is touched.
        ports = [("kafka", config.kafka_port), ("amqp", config.amqp_port), ("mqtt", config.mqtt_port),
                 ("pulsar", config.pulsar_port), ("admin", config.admin_port)]
        if config.tls is not None:
            try:
                self._tls = ServerTls(config.tls)
            except TlsConfigError as exc:
                raise StartupError(str(exc)) from None
            ports += [(name, getattr(config, f"{name}_port")) for name in TLS_LISTENERS
                      if getattr(config, f"{name}_port") is not None]
        if config.storage.mode == REPLICATED:
            ports.append(("peer", config.peer_port))
        for name, port in ports:
            try:
                self._unserved_sockets[name] = bind_socket(config.host, port)
            except OSError as exc:
                raise StartupError(f"cannot bind the {name} listener to {config.host}:{port}: {exc.strerror or exc}") from exc
        self._check_stop()

        try:
            self._data_dir_lock = lock_data_dir(config.data_dir)
        except DataDirInUse as exc:
            raise StartupError(str(exc)) from None
        if config.storage.mode == REPLICATED:
            # A read-only broker writes nothing: not even re-replicated copies (the auditor's work).
            storage = config.storage if config.role == SERVING else replace(config.storage, auditor=False)
            self._storage = await ReplicatedStorage.open(storage, session_file=config.data_dir / SESSION_FILE)
            if self._storage.auditor is not None:
                self.metrics.track_auditor(self._storage.auditor.stats)
            self.metrics.registry.register(SessionCollector(self._storage.metadata))
        else:
            self._storage = await EmbeddedStorage.open(config.data_dir, config.storage)
            self.metrics.track_journal(self._storage.bookie.flush_counts)
        self._check_stop()

        if config.storage.mode == REPLICATED:
            self._broker_id = await broker_id(config, self._storage.metadata)
            shed_s = config.load_shed_interval_ms / 1000
            self._cluster = BrokerCluster(self._storage.metadata, self._local_broker(),
                                          shed_interval_s=shed_s, report_interval_s=min(5.0, shed_s / 3 or 5.0),
                                          shed_threshold=config.load_shed_threshold_percent / 100,
                                          split_limits=SplitLimits(config.bundle_split_messages_per_s,
                                                                   config.bundle_split_mbytes_per_s * float(1 << 20),
                                                                   config.bundles_max_per_namespace))
            node_tls = config.storage.node_tls
            self._peers = PeerService(config.storage.secret.encode(),
                                      tls=None if node_tls is None else (node_tls.server, node_tls.client))
        self._core = Core(self._storage.metadata, self._storage.logs, cluster=self._cluster,
                          retention_check_s=config.retention_check_interval_ms / 1000,
                          delayed_memory_keys=config.delayed_memory_keys, peers=self._peers)
        await self._core.start()
        if config.audit_log:   # admin changes and refusals as JSON lines (core/audit.py); relative: to data_dir
            self._core.audit.open(config.data_dir / config.audit_log,
                                  refusal_interval_s=config.audit_refusal_interval_s)
        if self._cluster is not None:
            self._cluster.traffic = self._core.bundle_traffic
            self._cluster.connections = lambda: len(self._core.connections.all())
        users = UserStore(self._core.metadata)
        for user in config.users:   # the config file's logins, (re)stored with fresh salts at every start
            permissions = None if user.permissions is None else [
                Permission(*p.tenant_namespace, p.configure, p.write, p.read) for p in user.permissions]
            await users.put_user(user.name, user.password, tenant=user.tenant, namespace=user.namespace,
                                 permissions=permissions, tags=user.tags)
            await self._core.registry.ensure_namespace(user.tenant, user.namespace)
            for permission in permissions or ():
                await self._core.registry.ensure_namespace(permission.tenant, permission.namespace)
        self._check_stop()

        handlers = protocol_handlers(self._core, self._unserved_sockets, config.kafka, log_dir=str(config.data_dir),
                                     node_id=self._broker_id, rack=config.rack,
                                     amqp_consumer_timeout_ms=config.amqp_consumer_timeout_ms,
                                     tls_client_auth=config.tls_client_auth)
        listeners = [Listener(name, self._unserved_sockets.pop(name), handlers[name],
                              tls=self._tls if name in TLS_LISTENERS else None)
                     for name in ("kafka", "amqp", "mqtt", "pulsar", *TLS_LISTENERS) if name in handlers]
        self._servers.extend(listeners)
        self.metrics.track_listeners(listeners)
        self.metrics.track_namespaces(self._core, per_topic=config.metrics.per_topic,
                                      max_series=config.metrics.max_series)
        admin_socket = self._unserved_sockets.pop("admin")
        info = GatewayInfo(
            version=self.version,
            listeners={**{l.name: l.address for l in listeners}, "admin": format_address(admin_socket)},
            data_dir=config.data_dir,
        )
        kafka_broker, amqp_broker = handlers["kafka"].broker, handlers["amqp"].broker
        self.metrics.registry.register(QueueCollector(amqp_broker.queues, max_series=config.metrics.max_series))
        self._core.tenancy.on_namespace_deleted(amqp_broker.queues.forget)
        context = AdminContext(self._core, kafka=kafka_broker, amqp=amqp_broker)
        admin = AdminServer(admin_socket, create_admin_app(info, self.metrics, context), SHUTDOWN_GRACE_S,
                            tls=(config.admin_tls_cert, config.admin_tls_key) if config.admin_tls_cert else None)
        self._servers.append(admin)
        for server in (*listeners, admin):
            await server.start()
        if self._cluster is not None:   # listening first: the registration tells clients to come
            await self._peers.start(self._unserved_sockets.pop("peer"))
            await self._cluster.start()
        for link in config.replication:
            tenant, namespace = link.namespace.split("/")
            security = LinkSecurity(tls=link.tls, ca_file=link.ssl_ca_file, check_hostname=link.ssl_check_hostname,
                                    sasl_mechanism=link.sasl_mechanism if link.sasl else None,
                                    username=link.sasl_username, password=link.sasl_password,
                                    certificate_file=link.ssl_certificate_file, key_file=link.ssl_key_file)
            replicator = Replicator(self._core, link.name, RemoteCluster(link.bootstrap, security=security), tenant,
                                    namespace, link.topics, groups=kafka_broker.groups,
                                    sync_configs=link.sync_topic_configs,
                                    acls=kafka_broker.authorizer if link.sync_topic_acls else None)
            replicator.start()
            self._replicators.append(replicator)
        self.metrics.track_replication(self._replicators)
        self._check_stop()

    def _local_broker(self) -> BrokerInfo:
        config = self.config
        host = advertised_host(config.kafka, config.host)
        kafka_port = config.kafka.advertised_port or self._unserved_sockets["kafka"].getsockname()[1]
        amqp_port = self._unserved_sockets["amqp"].getsockname()[1]
        peer_port = self._unserved_sockets["peer"].getsockname()[1]
        kafka_tls = self._unserved_sockets.get("kafka_tls")
        pulsar_port = self._unserved_sockets["pulsar"].getsockname()[1]
        return BrokerInfo(self._broker_id, host, kafka_port, f"{host}:{amqp_port}", config.rack, config.role,
                          instance=uuid.uuid4().hex, peer=f"{host}:{peer_port}",
                          kafka_tls_port=kafka_tls.getsockname()[1] if kafka_tls is not None else None,
                          pulsar=f"{host}:{pulsar_port}")

    def _reload_tls(self) -> None:
        if self._tls is None:
            log.info("received SIGHUP; no TLS listener to reload")
            return
        log.info("received SIGHUP; reloading the TLS certificates")
        self._tls.reload()

    def _check_stop(self) -> None:
        if self._stop_requested.is_set():
            raise _StopRequested

    def _announce_ready(self) -> None:
        addresses = {server.name: server.address for server in self._servers}
        payload = {
            "kafka": addresses["kafka"],
            "amqp": addresses["amqp"],
            "mqtt": addresses["mqtt"],
            "pulsar": addresses["pulsar"],
            "admin": addresses["admin"],
            **{name: addresses[name] for name in TLS_LISTENERS if name in addresses},
            "data_dir": str(self.config.data_dir),
            "pid": os.getpid(),
        }
        if self._cluster is not None:
            payload["broker_id"] = self._broker_id
        # The single line on stdout that launchers and tests wait for; everything else is on stderr.
        self._stdout.write(READY_PREFIX + json.dumps(payload) + "\n")
        self._stdout.flush()
        log.info("gateway ready: kafka %s, amqp %s, admin %s", payload["kafka"], payload["amqp"], payload["admin"])

    # --- shutdown ---------------------------------------------------------------------------------

    def _on_stop_signal(self, sig: signal.Signals) -> None:
        if self._stop_requested.is_set():
            log.error("received %s while stopping; exiting immediately", sig.name)
            logging.shutdown()  # flush stderr before the hard exit
            os._exit(EXIT_FAILURE)
        log.info("received %s; shutting down", sig.name)
        self._stop_requested.set()

    async def _shut_down(self) -> int:
        self._stop_requested.set()  # from here on, any signal means "exit now"
        self._transition(State.STOPPING)
        self.metrics.up.set(0)
        for server in self._servers:
            server.stop_accepting()
        for sock in self._unserved_sockets.values():
            sock.close()
        self._unserved_sockets.clear()
        outcomes = await asyncio.gather(
            *(server.close_connections(SHUTDOWN_GRACE_S) for server in self._servers), return_exceptions=True
        )
        for server, outcome in zip(self._servers, outcomes):
            if isinstance(outcome, BaseException):
                log.error("closing the %s connections failed", server.name, exc_info=outcome)

        clean = True
        for replicator in self._replicators:
            clean &= await _close_step(f"replication {replicator.name}", replicator.close)
        if self._cluster is not None:   # hand the bundles over now rather than after the session expires
            clean &= await _close_step("cluster membership", self._cluster.close)
        if self._core is not None:
            clean &= await _close_step("core", self._core.close)
        if self._peers is not None:
            clean &= await _close_step("peer links", self._peers.close)
        if self._storage is not None:
            clean &= await _close_step("storage", self._storage.close)
        if self._data_dir_lock is not None:
            os.close(self._data_dir_lock)
        self._transition(State.STOPPED)
        log.info("gateway stopped%s", "" if clean else " (with errors)")
        return EXIT_OK if clean else EXIT_FAILURE

    def _transition(self, new_state: State) -> None:
        if new_state not in _ALLOWED_TRANSITIONS[self.state]:
            raise RuntimeError(f"invalid gateway state transition {self.state.name} -> {new_state.name}")
        log.debug("state %s -> %s", self.state.name, new_state.name)
        self.state = new_state


async def _close_step(what: str, close: Callable[[], Awaitable[None]]) -> bool:
    try:
        await asyncio.wait_for(close(), CLOSE_TIMEOUT_S)
    except TimeoutError:
        log.error("closing %s took longer than %.0fs; giving up on it", what, CLOSE_TIMEOUT_S)
        return False
    except Exception:
        log.exception("closing %s failed", what)
        return False
    return True


def _installed_version() -> str:
    try:
        return importlib.metadata.version("gateway")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"  # running from a source tree that was never installed

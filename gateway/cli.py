"""The `gateway` command line (console script `gateway`, also `python -m gateway`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gateway.config import ConfigError, resolve_config, resolve_storage_config

# Usage errors exit with 2 (as click does); start-up and shutdown failures with 1.
EXIT_CONFIG_ERROR = 2

cli = typer.Typer(
    name="gateway",
    help="A message gateway speaking the Kafka wire protocol and AMQP 0.9.1 over one core.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,  # plain tracebacks: they end up in log files, not terminals
)


@cli.callback()
def _group() -> None:
    """Keep `serve` a subcommand even while it is the only one."""


# Every option defaults to None, meaning "not given", so gateway.config can apply the precedence
# defaults < TOML < environment < flags; the real defaults live in GatewayConfig.
@cli.command()
def serve(
    config: Annotated[Path | None, typer.Option("--config", help="TOML config file.", dir_okay=False)] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Data directory.", show_default="./data")] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on.", show_default="127.0.0.1")] = None,
    kafka_port: Annotated[int | None, typer.Option(help="Kafka port; 0 picks a free one.", show_default="9092")] = None,
    amqp_port: Annotated[int | None, typer.Option(help="AMQP port; 0 picks a free one.", show_default="5672")] = None,
    mqtt_port: Annotated[int | None, typer.Option(help="MQTT port; 0 picks a free one.", show_default="1883")] = None,
    pulsar_port: Annotated[
        int | None, typer.Option(help="Pulsar binary protocol port; 0 picks a free one.", show_default="6650")
    ] = None,
    admin_port: Annotated[int | None, typer.Option(help="Admin HTTP port; 0 picks a free one.", show_default="8080")] = None,
    peer_port: Annotated[
        int | None, typer.Option(help="In a cluster, the port of this broker's links with the other brokers; 0 picks "
                                      "a free one (registered with the broker).", show_default="0")
    ] = None,
    log_level: Annotated[
        str | None, typer.Option(help="critical, error, warning, info or debug.", show_default="info")
    ] = None,
    broker_id: Annotated[
        int | None, typer.Option(help="This broker's id in a cluster (Kafka's broker.id).",
                                 show_default="allocated at the first start")
    ] = None,
    rack: Annotated[str | None, typer.Option(help="This broker's rack (Kafka's broker.rack).")] = None,
    role: Annotated[
        str | None, typer.Option(help="In a cluster: serving, or read-only (serves Kafka fetches of any partition "
                                      "from the shared storage, owns and writes nothing).", show_default="serving")
    ] = None,
    retention_check_interval_ms: Annotated[
        int | None, typer.Option(help="How often retention and namespaces' backlog quotas are enforced.",
                                 show_default="60000")
    ] = None,
    amqp_consumer_timeout_ms: Annotated[
        int | None, typer.Option(help="How long an AMQP delivery may stay unacknowledged before its channel is "
                                      "closed (RabbitMQ's consumer_timeout); 0: no limit.", show_default="1800000")
    ] = None,
    load_shed_interval_ms: Annotated[
        int | None, typer.Option(help="In a cluster, how often the leader may move one bundle off a busy broker; "
                                      "0: never.", show_default="60000")
    ] = None,
    load_shed_threshold_percent: Annotated[
        int | None, typer.Option(help="How far (percentage points) above the mean share of the load a broker "
                                      "must be to shed.", show_default="10")
    ] = None,
    bundle_split_messages_per_s: Annotated[
        int | None, typer.Option(help="In a cluster, split a bundle taking more messages per second than this; "
                                      "0: never.", show_default="30000")
    ] = None,
    bundle_split_mbytes_per_s: Annotated[
        int | None, typer.Option(help="... or more megabytes per second than this.", show_default="100")
    ] = None,
    bundles_max_per_namespace: Annotated[
        int | None, typer.Option(help="The most bundles a namespace is split into.", show_default="128")
    ] = None,
    admin_tls_cert: Annotated[
        str | None, typer.Option(help="PEM certificate (chain) for HTTPS on the admin port; with --admin-tls-key.")
    ] = None,
    admin_tls_key: Annotated[str | None, typer.Option(help="PEM private key of --admin-tls-cert.")] = None,
    kafka_tls_port: Annotated[
        int | None, typer.Option(help="Kafka TLS port (SSL; SASL_SSL with --kafka-sasl-mechanisms); 0 picks a "
                                      "free one.", show_default="none")
    ] = None,
    amqp_tls_port: Annotated[
        int | None, typer.Option(help="AMQP TLS port (amqps); 0 picks a free one.", show_default="none")
    ] = None,
    tls_cert: Annotated[
        str | None, typer.Option(help="PEM certificate (chain) of the TLS ports; re-read on SIGHUP.")
    ] = None,
    tls_key: Annotated[str | None, typer.Option(help="PEM private key of --tls-cert.")] = None,
    tls_ca: Annotated[
        str | None, typer.Option(help="PEM CA bundle that client certificates must chain to.")
    ] = None,
    tls_client_auth: Annotated[
        str | None, typer.Option(help="Client certificates on the TLS ports: none, requested or required.",
                                 show_default="none")
    ] = None,
    tls_crl: Annotated[
        str | None, typer.Option(help="PEM revocation list of the client CA: revoked certificates are refused; "
                                      "re-read on SIGHUP.")
    ] = None,
    tls_handshake_timeout_ms: Annotated[
        int | None, typer.Option(help="A client not through its TLS handshake by then is dropped.",
                                 show_default="10000")
    ] = None,
    kafka_auto_create_topics: Annotated[
        bool | None,
        typer.Option("--kafka-auto-create-topics/--no-kafka-auto-create-topics",
                     help="Create unknown topics on Metadata requests.", show_default="on"),
    ] = None,
    kafka_default_partitions: Annotated[
        int | None, typer.Option(help="Partitions of an auto-created topic.", show_default="1")
    ] = None,
    kafka_advertised_host: Annotated[
        str | None, typer.Option(help="Host Kafka clients are told to connect to.", show_default="the --host")
    ] = None,
    kafka_advertised_port: Annotated[
        int | None, typer.Option(help="Port Kafka clients are told to connect to (behind a proxy or NAT).",
                                 show_default="the bound --kafka-port")
    ] = None,
    kafka_cluster_id: Annotated[
        str | None, typer.Option(help="Cluster id reported in Metadata.", show_default="gateway-cluster")
    ] = None,
    kafka_max_frame_bytes: Annotated[
        int | None, typer.Option(help="Largest Kafka request accepted; bigger closes the connection.",
                                 show_default="104857600")
    ] = None,
    kafka_sasl_mechanisms: Annotated[
        str | None, typer.Option(help="SASL mechanisms required of Kafka clients, e.g. PLAIN,SCRAM-SHA-256; "
                                      "empty: no authentication.", show_default="")
    ] = None,
    kafka_super_users: Annotated[
        str | None, typer.Option(help="Principals never refused by ACLs, e.g. User:admin.", show_default="")
    ] = None,
    kafka_group_initial_rebalance_delay_ms: Annotated[
        int | None, typer.Option(help="How long a new consumer group waits for more members before its first "
                                      "assignment (Kafka's group.initial.rebalance.delay.ms).", show_default="3000")
    ] = None,
    kafka_group_min_session_timeout_ms: Annotated[
        int | None, typer.Option(help="Shortest session timeout a group member may ask for "
                                      "(Kafka's group.min.session.timeout.ms).", show_default="6000")
    ] = None,
    kafka_group_max_session_timeout_ms: Annotated[
        int | None, typer.Option(help="Longest session timeout a group member may ask for "
                                      "(Kafka's group.max.session.timeout.ms).", show_default="1800000")
    ] = None,
    kafka_group_max_size: Annotated[
        int | None, typer.Option(help="Most members of one consumer group (Kafka's group.max.size).",
                                 show_default="2147483647")
    ] = None,
    kafka_group_consumer_session_timeout_ms: Annotated[
        int | None, typer.Option(help="Session timeout of consumer-protocol (KIP-848) group members "
                                      "(Kafka's group.consumer.session.timeout.ms).", show_default="45000")
    ] = None,
    kafka_group_consumer_heartbeat_interval_ms: Annotated[
        int | None, typer.Option(help="Heartbeat interval told to consumer-protocol (KIP-848) group members "
                                      "(Kafka's group.consumer.heartbeat.interval.ms).", show_default="5000")
    ] = None,
    kafka_offsets_retention_minutes: Annotated[
        int | None, typer.Option(help="Committed offsets of a group empty this long are deleted "
                                      "(Kafka's offsets.retention.minutes).", show_default="10080")
    ] = None,
    kafka_offsets_retention_check_interval_ms: Annotated[
        int | None, typer.Option(help="How often expired committed offsets are looked for "
                                      "(Kafka's offsets.retention.check.interval.ms).", show_default="600000")
    ] = None,
    kafka_group_share_record_lock_duration_ms: Annotated[
        int | None, typer.Option(help="How long a record a share group member fetched stays locked to it "
                                      "(Kafka's group.share.record.lock.duration.ms).", show_default="30000")
    ] = None,
    kafka_group_share_delivery_count_limit: Annotated[
        int | None, typer.Option(help="Deliveries of a record to share group members before it is archived "
                                      "(Kafka's group.share.delivery.count.limit).", show_default="5")
    ] = None,
    kafka_group_share_session_timeout_ms: Annotated[
        int | None, typer.Option(help="Session timeout of share group members "
                                      "(Kafka's group.share.session.timeout.ms).", show_default="45000")
    ] = None,
    kafka_group_share_heartbeat_interval_ms: Annotated[
        int | None, typer.Option(help="Heartbeat interval told to share group members "
                                      "(Kafka's group.share.heartbeat.interval.ms).", show_default="5000")
    ] = None,
    kafka_ssl_principal_mapping_rules: Annotated[
        str | None, typer.Option(help="How a client certificate's DN maps to its Kafka principal "
                                      "(Kafka's ssl.principal.mapping.rules); DEFAULT: its CN.", show_default="DEFAULT")
    ] = None,
    kafka_share_auto_offset_reset: Annotated[
        str | None, typer.Option(help="Where a share group starts on a partition it never read: latest or "
                                      "earliest (Kafka's share.auto.offset.reset).", show_default="latest")
    ] = None,
    # Bearer tokens: Kafka's OAUTHBEARER (list it in --kafka-sasl-mechanisms) and AMQP passwords
    kafka_oauth_jwks_url: Annotated[
        str | None, typer.Option(help="URL of the token issuer's key set (JWKS); enables bearer tokens.")
    ] = None,
    kafka_oauth_jwks_file: Annotated[
        str | None, typer.Option(help="The token issuer's key set (JWKS) as a file, instead of a URL.")
    ] = None,
    kafka_oauth_issuer: Annotated[
        str | None, typer.Option(help="The \"iss\" every token must carry; empty: not checked.", show_default="")
    ] = None,
    kafka_oauth_audience: Annotated[
        str | None, typer.Option(help="The \"aud\" every token must carry; empty: not checked.", show_default="")
    ] = None,
    kafka_oauth_principal_claim: Annotated[
        str | None, typer.Option(help="The claim naming the user.", show_default="sub")
    ] = None,
    kafka_oauth_tenant_claim: Annotated[
        str | None, typer.Option(help="The claim naming the tenant (or tenant/namespace) of a user the store lacks; "
                                      "empty: the default tenant.", show_default="")
    ] = None,
    kafka_oauth_clock_skew_s: Annotated[
        int | None, typer.Option(help="Seconds of clock difference allowed in token times.", show_default="30")
    ] = None,
) -> None:
    """Serve Kafka, AMQP, MQTT and the admin API until SIGTERM or SIGINT.

    Settings come from defaults < the --config TOML file < GATEWAY_DATA_DIR, GATEWAY_HOST, GATEWAY_KAFKA_PORT, GATEWAY_AMQP_PORT, GATEWAY_PULSAR_PORT, GATEWAY_ADMIN_PORT, GATEWAY_LOG_LEVEL, GATEWAY_KAFKA_AUTO_CREATE_TOPICS, GATEWAY_KAFKA_DEFAULT_PARTITIONS, GATEWAY_KAFKA_ADVERTISED_HOST, GATEWAY_KAFKA_CLUSTER_ID, GATEWAY_KAFKA_MAX_FRAME_BYTES and the other GATEWAY_KAFKA_* variables < flags.

    Once listening, prints one line `GATEWAY READY {json}` on stdout; logs go to stderr.
    """
    flags = {
        "data_dir": data_dir,
        "host": host,
        "kafka_port": kafka_port,
        "amqp_port": amqp_port,
        "mqtt_port": mqtt_port,
        "pulsar_port": pulsar_port,
        "admin_port": admin_port,
        "peer_port": peer_port,
        "log_level": log_level,
        "broker_id": broker_id,
        "rack": rack,
        "role": role,
        "retention_check_interval_ms": retention_check_interval_ms,
        "amqp_consumer_timeout_ms": amqp_consumer_timeout_ms,
        "admin_tls_cert": admin_tls_cert,
        "admin_tls_key": admin_tls_key,
        "kafka_tls_port": kafka_tls_port,
        "amqp_tls_port": amqp_tls_port,
        "tls_cert": tls_cert,
        "tls_key": tls_key,
        "tls_ca": tls_ca,
        "tls_client_auth": tls_client_auth,
        "tls_handshake_timeout_ms": tls_handshake_timeout_ms,
        "tls_crl": tls_crl,
        "load_shed_interval_ms": load_shed_interval_ms,
        "load_shed_threshold_percent": load_shed_threshold_percent,
        "bundle_split_messages_per_s": bundle_split_messages_per_s,
        "bundle_split_mbytes_per_s": bundle_split_mbytes_per_s,
        "bundles_max_per_namespace": bundles_max_per_namespace,
        "kafka_auto_create_topics": kafka_auto_create_topics,
        "kafka_default_partitions": kafka_default_partitions,
        "kafka_advertised_host": kafka_advertised_host,
        "kafka_advertised_port": kafka_advertised_port,
        "kafka_cluster_id": kafka_cluster_id,
        "kafka_max_frame_bytes": kafka_max_frame_bytes,
        "kafka_sasl_mechanisms": kafka_sasl_mechanisms,
        "kafka_super_users": kafka_super_users,
        "kafka_group_initial_rebalance_delay_ms": kafka_group_initial_rebalance_delay_ms,
        "kafka_group_min_session_timeout_ms": kafka_group_min_session_timeout_ms,
        "kafka_group_max_session_timeout_ms": kafka_group_max_session_timeout_ms,
        "kafka_group_max_size": kafka_group_max_size,
        "kafka_group_consumer_session_timeout_ms": kafka_group_consumer_session_timeout_ms,
        "kafka_group_consumer_heartbeat_interval_ms": kafka_group_consumer_heartbeat_interval_ms,
        "kafka_offsets_retention_minutes": kafka_offsets_retention_minutes,
        "kafka_offsets_retention_check_interval_ms": kafka_offsets_retention_check_interval_ms,
        "kafka_group_share_record_lock_duration_ms": kafka_group_share_record_lock_duration_ms,
        "kafka_group_share_delivery_count_limit": kafka_group_share_delivery_count_limit,
        "kafka_group_share_session_timeout_ms": kafka_group_share_session_timeout_ms,
        "kafka_group_share_heartbeat_interval_ms": kafka_group_share_heartbeat_interval_ms,
        "kafka_share_auto_offset_reset": kafka_share_auto_offset_reset,
        "kafka_oauth_jwks_url": kafka_oauth_jwks_url,
        "kafka_oauth_jwks_file": kafka_oauth_jwks_file,
        "kafka_oauth_issuer": kafka_oauth_issuer,
        "kafka_oauth_audience": kafka_oauth_audience,
        "kafka_oauth_principal_claim": kafka_oauth_principal_claim,
        "kafka_oauth_tenant_claim": kafka_oauth_tenant_claim,
        "kafka_oauth_clock_skew_s": kafka_oauth_clock_skew_s,
        "kafka_ssl_principal_mapping_rules": kafka_ssl_principal_mapping_rules,
    }
    try:
        gateway_config = resolve_config(config_file=config, flags=flags)
    except ConfigError as exc:
        typer.echo(f"gateway: configuration error: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG_ERROR) from None

    # Imported here so that `gateway --help` and config errors stay fast and need no event loop.
    from gateway import app
    from gateway.logging import configure_logging

    configure_logging(gateway_config.log_level)
    raise typer.Exit(app.run(gateway_config))


@cli.command()
def bookie(
    config: Annotated[Path | None, typer.Option("--config", help="TOML config file; its [storage] table holds "
                                                "the cluster's shared secret.", dir_okay=False)] = None,
    data_dir: Annotated[Path, typer.Option(help="The bookie's data directory.")] = Path("./bookie-data"),
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one (then --id is needed).")] = 3181,
    metadata: Annotated[str | None, typer.Option(help="zk://host:port/root of the cluster's ZooKeeper.",
                                                 show_default="[storage] metadata")] = None,
    rack: Annotated[str, typer.Option(help="Rack (or zone) of this bookie, for placement.")] = "/default-rack",
    bookie_id: Annotated[str | None, typer.Option("--id", help="Bookie id for a new data directory.",
                                                  show_default="bookie-HOST-PORT")] = None,
    advertised_address: Annotated[str | None, typer.Option(help="host:port clients are told to connect to.",
                                                           show_default="the listen address")] = None,
    log_level: Annotated[str, typer.Option(help="critical, error, warning, info or debug.")] = "info",
    metrics_port: Annotated[int, typer.Option(help="Port of Prometheus /metrics on --host; 0 picks a free one "
                                              "(the READY line names it); -1: none.")] = 0,
) -> None:
    """Serve one bookie of replicated storage until SIGTERM or SIGINT.

    The shared secret comes from the --config file ([storage] secret) or GATEWAY_STORAGE_SECRET, never
    from a flag. Once serving, prints one line `BOOKIE READY {json}` on stdout.
    """
    try:
        storage = resolve_storage_config(config, metadata=metadata)
    except ConfigError as exc:
        typer.echo(f"gateway: configuration error: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG_ERROR) from None
    if not storage.metadata.startswith("zk://"):
        typer.echo("gateway: configuration error: a bookie needs --metadata zk://host:port/root", err=True)
        raise typer.Exit(EXIT_CONFIG_ERROR)

    from gateway import bookie_node
    from gateway.logging import configure_logging

    configure_logging(log_level.lower())
    raise typer.Exit(bookie_node.run(bookie_node.BookieSettings(
        data_dir=Path(data_dir).absolute(), host=host, port=port, metadata=storage.metadata, secret=storage.secret,
        rack=rack, bookie_id=bookie_id, advertised=advertised_address, storage=storage,
        metrics_port=None if metrics_port < 0 else metrics_port)))


cluster_cli = typer.Typer(help="A local replicated cluster, for development and tests.", no_args_is_help=True)
cli.add_typer(cluster_cli, name="cluster")


@cluster_cli.command("up")
def cluster_up(
    data_dir: Annotated[Path, typer.Option(help="Directory for every process's data.")] = Path("./cluster-data"),
    bookies: Annotated[int, typer.Option(help="Bookie processes.")] = 3,
    brokers: Annotated[int, typer.Option(help="Gateway processes.")] = 1,
    read_only_brokers: Annotated[int, typer.Option(help="More gateways with --role read-only, in a rack of their "
                                                        "own (/rack-readers).")] = 0,
    ensemble: Annotated[int, typer.Option("--ensemble", help="E: bookies each ledger is striped over.")] = 3,
    write_quorum: Annotated[int, typer.Option(help="Qw: copies of each entry.")] = 3,
    ack_quorum: Annotated[int, typer.Option(help="Qa: copies fsynced before an acknowledgement.")] = 2,
    racks: Annotated[int, typer.Option(help="Spread the bookies over this many racks.")] = 1,
    zookeepers: Annotated[int, typer.Option(help="Members of the ZooKeeper ensemble (3 survives the loss of "
                                                 "one).")] = 1,
    log_level: Annotated[str, typer.Option(help="critical, error, warning, info or debug.")] = "info",
    tls: Annotated[bool, typer.Option("--tls", help="TLS everywhere: a private CA under <data dir>/tls, mutual "
                                                    "TLS between bookies and brokers, and TLS client ports "
                                                    "(kafka_tls, amqp_tls) beside the plaintext ones.")] = False,
) -> None:
    """Start ZooKeeper, N bookies and M gateways on this machine (free ports), print one line
    `CLUSTER READY {json}`, and stop them all on SIGTERM or Ctrl-C."""
    from gateway.cluster.launcher import ClusterSpec, run_cluster
    from gateway.logging import configure_logging

    configure_logging(log_level.lower())
    try:
        spec = ClusterSpec(data_dir=Path(data_dir).absolute(), bookies=bookies, brokers=brokers,
                           read_only_brokers=read_only_brokers, ensemble=ensemble,
                           write_quorum=write_quorum, ack_quorum=ack_quorum, racks=racks, log_level=log_level,
                           zookeepers=zookeepers, tls=tls)
    except ValueError as exc:
        typer.echo(f"gateway: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG_ERROR) from None
    raise typer.Exit(run_cluster(spec))


def _admin() -> None:
    from gateway.admin_cli import admin_cli
    cli.add_typer(admin_cli, name="admin")


_admin()


def main() -> None:
    cli(prog_name="gateway")

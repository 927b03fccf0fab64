"""gateway.config: defaults < TOML < environment < flags, and validation with clear errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gateway.app import kafka_settings
from gateway.config import ConfigError, GatewayConfig, KafkaConfig, resolve_config
from storage.config import StorageConfig


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


FULL_TOML = """
data_dir = "/srv/from-toml"
host = "10.0.0.1"
kafka_port = 19092
amqp_port = 15672
admin_port = 18080
log_level = "warning"
"""

FULL_ENV = {
    "GATEWAY_DATA_DIR": "/srv/from-env",
    "GATEWAY_HOST": "10.0.0.2",
    "GATEWAY_KAFKA_PORT": "29092",
    "GATEWAY_AMQP_PORT": "25672",
    "GATEWAY_ADMIN_PORT": "28080",
    "GATEWAY_LOG_LEVEL": "error",
}

FULL_FLAGS = {
    "data_dir": Path("/srv/from-flags"),
    "host": "10.0.0.3",
    "kafka_port": 39092,
    "amqp_port": 35672,
    "admin_port": 38080,
    "log_level": "debug",
}


def test_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = resolve_config(env={})
    assert config == GatewayConfig(data_dir=Path.cwd() / "data", host="127.0.0.1", kafka_port=9092,
                                   amqp_port=5672, admin_port=8080, log_level="info",
                                   storage=StorageConfig())


def test_toml_overrides_defaults(tmp_path):
    config = resolve_config(config_file=write_toml(tmp_path, FULL_TOML), env={})
    assert (config.data_dir, config.host, config.kafka_port, config.amqp_port, config.admin_port,
            config.log_level) == (Path("/srv/from-toml"), "10.0.0.1", 19092, 15672, 18080, "warning")


def test_env_overrides_toml(tmp_path):
    config = resolve_config(config_file=write_toml(tmp_path, FULL_TOML), env=FULL_ENV)
    assert (config.data_dir, config.host, config.kafka_port, config.amqp_port, config.admin_port,
            config.log_level) == (Path("/srv/from-env"), "10.0.0.2", 29092, 25672, 28080, "error")


def test_flags_override_env_and_toml(tmp_path):
    config = resolve_config(config_file=write_toml(tmp_path, FULL_TOML), env=FULL_ENV, flags=FULL_FLAGS)
    assert (config.data_dir, config.host, config.kafka_port, config.amqp_port, config.admin_port,
            config.log_level) == (Path("/srv/from-flags"), "10.0.0.3", 39092, 35672, 38080, "debug")


def test_each_setting_is_overridden_independently(tmp_path):
    # One value from each layer: a source that replaced the whole configuration would fail here.
    config = resolve_config(
        config_file=write_toml(tmp_path, 'host = "10.0.0.1"\nkafka_port = 1111\namqp_port = 2222\n'),
        env={"GATEWAY_AMQP_PORT": "3333", "GATEWAY_ADMIN_PORT": "4444"},
        flags={"admin_port": 5555, "host": None, "log_level": None},
    )
    assert (config.host, config.kafka_port, config.amqp_port, config.admin_port, config.log_level) == (
        "10.0.0.1", 1111, 3333, 5555, "info")


def test_empty_environment_variable_counts_as_unset(tmp_path):
    config = resolve_config(config_file=write_toml(tmp_path, "kafka_port = 1111\n"),
                            env={"GATEWAY_KAFKA_PORT": "", "GATEWAY_HOST": "  "})
    assert config.kafka_port == 1111 and config.host == "127.0.0.1"


def test_relative_data_dir_is_made_absolute_against_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_config(env={}, flags={"data_dir": Path("x/../d")}).data_dir == Path.cwd() / "d"
    assert resolve_config(env={"GATEWAY_DATA_DIR": "e"}).data_dir == Path.cwd() / "e"


def test_log_level_is_case_insensitive():
    assert resolve_config(env={"GATEWAY_LOG_LEVEL": "DEBUG"}).log_level == "debug"


def test_port_zero_is_allowed():
    config = resolve_config(env={}, flags={"kafka_port": 0, "amqp_port": 0, "admin_port": 0})
    assert (config.kafka_port, config.amqp_port, config.admin_port) == (0, 0, 0)


def test_storage_table_goes_to_storage_config(tmp_path):
    config = resolve_config(
        config_file=write_toml(tmp_path, "[storage]\njournal_max_wait_ms = 1\njournal_max_bytes = 4096\n"),
        env={},
    )
    assert config.storage == StorageConfig(journal_max_wait_ms=1.0, journal_max_bytes=4096)
    assert isinstance(config.storage.journal_max_wait_ms, float)  # TOML's 1 means 1.0 here


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolve_config(env={}).kafka_port = 1  # type: ignore[misc]


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("port", [-1, 65536, 100000])
@pytest.mark.parametrize("setting", ["kafka_port", "amqp_port", "admin_port"])
def test_port_out_of_range_from_flags(setting, port):
    with pytest.raises(ConfigError, match=setting):
        resolve_config(env={}, flags={setting: port})


def test_port_out_of_range_from_toml(tmp_path):
    with pytest.raises(ConfigError, match="admin_port"):
        resolve_config(config_file=write_toml(tmp_path, "admin_port = 70000\n"), env={})


def test_port_out_of_range_from_env():
    with pytest.raises(ConfigError, match="amqp_port"):
        resolve_config(env={"GATEWAY_AMQP_PORT": "65536"})


def test_non_numeric_port_in_env_names_the_variable():
    with pytest.raises(ConfigError, match="GATEWAY_KAFKA_PORT"):
        resolve_config(env={"GATEWAY_KAFKA_PORT": "ninety"})


@pytest.mark.parametrize("text", ['kafka_port = "9092"\n', "kafka_port = true\n", "kafka_port = 1.5\n"])
def test_wrongly_typed_port_in_toml(tmp_path, text):
    with pytest.raises(ConfigError, match="kafka_port"):
        resolve_config(config_file=write_toml(tmp_path, text), env={})


def test_unknown_log_level():
    with pytest.raises(ConfigError, match="log_level"):
        resolve_config(env={"GATEWAY_LOG_LEVEL": "verbose"})


def test_empty_host_from_flags():
    with pytest.raises(ConfigError, match="host"):
        resolve_config(env={}, flags={"host": ""})


def test_unknown_top_level_key(tmp_path):
    with pytest.raises(ConfigError, match="kafka_prot"):
        resolve_config(config_file=write_toml(tmp_path, "kafka_prot = 1\n"), env={})


def test_unknown_storage_key_lists_the_known_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"no_such_knob.*journal_max_wait_ms"):
        resolve_config(config_file=write_toml(tmp_path, "[storage]\nno_such_knob = 1\n"), env={})


def test_storage_must_be_a_table(tmp_path):
    with pytest.raises(ConfigError, match=r"\[storage\]"):
        resolve_config(config_file=write_toml(tmp_path, "storage = 3\n"), env={})


@pytest.mark.parametrize("text", ['journal_max_bytes = "big"', "journal_max_bytes = true", "journal_max_bytes = 1.5"])
def test_wrongly_typed_storage_value(tmp_path, text):
    with pytest.raises(ConfigError, match="journal_max_bytes"):
        resolve_config(config_file=write_toml(tmp_path, f"[storage]\n{text}\n"), env={})


def test_storage_config_own_validation_becomes_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"\[storage\]"):
        resolve_config(config_file=write_toml(tmp_path, "[storage]\njournal_segment_bytes = 1024\n"), env={})


def test_auditor_settings_from_the_storage_table(tmp_path):
    text = ("[storage]\nauditor = false\nlost_bookie_grace_ms = 60000\naudit_interval_ms = 1000\n"
            "rereplication_bytes_per_s = 0\n")
    storage = resolve_config(config_file=write_toml(tmp_path, text), env={}).storage
    assert (storage.auditor, storage.lost_bookie_grace_ms, storage.audit_interval_ms,
            storage.rereplication_bytes_per_s) == (False, 60000.0, 1000.0, 0)
    with pytest.raises(ConfigError, match="auditor settings"):
        resolve_config(config_file=write_toml(tmp_path, "[storage]\naudit_interval_ms = 0\n"), env={})
    with pytest.raises(ConfigError, match="auditor"):
        resolve_config(config_file=write_toml(tmp_path, "[storage]\nauditor = 1\n"), env={})


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        resolve_config(config_file=tmp_path / "absent.toml", env={})


def test_invalid_toml(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        resolve_config(config_file=write_toml(tmp_path, "kafka_port = = 3\n"), env={})


def test_direct_construction_is_validated_too():
    with pytest.raises(ConfigError):
        GatewayConfig(kafka_port=-5)
    with pytest.raises(ConfigError):
        GatewayConfig(admin_port=True)  # type: ignore[arg-type]


# --- the [kafka] table ----------------------------------------------------------------------------

KAFKA_TOML = """
[kafka]
auto_create_topics = false
default_partitions = 3
advertised_host = "kafka.example"
cluster_id = "from-toml"
max_frame_bytes = 2048
"""


def test_kafka_defaults():
    assert resolve_config(env={}).kafka == KafkaConfig(
        auto_create_topics=True, default_partitions=1, advertised_host=None, cluster_id="gateway-cluster",
        max_frame_bytes=100 * 1024 * 1024)


def test_kafka_table_overrides_defaults(tmp_path):
    assert resolve_config(config_file=write_toml(tmp_path, KAFKA_TOML), env={}).kafka == KafkaConfig(
        auto_create_topics=False, default_partitions=3, advertised_host="kafka.example", cluster_id="from-toml",
        max_frame_bytes=2048)


def test_kafka_env_overrides_toml(tmp_path):
    env = {"GATEWAY_KAFKA_AUTO_CREATE_TOPICS": "true", "GATEWAY_KAFKA_DEFAULT_PARTITIONS": "4",
           "GATEWAY_KAFKA_ADVERTISED_HOST": "env.example", "GATEWAY_KAFKA_CLUSTER_ID": "from-env",
           "GATEWAY_KAFKA_MAX_FRAME_BYTES": "4096"}
    assert resolve_config(config_file=write_toml(tmp_path, KAFKA_TOML), env=env).kafka == KafkaConfig(
        auto_create_topics=True, default_partitions=4, advertised_host="env.example", cluster_id="from-env",
        max_frame_bytes=4096)


def test_kafka_flags_override_env_and_toml(tmp_path):
    env = {"GATEWAY_KAFKA_AUTO_CREATE_TOPICS": "true", "GATEWAY_KAFKA_DEFAULT_PARTITIONS": "4"}
    flags = {"kafka_auto_create_topics": False, "kafka_default_partitions": 5, "kafka_advertised_host": "flag.example",
             "kafka_cluster_id": "from-flags", "kafka_max_frame_bytes": 8192, "kafka_port": 1234}
    config = resolve_config(config_file=write_toml(tmp_path, KAFKA_TOML), env=env, flags=flags)
    assert config.kafka == KafkaConfig(auto_create_topics=False, default_partitions=5,
                                       advertised_host="flag.example", cluster_id="from-flags", max_frame_bytes=8192)
    assert config.kafka_port == 1234  # a top-level setting whose name starts with kafka_ stays top-level


def test_kafka_settings_are_overridden_independently(tmp_path):
    config = resolve_config(config_file=write_toml(tmp_path, "[kafka]\ncluster_id = \"toml\"\ndefault_partitions = 2\n"),
                            env={"GATEWAY_KAFKA_DEFAULT_PARTITIONS": "6"},
                            flags={"kafka_auto_create_topics": None, "kafka_max_frame_bytes": 5000})
    assert config.kafka == KafkaConfig(cluster_id="toml", default_partitions=6, max_frame_bytes=5000)


@pytest.mark.parametrize(("raw", "expected"), [("false", False), ("0", False), ("No", False), ("OFF", False),
                                               ("true", True), ("1", True), ("yes", True), ("On", True)])
def test_kafka_auto_create_topics_env_words(raw, expected):
    assert resolve_config(env={"GATEWAY_KAFKA_AUTO_CREATE_TOPICS": raw}).kafka.auto_create_topics is expected


def test_kafka_bool_env_with_other_words_names_the_variable():
    with pytest.raises(ConfigError, match="GATEWAY_KAFKA_AUTO_CREATE_TOPICS must be true or false"):
        resolve_config(env={"GATEWAY_KAFKA_AUTO_CREATE_TOPICS": "maybe"})


def test_kafka_non_numeric_env_names_the_variable():
    with pytest.raises(ConfigError, match="GATEWAY_KAFKA_MAX_FRAME_BYTES must be an integer"):
        resolve_config(env={"GATEWAY_KAFKA_MAX_FRAME_BYTES": "lots"})


@pytest.mark.parametrize("text", ['auto_create_topics = "no"', "auto_create_topics = 0", "default_partitions = true",
                                  'default_partitions = "3"', "cluster_id = 7", "max_frame_bytes = 1.5"])
def test_wrongly_typed_kafka_value_in_toml(tmp_path, text):
    key = text.split(" ")[0]
    with pytest.raises(ConfigError, match=rf"\[kafka\]: {key} must be a"):
        resolve_config(config_file=write_toml(tmp_path, f"[kafka]\n{text}\n"), env={})


def test_unknown_kafka_key_lists_the_known_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"auto_create_topic\b.*known: auto_create_topics"):
        resolve_config(config_file=write_toml(tmp_path, "[kafka]\nauto_create_topic = false\n"), env={})


def test_kafka_must_be_a_table(tmp_path):
    with pytest.raises(ConfigError, match=r"\[kafka\] must be a table"):
        resolve_config(config_file=write_toml(tmp_path, "kafka = 1\n"), env={})


@pytest.mark.parametrize(("flags", "message"), [
    ({"kafka_default_partitions": 0}, "kafka.default_partitions"),
    ({"kafka_max_frame_bytes": 100}, "kafka.max_frame_bytes"),
    ({"kafka_max_frame_bytes": 2**31}, "kafka.max_frame_bytes"),
    ({"kafka_cluster_id": ""}, "kafka.cluster_id"),
    ({"kafka_advertised_host": ""}, "kafka.advertised_host"),
])
def test_kafka_values_out_of_range(flags, message):
    with pytest.raises(ConfigError, match=message):
        resolve_config(env={}, flags=flags)


def test_kafka_config_feeds_the_broker_settings():
    config = KafkaConfig(auto_create_topics=False, default_partitions=3, cluster_id="c1", max_frame_bytes=4096)
    settings = kafka_settings(config, "127.0.0.2", 19092)
    assert (settings.host, settings.port, settings.auto_create_topics, settings.default_partitions,
            settings.cluster_id, settings.limits.max_frame_bytes) == ("127.0.0.2", 19092, False, 3, "c1", 4096)


def test_advertised_host_replaces_the_bind_host_in_broker_settings():
    assert kafka_settings(KafkaConfig(advertised_host="kafka.example"), "0.0.0.0", 9092).host == "kafka.example"


def test_the_initial_rebalance_delay_defaults_to_kafkas_and_is_bounded():
    assert resolve_config(env={}).kafka.group_initial_rebalance_delay_ms == 3000
    env = {"GATEWAY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}
    assert resolve_config(env=env).kafka.group_initial_rebalance_delay_ms == 0
    with pytest.raises(ConfigError, match="group_initial_rebalance_delay_ms"):
        resolve_config(env={"GATEWAY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "-1"})


def test_group_settings_take_kafkas_names_and_defaults_from_every_source(tmp_path):
    defaults = kafka_settings(resolve_config(env={}).kafka, "127.0.0.1", 9092)
    assert (defaults.group_min_session_timeout_ms, defaults.group_max_session_timeout_ms, defaults.group_max_size,
            defaults.offsets_retention_minutes, defaults.offsets_retention_check_interval_ms) == (
        6_000, 1_800_000, 2_147_483_647, 10_080, 600_000)
    toml = tmp_path / "gateway.toml"
    toml.write_text("[kafka]\ngroup_max_size = 5\noffsets_retention_minutes = 60\n")
    env = {"GATEWAY_KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS": "1000", "GATEWAY_KAFKA_OFFSETS_RETENTION_MINUTES": "30"}
    flags = {"kafka_group_max_session_timeout_ms": 60_000}
    config = resolve_config(config_file=toml, env=env, flags=flags).kafka
    assert (config.group_min_session_timeout_ms, config.group_max_session_timeout_ms, config.group_max_size,
            config.offsets_retention_minutes) == (1_000, 60_000, 5, 30)
    with pytest.raises(ConfigError, match="group_max_size"):
        resolve_config(env={"GATEWAY_KAFKA_GROUP_MAX_SIZE": "0"})
    with pytest.raises(ConfigError, match="is above"):
        resolve_config(env={"GATEWAY_KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS": "7000",
                            "GATEWAY_KAFKA_GROUP_MAX_SESSION_TIMEOUT_MS": "6000"})


def test_broker_id_and_rack_from_each_source(tmp_path):
    assert resolve_config(env={}).broker_id is None
    toml = write_toml(tmp_path, 'broker_id = 3\nrack = "/dc1"\n')
    assert (resolve_config(config_file=toml, env={}).broker_id, resolve_config(config_file=toml, env={}).rack) \
        == (3, "/dc1")
    assert resolve_config(config_file=toml, env={"GATEWAY_BROKER_ID": "4"}).broker_id == 4
    assert resolve_config(config_file=toml, env={}, flags={"broker_id": 5, "rack": "/dc2"}).rack == "/dc2"


def test_the_role_is_serving_unless_a_cluster_broker_is_made_read_only(tmp_path):
    assert resolve_config(env={}).role == "serving"
    toml = write_toml(tmp_path, '[storage]\nmode = "replicated"\nmetadata = "zk://127.0.0.1:2181/g"\nsecret = "s"\n')
    assert resolve_config(config_file=toml, env={"GATEWAY_ROLE": "read-only"}).role == "read-only"
    assert resolve_config(config_file=toml, env={}, flags={"role": "read-only"}).role == "read-only"
    with pytest.raises(ConfigError, match="role must be one of serving, read-only"):
        resolve_config(config_file=toml, env={"GATEWAY_ROLE": "follower"})
    with pytest.raises(ConfigError, match="role read-only needs a cluster"):
        resolve_config(env={"GATEWAY_ROLE": "read-only"})


@pytest.mark.parametrize("source", [{"env": {"GATEWAY_BROKER_ID": "one"}}, {"flags": {"broker_id": -1}}])
def test_a_bad_broker_id_is_refused(source):
    with pytest.raises(ConfigError, match="(?i)broker_id"):
        resolve_config(**{"env": {}, **source})


def test_the_amqp_consumer_timeout_defaults_to_rabbitmqs_and_comes_from_every_source(tmp_path):
    assert resolve_config(env={}).amqp_consumer_timeout_ms == 1_800_000
    toml = write_toml(tmp_path, "amqp_consumer_timeout_ms = 60000\n")
    assert resolve_config(config_file=toml, env={}).amqp_consumer_timeout_ms == 60_000
    env = {"GATEWAY_AMQP_CONSUMER_TIMEOUT_MS": "5000"}
    assert resolve_config(config_file=toml, env=env).amqp_consumer_timeout_ms == 5000
    assert resolve_config(config_file=toml, env=env, flags={"amqp_consumer_timeout_ms": 0}).amqp_consumer_timeout_ms == 0
    with pytest.raises(ConfigError, match=r"amqp_consumer_timeout_ms must be an integer in 0\.\.2147483647"):
        resolve_config(env={"GATEWAY_AMQP_CONSUMER_TIMEOUT_MS": "-1"})
    with pytest.raises(ConfigError, match="amqp_consumer_timeout_ms must be a int"):
        resolve_config(config_file=write_toml(tmp_path, 'amqp_consumer_timeout_ms = "1"\n'), env={})


def test_share_group_settings_reach_the_kafka_broker_and_are_checked(tmp_path):
    config = resolve_config(flags={"data_dir": tmp_path, "kafka_share_auto_offset_reset": "earliest",
                                   "kafka_group_share_delivery_count_limit": 3},
                            env={"GATEWAY_KAFKA_GROUP_SHARE_RECORD_LOCK_DURATION_MS": "15000"})
    share = kafka_settings(config.kafka, "127.0.0.1", 9092).share
    assert (share.auto_offset_reset, share.delivery_count_limit, share.record_lock_duration_ms) == \
        ("earliest", 3, 15000)
    with pytest.raises(ConfigError, match="share_auto_offset_reset"):
        KafkaConfig(share_auto_offset_reset="oldest")
    with pytest.raises(ConfigError, match="group_share_delivery_count_limit"):
        KafkaConfig(group_share_delivery_count_limit=1)


def test_load_shedding_settings_default_to_pulsars_and_come_from_every_source(tmp_path):
    defaults = resolve_config(env={})
    assert (defaults.load_shed_interval_ms, defaults.load_shed_threshold_percent) == (60_000, 10)
    toml = write_toml(tmp_path, "load_shed_interval_ms = 5000\nload_shed_threshold_percent = 20\n")
    env = {"GATEWAY_LOAD_SHED_THRESHOLD_PERCENT": "25"}
    resolved = resolve_config(config_file=toml, env=env, flags={"load_shed_interval_ms": 0})
    assert (resolved.load_shed_interval_ms, resolved.load_shed_threshold_percent) == (0, 25)
    with pytest.raises(ConfigError, match=r"load_shed_threshold_percent must be an integer in 0\.\.100"):
        resolve_config(env={"GATEWAY_LOAD_SHED_THRESHOLD_PERCENT": "101"})
    with pytest.raises(ConfigError, match=r"load_shed_interval_ms must be an integer in 0\.\.86400000"):
        resolve_config(env={"GATEWAY_LOAD_SHED_INTERVAL_MS": "-1"})


def test_replication_links_come_from_the_config_file(tmp_path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[[replication]]\nname = "dc2"\nremote = "10.0.0.1:9092, 10.0.0.2:9092"\n'
                    'namespace = "acme/payments"\ntopics = "orders-.*"\n')
    (link,) = resolve_config(config_file=path, env={}).replication
    assert (link.name, link.namespace, link.topics) == ("dc2", "acme/payments", "orders-.*")
    assert link.bootstrap == [("10.0.0.1", 9092), ("10.0.0.2", 9092)]
    for broken, complaint in (('remote = "nowhere"', "host:port"), ('namespace = "flat"', "namespace"),
                              ('topics = "("', "topics|regular|unterminated|missing"), ('bogus = 1', "unknown")):
        path.write_text(f'[[replication]]\nname = "dc2"\nremote = "h:1"\n{broken}\n'.replace('remote = "h:1"\nremote', 'remote'))
        with pytest.raises(ConfigError, match=complaint):
            resolve_config(config_file=path, env={})


def test_a_replication_link_may_log_in_over_tls(tmp_path) -> None:
    path, ca = tmp_path / "gateway.toml", tmp_path / "ca.pem"
    ca.write_text("not read here")
    path.write_text('[[replication]]\nname = "dc2"\nremote = "h:1"\nsecurity_protocol = "SASL_SSL"\n'
                    'sasl_mechanism = "SCRAM-SHA-512"\nsasl_username = "u"\nsasl_password = "p"\n'
                    f'ssl_ca_file = "{ca}"\nsync_topic_configs = false\nsync_topic_acls = false\n'
                    f'ssl_certificate_file = "{ca}"\nssl_key_file = "{ca}"\n')
    (link,) = resolve_config(config_file=path, env={}).replication
    assert (link.tls, link.sasl, link.sasl_mechanism, link.sync_topic_configs, link.sync_topic_acls) == \
        (True, True, "SCRAM-SHA-512", False, False)
    assert link.ssl_certificate_file == link.ssl_key_file == str(ca)
    for extra, complaint in (('security_protocol = "TLS"', "security_protocol must be one of"),
                             ('security_protocol = "SASL_PLAINTEXT"', "needs sasl_username and sasl_password"),
                             ('security_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "GSSAPI"\n'
                              'sasl_username = "u"\nsasl_password = "p"', "sasl_mechanism must be one of"),
                             ('ssl_ca_file = "/nowhere/ca.pem"', "is not a file"),
                             ('ssl_check_hostname = "no"', "must be true or false"),
                             (f'ssl_certificate_file = "{ca}"', "go together"),
                             (f'ssl_certificate_file = "{ca}"\nssl_key_file = "/nowhere/key.pem"', "is not a file")):
        path.write_text(f'[[replication]]\nname = "dc2"\nremote = "h:1"\n{extra}\n')
        with pytest.raises(ConfigError, match=complaint):
            resolve_config(config_file=path, env={})

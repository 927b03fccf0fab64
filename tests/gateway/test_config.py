"""gateway.config: defaults < TOML < environment < flags, and validation with clear errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gateway.config import ConfigError, GatewayConfig, resolve_config
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

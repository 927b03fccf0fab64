"""The Pulsar listener's port comes from the same sources as the others' (defaults < TOML < env < flags)."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, GatewayConfig, resolve_config


def test_the_pulsar_port_defaults_to_6650_and_follows_toml_env_and_flags(tmp_path):
    assert GatewayConfig().pulsar_port == 6650
    toml = tmp_path / "gateway.toml"
    toml.write_text("pulsar_port = 1111\n")
    assert resolve_config(config_file=toml, env={}).pulsar_port == 1111
    assert resolve_config(config_file=toml, env={"GATEWAY_PULSAR_PORT": "2222"}).pulsar_port == 2222
    assert resolve_config(config_file=toml, env={"GATEWAY_PULSAR_PORT": "2222"},
                          flags={"pulsar_port": 0}).pulsar_port == 0


def test_a_pulsar_port_out_of_range_is_refused():
    with pytest.raises(ConfigError, match="pulsar_port"):
        resolve_config(env={"GATEWAY_PULSAR_PORT": "65536"})

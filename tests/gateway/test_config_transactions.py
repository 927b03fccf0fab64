"""The transaction cleanup interval (Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms)
from the [kafka] table or the environment, validated, and passed on to the Kafka broker's settings."""

import pytest

from gateway.app import kafka_settings
from gateway.config import ConfigError, resolve_config


def test_default_is_kafkas_ten_seconds():
    config = resolve_config(env={})
    assert config.kafka.transaction_cleanup_interval_ms == 10_000
    assert kafka_settings(config.kafka, "127.0.0.1", 9092).transaction_cleanup_interval_ms == 10_000


def test_toml_and_environment_set_it(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text("[kafka]\ntransaction_cleanup_interval_ms = 500\n")
    assert resolve_config(config_file=path, env={}).kafka.transaction_cleanup_interval_ms == 500
    config = resolve_config(config_file=path, env={"GATEWAY_KAFKA_TRANSACTION_CLEANUP_INTERVAL_MS": "250"})
    assert kafka_settings(config.kafka, "127.0.0.1", 9092).transaction_cleanup_interval_ms == 250


@pytest.mark.parametrize("value", ["0", "-1", "3600001", "soon"])
def test_out_of_range_is_refused(value):
    with pytest.raises(ConfigError, match="(?i)transaction_cleanup_interval_ms"):
        resolve_config(env={"GATEWAY_KAFKA_TRANSACTION_CLEANUP_INTERVAL_MS": value})

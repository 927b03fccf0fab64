"""The TLS listeners' settings: the same from flags, environment and TOML, and refused when they
cannot work (a port without a certificate, client auth without a CA, files that are not there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, resolve_config


@pytest.fixture
def pem_files(tmp_path: Path) -> dict[str, str]:
    files = {}
    for name in ("cert", "key", "ca"):
        path = tmp_path / f"{name}.pem"
        path.write_text("placeholder: the config checks that files exist, the listener loads them\n")
        files[name] = str(path)
    return files


def test_without_a_tls_port_there_are_no_tls_settings():
    config = resolve_config(env={})
    assert config.tls is None and config.kafka_tls_port is None and config.amqp_tls_port is None


def test_flags_env_and_toml_give_the_same_settings(tmp_path, pem_files):
    flags = {"kafka_tls_port": 9093, "amqp_tls_port": 0, "tls_cert": pem_files["cert"], "tls_key": pem_files["key"],
             "tls_ca": pem_files["ca"], "tls_client_auth": "required", "tls_handshake_timeout_ms": 2500}
    env = {"GATEWAY_KAFKA_TLS_PORT": "9093", "GATEWAY_AMQP_TLS_PORT": "0", "GATEWAY_TLS_CERT": pem_files["cert"],
           "GATEWAY_TLS_KEY": pem_files["key"], "GATEWAY_TLS_CA": pem_files["ca"],
           "GATEWAY_TLS_CLIENT_AUTH": "required", "GATEWAY_TLS_HANDSHAKE_TIMEOUT_MS": "2500"}
    toml = tmp_path / "gateway.toml"
    toml.write_text("".join(f'{key} = {value if isinstance(value, int) else repr(value)}\n'.replace("'", '"')
                            for key, value in flags.items()))
    configs = [resolve_config(env={}, flags=flags), resolve_config(env=env), resolve_config(config_file=toml, env={})]
    settings = {config.tls for config in configs}
    assert len(settings) == 1
    tls = settings.pop()
    assert (tls.cert, tls.key, tls.ca, tls.client_auth, tls.handshake_timeout_s) == (
        pem_files["cert"], pem_files["key"], pem_files["ca"], "required", 2.5)
    assert all((c.kafka_tls_port, c.amqp_tls_port) == (9093, 0) for c in configs)


def test_the_principal_mapping_rules_are_a_kafka_setting():
    config = resolve_config(env={"GATEWAY_KAFKA_SSL_PRINCIPAL_MAPPING_RULES": "RULE:^CN=([^,]*).*$/$1/L,DEFAULT"})
    assert config.kafka.ssl_principal_mapping_rules == "RULE:^CN=([^,]*).*$/$1/L,DEFAULT"
    with pytest.raises(ConfigError, match="ssl_principal_mapping_rules"):
        resolve_config(env={}, flags={"kafka_ssl_principal_mapping_rules": "RULE:no-slashes"})


@pytest.mark.parametrize("flags, message", [
    ({"kafka_tls_port": 9093}, "needs tls_cert and tls_key"),
    ({"amqp_tls_port": 5671, "tls_cert": "CERT"}, "needs tls_cert and tls_key"),
    ({"kafka_tls_port": 9093, "tls_cert": "CERT", "tls_key": "KEY", "tls_client_auth": "required"}, "needs tls_ca"),
    ({"kafka_tls_port": 9093, "tls_cert": "CERT", "tls_key": "KEY", "tls_client_auth": "sometimes"},
     "tls_client_auth must be one of none, requested, required"),
    ({"kafka_tls_port": 70000, "tls_cert": "CERT", "tls_key": "KEY"}, "kafka_tls_port must be an integer"),
    ({"kafka_tls_port": 9093, "tls_cert": "/no/such.pem", "tls_key": "KEY"}, "tls_cert: no such file"),
    ({"tls_handshake_timeout_ms": 0}, "tls_handshake_timeout_ms must be an integer in 100..600000"),
])
def test_settings_that_cannot_work_are_refused(pem_files, flags, message):
    flags = {key: pem_files["cert"] if value == "CERT" else pem_files["key"] if value == "KEY" else value
             for key, value in flags.items()}
    with pytest.raises(ConfigError, match=message):
        resolve_config(env={}, flags=flags)


def test_a_revocation_list_is_for_client_certificates(pem_files):
    base = {"kafka_tls_port": 9093, "tls_cert": pem_files["cert"], "tls_key": pem_files["key"],
            "tls_crl": pem_files["ca"]}
    with pytest.raises(ConfigError, match="tls_crl is for client certificates"):
        resolve_config(env={}, flags=base)
    config = resolve_config(env={}, flags={**base, "tls_ca": pem_files["ca"], "tls_client_auth": "requested"})
    assert config.tls.crl == pem_files["ca"]

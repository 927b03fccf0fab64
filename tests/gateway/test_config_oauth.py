"""gateway.config: the bearer token settings ([kafka] oauth_*), from every source, and their checks."""

from __future__ import annotations

import pytest

from gateway.app import token_validator
from gateway.config import ConfigError, KafkaConfig, resolve_config


def test_tokens_are_off_by_default_and_on_with_a_key_set(tmp_path) -> None:
    assert not KafkaConfig().tokens_enabled and token_validator(KafkaConfig()) is None
    jwks = tmp_path / "jwks.json"
    jwks.write_text('{"keys": []}')
    config = resolve_config(env={"GATEWAY_KAFKA_OAUTH_JWKS_FILE": str(jwks), "GATEWAY_KAFKA_OAUTH_ISSUER": "https://i"},
                            flags={"kafka_sasl_mechanisms": "OAUTHBEARER,PLAIN", "kafka_oauth_audience": "gw",
                                   "kafka_oauth_tenant_claim": "tenant"}).kafka
    assert config.mechanisms == ("OAUTHBEARER", "PLAIN") and config.tokens_enabled
    settings = token_validator(config).settings
    assert (settings.jwks_file, settings.issuer, settings.audience, settings.principal_claim,
            settings.tenant_claim, settings.clock_skew_s) == (str(jwks), "https://i", "gw", "sub", "tenant", 30)


@pytest.mark.parametrize("settings, message", [
    ({"sasl_mechanisms": "OAUTHBEARER"}, "OAUTHBEARER needs"),
    ({"oauth_jwks_url": "https://a/jwks", "oauth_jwks_file": "/etc/hosts"}, "not both"),
    ({"oauth_jwks_url": "file:///etc/jwks"}, "http"),
    ({"oauth_jwks_file": "/no/such/jwks.json"}, "no such file"),
    ({"oauth_jwks_url": "https://a/jwks", "oauth_principal_claim": ""}, "oauth_principal_claim"),
    ({"oauth_jwks_url": "https://a/jwks", "oauth_clock_skew_s": -1}, "oauth_clock_skew_s"),
])
def test_bad_token_settings_are_refused_naming_the_setting(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        KafkaConfig(**settings)


def test_the_toml_table_takes_the_token_settings(tmp_path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[kafka]\nsasl_mechanisms = "OAUTHBEARER"\noauth_jwks_url = "https://idp.example/jwks"\n'
                    'oauth_principal_claim = "preferred_username"\noauth_clock_skew_s = 5\n')
    config = resolve_config(config_file=path, env={}).kafka
    assert (config.oauth_jwks_url, config.oauth_principal_claim, config.oauth_clock_skew_s) == \
        ("https://idp.example/jwks", "preferred_username", 5)


def test_the_command_line_documents_and_passes_the_token_flags() -> None:
    from typer.testing import CliRunner

    from gateway.cli import cli
    runner = CliRunner()
    shown = runner.invoke(cli, ["serve", "--help"], env={"COLUMNS": "250"})
    assert shown.exit_code == 0 and "--kafka-oauth-jwks-url" in shown.output and "--kafka-oauth-tenant-claim" in shown.output
    refused = runner.invoke(cli, ["serve", "--kafka-sasl-mechanisms", "OAUTHBEARER", "--kafka-oauth-jwks-url", "ftp://x"])
    assert refused.exit_code == 2 and "kafka.oauth_jwks_url must be an http(s) URL" in refused.output

"""Per-namespace Prometheus series from a real core: counted across partitions, capped, and
per-topic series only when asked for."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from core.connections import ClientConnection
from core.names import TopicName
from gateway.config import ConfigError, MetricsConfig, resolve_config
from gateway.metrics import NamespaceCollector
from tests.core.test_partition import batch_of


def scrape(core, **options) -> str:
    registry = CollectorRegistry()
    registry.register(NamespaceCollector(core, **options))
    return generate_latest(registry).decode()


async def publish(core, tenant: str, namespace: str, topic: str, count: int) -> None:
    await core.tenancy.create_tenant(tenant)
    await core.tenancy.create_namespace(tenant, namespace)
    name = TopicName(tenant, namespace, topic)
    await core.create_topic(name, 1)
    await (await core.partition(name, 0)).append(batch_of([b"v"] * count))


async def test_series_per_namespace_and_per_protocol(core):
    await publish(core, "acme", "orders", "a", 3)
    await publish(core, "acme", "orders", "b", 2)
    connection = core.connections.add(ClientConnection("amqp", "127.0.0.1:1", lambda reason: None))
    core.connections.logged_in(connection, "u", "acme", "orders")
    text = scrape(core)
    assert 'gateway_namespace_published_messages_total{namespace="orders",tenant="acme"} 5.0' in text
    assert 'gateway_namespace_connections{namespace="orders",protocol="amqp",tenant="acme"} 1.0' in text
    assert "gateway_topic_" not in text


async def test_namespaces_beyond_the_cap_are_summed_as_other(core):
    for n in range(4):
        await publish(core, "t", f"ns{n}", "x", 1)
    text = scrape(core, max_series=2)
    assert text.count("gateway_namespace_published_messages_total{") == 3
    assert 'gateway_namespace_published_messages_total{namespace="_other",tenant="_other"} 2.0' in text


async def test_per_topic_series_are_opt_in_and_capped(core):
    await publish(core, "t", "ns", "x", 2)
    await publish(core, "t", "ns", "y", 1)
    text = scrape(core, per_topic=True, max_series=1)
    assert 'gateway_topic_end_offset_sum{namespace="ns",tenant="t",topic="x"} 2.0' in text
    assert 'gateway_topic_end_offset_sum{namespace="_other",tenant="_other",topic="_other"} 1.0' in text


def test_the_metrics_table_is_read_and_checked(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text("[metrics]\nper_topic = true\nmax_series = 50\n")
    assert resolve_config(config_file=config, env={}).metrics == MetricsConfig(per_topic=True, max_series=50)
    config.write_text("[metrics]\nmax_series = 0\n")
    with pytest.raises(ConfigError, match="max_series"):
        resolve_config(config_file=config, env={})
    config.write_text("[metrics]\nlabels = 3\n")
    with pytest.raises(ConfigError, match=r"\[metrics\]"):
        resolve_config(config_file=config, env={})

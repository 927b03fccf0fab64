"""The process's Prometheus metrics, in a registry the gateway owns (not the library's global one, so
tests and several gateways in one interpreter never collide)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from storage.ledger.auditor import AuditorStats


class ConnectionStats(Protocol):
    """What a listener reports about its client connections."""

    @property
    def name(self) -> str: ...

    @property
    def accepted_total(self) -> int: ...

    @property
    def open_connections(self) -> int: ...

    @property
    def failures(self) -> dict[str, int]: ...


class GatewayMetrics:
    def __init__(self, version: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.build_info = Info("gateway_build", "Version of the running gateway", registry=self.registry)
        self.build_info.info({"version": version})
        self.up = Gauge("gateway_up", "1 while the gateway serves clients, 0 while starting or stopping",
                        registry=self.registry)
        self.up.set(0)

    def track_listeners(self, listeners: Sequence[ConnectionStats]) -> None:
        self.registry.register(_ListenerCollector(listeners))

    def track_auditor(self, stats: AuditorStats) -> None:
        self.registry.register(_AuditorCollector(stats))


class _ListenerCollector(Collector):
    """Reads the listeners' counters at scrape time, so listeners need not know about Prometheus."""

    def __init__(self, listeners: Sequence[ConnectionStats]) -> None:
        self._listeners = tuple(listeners)

    def collect(self) -> Iterator[Metric]:
        accepted = CounterMetricFamily("gateway_connections_accepted", "Client connections accepted",
                                       labels=["listener"])
        current = GaugeMetricFamily("gateway_connections_open", "Client connections currently open",
                                    labels=["listener"])
        failed = CounterMetricFamily("gateway_connections_failed", "Client connections closed for a failure",
                                     labels=["listener", "reason"])
        for listener in self._listeners:
            accepted.add_metric([listener.name], listener.accepted_total)
            current.add_metric([listener.name], listener.open_connections)
            for reason, count in listener.failures.items():
                failed.add_metric([listener.name, reason], count)
        yield accepted
        yield current
        yield failed

    def describe(self) -> Iterable[Metric]:
        return self.collect()


class _AuditorCollector(Collector):
    """Auto-recovery as the active auditor sees it (a stand-by gateway reports active 0 and zeros)."""

    def __init__(self, stats: AuditorStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats
        active = stats.active
        yield GaugeMetricFamily("gateway_storage_auditor_active", "1 on the gateway whose auditor is active",
                                value=int(active))
        yield GaugeMetricFamily("gateway_storage_lost_bookies",
                                "Bookies unregistered past the grace period that ledgers still name",
                                value=len(stats.lost_bookies) if active else 0)
        yield GaugeMetricFamily("gateway_storage_underreplicated_ledgers",
                                "Ledgers with a fragment on a lost bookie",
                                value=stats.underreplicated_ledgers if active else 0)
        yield CounterMetricFamily("gateway_storage_rereplicated_bytes", "Entry bytes copied to replacement bookies",
                                  value=stats.rereplicated_bytes)
        yield CounterMetricFamily("gateway_storage_rereplicated_ledgers", "Ledgers re-replicated",
                                  value=stats.rereplicated_ledgers)
        failed = CounterMetricFamily("gateway_storage_rereplication_failures",
                                     "Re-replication attempts that left a ledger under-replicated", labels=["reason"])
        for reason, count in stats.failures.items():
            failed.add_metric([reason], count)
        yield failed

    def describe(self) -> Iterable[Metric]:
        return self.collect()

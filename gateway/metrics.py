"""The process's Prometheus metrics, in a registry the gateway owns (not the library's global one, so
tests and several gateways in one interpreter never collide)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from storage.bookie.group_commit import FlushReason
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

    def track_journal(self, flush_counts: Mapping[FlushReason, int]) -> None:
        self.registry.register(JournalCollector(flush_counts))

    def track_replication(self, replicators: Sequence) -> None:
        if replicators:
            self.registry.register(_ReplicationCollector(replicators))

    def track_namespaces(self, core, *, per_topic: bool, max_series: int) -> None:
        self.registry.register(NamespaceCollector(core, per_topic=per_topic, max_series=max_series))


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


class JournalCollector(Collector):
    """The in-process bookie's journal: its flushes (one write and fdatasync each) by what started
    them, as BookKeeper counts its journal's; many max_wait or max_bytes flushes mean a loaded disk."""

    def __init__(self, flush_counts: Mapping[FlushReason, int]) -> None:
        self._counts = flush_counts

    def collect(self) -> Iterator[Metric]:
        flushes = CounterMetricFamily("gateway_storage_journal_flushes", "Journal flushes by what started them",
                                      labels=["reason"])
        for reason, count in self._counts.items():
            flushes.add_metric([reason.value], count)
        yield flushes

    def describe(self) -> Iterable[Metric]:
        return self.collect()


class _ReplicationCollector(Collector):
    """Geo-replication links (protocols/kafka/mirror): lag per partition this broker copies."""

    def __init__(self, replicators: Sequence) -> None:
        self._replicators = tuple(replicators)

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily("gateway_replication_lag_records",
                                "Records of a local partition not yet on the remote mirror", labels=["link", "topic", "partition"])
        records = CounterMetricFamily("gateway_replication_copied_records", "Records copied to the remote",
                                      labels=["link"])
        copied = CounterMetricFamily("gateway_replication_copied_bytes", "Batch bytes copied to the remote",
                                     labels=["link"])
        groups = CounterMetricFamily("gateway_replication_group_commits",
                                     "Consumer groups whose committed offsets were carried to the remote", labels=["link"])
        configs = CounterMetricFamily("gateway_replication_config_syncs",
                                      "Mirrors whose topic settings were changed to match the source", labels=["link"])
        acls = CounterMetricFamily("gateway_replication_acls_created", "Topic ACLs created on the remote",
                                   labels=["link"])
        failures = CounterMetricFamily("gateway_replication_failures",
                                       "Copies that failed and are retried (remote unreachable, refused)", labels=["link"])
        for replicator in self._replicators:
            stats = replicator.stats
            for (topic, partition), behind in sorted(stats.lag.items()):
                lag.add_metric([replicator.name, topic, str(partition)], behind)
            records.add_metric([replicator.name], stats.copied_records)
            copied.add_metric([replicator.name], stats.copied_bytes)
            groups.add_metric([replicator.name], stats.group_commits)
            configs.add_metric([replicator.name], stats.config_syncs)
            acls.add_metric([replicator.name], stats.acls_created)
            failures.add_metric([replicator.name], stats.failures)
        yield from (lag, records, copied, groups, configs, acls, failures)

    def describe(self) -> Iterable[Metric]:
        return self.collect()


OTHER = "_other"   # the label of every namespace (or topic) beyond the series cap


class NamespaceCollector(Collector):
    """Per tenant/namespace series, read from the core at scrape time, with bounded cardinality:
    at most `max_series` namespaces get series of their own, the rest are summed under "_other".
    Per-topic series (storage and end offsets of the partitions open in this process) only when
    `per_topic` is on, under the same cap."""

    def __init__(self, core, *, per_topic: bool = False, max_series: int = 1000) -> None:
        self._core = core
        self._per_topic = per_topic
        self._max_series = max_series

    def collect(self) -> Iterator[Metric]:
        labels = ["tenant", "namespace"]
        published = CounterMetricFamily("gateway_namespace_published_messages",
                                        "Messages stored, Kafka and AMQP together", labels=labels)
        published_bytes = CounterMetricFamily("gateway_namespace_published_bytes",
                                              "Bytes of record batches stored", labels=labels)
        dispatched = CounterMetricFamily("gateway_namespace_dispatched_bytes",
                                         "Bytes read for consumers (Kafka fetch, AMQP delivery)", labels=labels)
        connections = GaugeMetricFamily("gateway_namespace_connections", "Client connections open",
                                        labels=[*labels, "protocol"])
        totals: dict[tuple[str, str], list[int]] = {}
        for meter in self._core.meters.all():
            key = self._bounded(totals, (meter.tenant, meter.namespace))
            sums = totals.setdefault(key, [0, 0, 0])
            sums[0] += meter.published_messages
            sums[1] += meter.published_bytes
            sums[2] += meter.dispatched_bytes
        for key, (messages, size, read) in sorted(totals.items()):
            published.add_metric(list(key), messages)
            published_bytes.add_metric(list(key), size)
            dispatched.add_metric(list(key), read)
        open_by: dict[tuple[str, str, str], int] = {}
        for connection in self._core.connections.all():
            namespace = (connection.tenant or "public", connection.namespace or "default")
            key = (*self._bounded(totals, namespace), connection.protocol)
            open_by[key] = open_by.get(key, 0) + 1
        for key, count in sorted(open_by.items()):
            connections.add_metric(list(key), count)
        yield from (published, published_bytes, dispatched, connections)
        if self._per_topic:
            yield from self._topics()

    def _bounded(self, seen: dict, key: tuple[str, str]) -> tuple[str, str]:
        if key in seen or len(seen) < self._max_series:
            return key
        return (OTHER, OTHER)

    def _topics(self) -> Iterator[Metric]:
        labels = ["tenant", "namespace", "topic"]
        size = GaugeMetricFamily("gateway_topic_stored_bytes", "Bytes stored, over the open partitions",
                                 labels=labels)
        end = GaugeMetricFamily("gateway_topic_end_offset_sum", "Sum of the open partitions' end offsets",
                                labels=labels)
        sums: dict[tuple[str, str, str], list[int]] = {}
        for partition in self._core.open_partitions():
            tenant, namespace, topic = partition.topic.split("/", 2)
            key = (tenant, namespace, topic)
            if key not in sums and len(sums) >= self._max_series:
                key = (OTHER, OTHER, OTHER)
            entry = sums.setdefault(key, [0, 0])
            entry[0] += partition.log.size_bytes
            entry[1] += partition.high_watermark
        for key, (stored, offset) in sorted(sums.items()):
            size.add_metric(list(key), stored)
            end.add_metric(list(key), offset)
        yield size
        yield end

    def describe(self) -> Iterable[Metric]:
        return []   # names only known at scrape time; nothing to check at registration

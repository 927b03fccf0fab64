"""A bookie's Prometheus metrics, served on a port of its own (announced in its READY line) at
/metrics: journal fsync latency and flush sizes, entries and bytes added and read, ledgers held,
read-only state, disk space, request errors, and its ZooKeeper session."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Info, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.metrics import JournalCollector
from gateway.session_metrics import SessionCollector
from storage.bookie.bookie import Bookie
from storage.bookie.stats import FSYNC_BUCKETS_S


class BookieCollector(Collector):
    """Reads the bookie's counters at scrape time."""

    def __init__(self, bookie: Bookie, directory: Path) -> None:
        self._bookie = bookie
        self._directory = directory

    def collect(self) -> Iterator[Metric]:
        stats = self._bookie.stats
        buckets, running = [], 0
        for bound, count in zip((*map(str, FSYNC_BUCKETS_S), "+Inf"), stats.fsync_buckets):
            running += count
            buckets.append((bound, running))
        yield HistogramMetricFamily("gateway_bookie_journal_fsync_seconds", "Time each journal fsync took",
                                    buckets=buckets, sum_value=stats.fsync_seconds)
        yield CounterMetricFamily("gateway_bookie_journal_flush_records",
                                  "Records made durable by journal flushes (divide by the flushes for the batch size)",
                                  value=stats.flushed_records)
        yield CounterMetricFamily("gateway_bookie_journal_written_bytes", "Bytes written to the journal",
                                  value=stats.flushed_bytes)
        yield CounterMetricFamily("gateway_bookie_entries_added", "Entries added (durable)", value=stats.entries_added)
        yield CounterMetricFamily("gateway_bookie_entries_read", "Entries read", value=stats.entries_read)
        yield CounterMetricFamily("gateway_bookie_read_bytes", "Bytes of entries read", value=stats.bytes_read)
        errors = CounterMetricFamily("gateway_bookie_request_errors", "Requests answered with an error",
                                     labels=["operation", "status"])
        for (operation, status), count in sorted(stats.request_errors.items()):
            errors.add_metric([operation, status], count)
        yield errors
        yield GaugeMetricFamily("gateway_bookie_ledgers", "Ledgers this bookie holds", value=self._bookie.ledger_count)
        yield GaugeMetricFamily("gateway_bookie_read_only", "1 while the bookie refuses writes (its journal failed)",
                                value=1.0 if self._bookie.is_read_only else 0.0)
        try:
            disk = shutil.disk_usage(self._directory)
        except OSError:
            return
        yield GaugeMetricFamily("gateway_bookie_disk_free_bytes", "Free space on the bookie's disk", value=disk.free)
        yield GaugeMetricFamily("gateway_bookie_disk_total_bytes", "Size of the bookie's disk", value=disk.total)
        yield GaugeMetricFamily("gateway_bookie_journal_bytes", "Bytes of journal segments on disk",
                                value=_directory_bytes(self._directory / "journal"))


def _directory_bytes(directory: Path) -> int:
    try:
        return sum(entry.stat().st_size for entry in os.scandir(directory) if entry.is_file())
    except OSError:
        return 0


def serve_metrics(bookie: Bookie, directory: Path, metadata, host: str, port: int, version: str) -> tuple:
    """Start the metrics endpoint; returns (the HTTP server, its session collector)."""
    registry = CollectorRegistry(auto_describe=True)
    Info("gateway_build", "Version of the running gateway", registry=registry).info({"version": version})
    registry.register(BookieCollector(bookie, directory))
    registry.register(JournalCollector(bookie.flush_counts))
    session = SessionCollector(metadata)
    registry.register(session)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server, session

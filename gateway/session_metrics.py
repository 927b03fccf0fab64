"""The metadata store's ZooKeeper session as Prometheus series, for every process that holds one
(brokers in replicated mode, bookies): a process whose session is suspended or lost has stopped
owning what its ephemeral nodes held, and an operator should hear of it before clients do."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from storage.api import MetadataStore, SessionState


class SessionCollector(Collector):
    def __init__(self, metadata: MetadataStore) -> None:
        self._state = SessionState.CONNECTED if metadata.session_id is not None else SessionState.SUSPENDED
        self._expirations = 0
        self._cancel = metadata.on_session_event(self._changed)

    def _changed(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            self._expirations += 1
        self._state = state

    def close(self) -> None:
        self._cancel()

    def collect(self) -> Iterator[Metric]:
        state = GaugeMetricFamily("gateway_zookeeper_session_state",
                                  "1 for the ZooKeeper session's current state (connected, suspended, lost)",
                                  labels=["state"])
        for each in SessionState:
            state.add_metric([each.value], 1.0 if each is self._state else 0.0)
        yield state
        yield CounterMetricFamily("gateway_zookeeper_session_expirations",
                                  "ZooKeeper sessions of this process that expired", value=self._expirations)

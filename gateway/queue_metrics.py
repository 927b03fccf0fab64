"""AMQP queues as RabbitMQ's Prometheus plugin names them (rabbitmq_queue_messages_ready,
rabbitmq_queue_messages_unacked, rabbitmq_queue_consumers, labelled vhost and queue), so that
RabbitMQ dashboards and alerts on queue depth work with few edits. Only queues this process has in
memory and serves are reported (nothing is loaded for a scrape); past `max_series` queues the rest
are summed under vhost and queue "_other"."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from protocols.amqp.vhosts import vhost_name

OTHER = "_other"


class QueueCollector(Collector):
    def __init__(self, queues, *, max_series: int) -> None:
        self._queues = queues        # core.queues.service.QueueService
        self._max_series = max_series

    def _counts(self) -> Iterator[tuple[str, str, int, int, int]]:
        for space in self._queues.loaded_namespaces():
            vhost = vhost_name(space.tenant, space.namespace)
            for name, queue in sorted(space.queues.items()):
                subscription = queue.subscription
                if not queue.served_here or not hasattr(subscription, "ready_count"):
                    continue
                partition = queue.open_partition()
                if partition is not None:
                    subscription.note_high_watermark(partition.high_watermark)
                yield vhost, name, subscription.ready_count, subscription.unacked_count, queue.consumer_count

    def collect(self) -> Iterator[Metric]:
        labels = ["vhost", "queue"]
        ready = GaugeMetricFamily("rabbitmq_queue_messages_ready", "Messages ready to be delivered", labels=labels)
        unacked = GaugeMetricFamily("rabbitmq_queue_messages_unacked", "Messages delivered, not yet acknowledged",
                                    labels=labels)
        consumers = GaugeMetricFamily("rabbitmq_queue_consumers", "Consumers of the queue", labels=labels)
        other = [0, 0, 0]
        for index, (vhost, name, ready_count, unacked_count, consumer_count) in enumerate(self._counts()):
            if index < self._max_series:
                ready.add_metric([vhost, name], ready_count)
                unacked.add_metric([vhost, name], unacked_count)
                consumers.add_metric([vhost, name], consumer_count)
            else:
                other = [other[0] + ready_count, other[1] + unacked_count, other[2] + consumer_count]
        if any(other):
            for family, value in zip((ready, unacked, consumers), other):
                family.add_metric([OTHER, OTHER], value)
        yield ready
        yield unacked
        yield consumers

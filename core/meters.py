"""What each namespace publishes and dispatches, whatever the protocol, its rate limits, and its
policies as this process last read them.

Every partition of a namespace shares one NamespaceMeter: Partition.start_append counts what is
stored (Kafka produce and AMQP publish alike, per batch, never per record) and Partition.read
what is read for consumers (Kafka fetch and AMQP delivery). The meter holds the namespace's
publish and dispatch limits (its policies, core/policies.py) as token buckets that both protocols
draw from, so one limit holds across Kafka and AMQP together; each protocol slows its own clients
in its own terms for as long as `publish_delay_s` / `dispatch_delay_s` say: Kafka answers
throttle_time_ms and does not read the connection meanwhile; AMQP publishers get connection.blocked
and are not read, AMQP consumers get no deliveries.

Limits are per process: in a cluster each broker enforces the whole limit on what it serves.
A policy change reaches every process through a watch on /policies/<tenant>/<namespace>.
"""

from __future__ import annotations

import asyncio
import logging
import time

from collections.abc import Callable

from core.policies import NamespacePolicies, PolicyStore
from storage.api import MetadataStore

log = logging.getLogger("gateway.core.meters")

BURST_S = 0.1   # a bucket holds this many seconds' worth: short bursts pass, longer ones wait


class RateBucket:
    """A token bucket that may go into debt: taking never fails, the debt says how long to wait."""

    __slots__ = ("rate", "_level", "_at")

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._level = rate * BURST_S
        self._at = time.monotonic()

    def take(self, amount: float) -> None:
        now = time.monotonic()
        self._level = min(self.rate * BURST_S, self._level + (now - self._at) * self.rate) - amount
        self._at = now

    def delay_s(self) -> float:
        level = self._level + (time.monotonic() - self._at) * self.rate
        return 0.0 if level >= 0 else -level / self.rate


class NamespaceMeter:
    __slots__ = ("tenant", "namespace", "published_bytes", "published_messages", "dispatched_bytes",
                 "publish_limit", "dispatch_limit", "policies", "tracer")

    def __init__(self, tenant: str, namespace: str) -> None:
        self.tenant = tenant
        self.namespace = namespace
        self.published_bytes = 0       # stored batches' bytes, since the process started
        self.published_messages = 0
        self.dispatched_bytes = 0      # bytes read for consumers
        self.publish_limit: RateBucket | None = None    # messages per second
        self.dispatch_limit: RateBucket | None = None   # bytes per second
        self.policies = NamespacePolicies()             # as last read from the metadata store
        self.tracer = None                              # a core.trace.Tracer while the policy says trace

    def published(self, size: int, messages: int) -> None:
        self.published_bytes += size
        self.published_messages += messages
        if self.publish_limit is not None:
            self.publish_limit.take(messages)

    def dispatched(self, size: int) -> None:
        self.dispatched_bytes += size
        if self.dispatch_limit is not None:
            self.dispatch_limit.take(size)

    def publish_delay_s(self) -> float:
        return 0.0 if self.publish_limit is None else self.publish_limit.delay_s()

    def dispatch_delay_s(self) -> float:
        return 0.0 if self.dispatch_limit is None else self.dispatch_limit.delay_s()

    def set_limits(self, publish_rate: int | None, dispatch_rate: int | None) -> None:
        if (self.publish_limit.rate if self.publish_limit else None) != publish_rate:
            self.publish_limit = RateBucket(publish_rate) if publish_rate else None
        if (self.dispatch_limit.rate if self.dispatch_limit else None) != dispatch_rate:
            self.dispatch_limit = RateBucket(dispatch_rate) if dispatch_rate else None


class NamespaceMeters:
    """Owned by the event loop; one meter per namespace this process has served."""

    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata
        self._policies = PolicyStore(metadata)
        self._meters: dict[tuple[str, str], NamespaceMeter] = {}
        self._watches: dict[tuple[str, str], object] = {}
        self._reloads: set[asyncio.Task] = set()
        self._listeners: list[Callable[[NamespaceMeter], None]] = []

    def on_policies(self, listener: Callable[[NamespaceMeter], None]) -> None:
        """Call `listener` with the meter whenever its namespace's policies were (re)read."""
        self._listeners.append(listener)

    def of(self, tenant: str, namespace: str) -> NamespaceMeter:
        """The namespace's meter (limits arrive once `load` ran)."""
        meter = self._meters.get((tenant, namespace))
        if meter is None:
            meter = self._meters[(tenant, namespace)] = NamespaceMeter(tenant, namespace)
        return meter

    async def load(self, tenant: str, namespace: str) -> NamespaceMeter:
        """The meter with its limits read, watching them for changes from now on."""
        meter = self.of(tenant, namespace)
        key = (tenant, namespace)
        if key not in self._watches:
            self._watches[key] = self._metadata.watch(f"/policies/{tenant}/{namespace}", self._changed)
            await self._reload(tenant, namespace)
        return meter

    def all(self) -> list[NamespaceMeter]:
        return list(self._meters.values())

    def forget(self, tenant: str, namespace: str) -> None:
        cancel = self._watches.pop((tenant, namespace), None)
        if cancel is not None:
            cancel()
        self._meters.pop((tenant, namespace), None)

    def _changed(self, path: str) -> None:
        _, _, tenant, namespace = path.split("/", 3)
        task = asyncio.get_running_loop().create_task(self._reload(tenant, namespace))
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def _reload(self, tenant: str, namespace: str) -> None:
        try:
            policies = await self._policies.get(tenant, namespace)
        except Exception as exc:   # unreadable: keep the limits we have; the next change fires again
            log.warning("reading the policies of %s/%s failed: %s", tenant, namespace, exc)
            return
        meter = self.of(tenant, namespace)
        meter.policies = policies
        meter.set_limits(policies.publish_rate_messages, policies.dispatch_rate_bytes)
        for listener in self._listeners:
            listener(meter)

"""MQTT sessions: what outlives one network connection of a client id.

A session has its subscriptions (topic filter -> options), the packet identifiers of QoS 2
publishes received and acknowledged with PUBREC but not yet released (so a resent PUBLISH is not
stored twice), and the identifiers of outgoing QoS 2 messages waiting for PUBCOMP. Its messages wait
in a queue of the core named after the client id (`queue_name`), bound to amq.topic once per
filter; a shared subscription's messages wait in the share group's queue instead.

A session that outlives its connection (3.1.1 clean session 0, 5.0 session expiry > 0) is stored
as a document (core_port's `sessions` kind) each time its subscriptions or its QoS 2 identifiers
change, so it is found again after a restart; its queue is durable.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from protocols.mqtt.codec.packets import SubscriptionRequest
from protocols.mqtt.core_port import CorePort
from protocols.mqtt.machine.topics import split_shared

KIND = "sessions"
NEVER_EXPIRES = 0xFFFFFFFF
SESSION_QUEUE_PREFIX = "mqtt-subscription-"
SHARE_QUEUE_PREFIX = "mqtt-share-"


def queue_name(client_id: str) -> str:
    return SESSION_QUEUE_PREFIX + client_id


def share_queue_name(group: str, topic_filter: str) -> str:
    digest = hashlib.sha256(f"{group}\x00{topic_filter}".encode()).hexdigest()[:24]
    return f"{SHARE_QUEUE_PREFIX}{group[:64]}-{digest}"


@dataclass(slots=True)
class Subscription:
    request: SubscriptionRequest
    identifier: int | None = None          # 5.0 subscription identifier
    share_group: str | None = None
    topic_filter: str = ""                 # without the $share/group/ prefix


@dataclass(slots=True)
class Session:
    tenant: str
    namespace: str
    client_id: str
    expiry_s: int = 0                      # 0: ends with the connection
    subscriptions: dict[str, Subscription] = field(default_factory=dict)   # by the filter as subscribed
    received_qos2: set[int] = field(default_factory=set)
    storing_qos2: dict[int, Any] = field(default_factory=dict)      # packet id -> its storing, not done yet
    awaiting_pubcomp: set[int] = field(default_factory=set)
    connection: Any = None                 # the live connection, None while offline
    expiry_handle: Any = None              # the timer ending an offline session
    will_handle: Any = None                # the timer publishing a delayed will
    offline_since_ms: int | None = None    # when its last connection ended (kept sessions)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.tenant, self.namespace, self.client_id

    @property
    def durable(self) -> bool:
        return self.expiry_s > 0

    def expired(self, now_ms: int) -> bool:
        """Offline longer than its session expiry (checked when a stored session is found again)."""
        return (self.connection is None and self.offline_since_ms is not None and self.expiry_s != NEVER_EXPIRES
                and now_ms >= self.offline_since_ms + self.expiry_s * 1000)

    def to_doc(self) -> dict[str, Any]:
        subs = [[name, s.request.qos, s.request.no_local, s.request.retain_as_published, s.request.retain_handling,
                 s.identifier] for name, s in self.subscriptions.items()]
        return {"expiry_s": self.expiry_s, "subscriptions": subs, "received_qos2": sorted(self.received_qos2),
                "offline_since_ms": self.offline_since_ms}

    @classmethod
    def from_doc(cls, tenant: str, namespace: str, client_id: str, doc: dict[str, Any]) -> "Session":
        session = cls(tenant, namespace, client_id, doc.get("expiry_s", NEVER_EXPIRES))
        for name, qos, no_local, rap, handling, identifier in doc.get("subscriptions", ()):
            group, topic_filter = split_shared(name)
            session.subscriptions[name] = Subscription(SubscriptionRequest(name, qos, no_local, rap, handling),
                                                       identifier, group, topic_filter)
        session.received_qos2 = set(doc.get("received_qos2", ()))
        session.offline_since_ms = doc.get("offline_since_ms")
        return session


class SessionStore:
    """Stored sessions' documents."""

    def __init__(self, port: CorePort) -> None:
        self._port = port

    def _path(self, session_key: tuple[str, str, str]) -> str:
        return self._port.doc_path(KIND, *session_key)

    async def load(self, tenant: str, namespace: str, client_id: str) -> Session | None:
        doc = await self._port.load_doc(self._path((tenant, namespace, client_id)))
        return None if doc is None else Session.from_doc(tenant, namespace, client_id, doc)

    async def save(self, session: Session) -> None:
        if session.durable:
            await self._port.save_doc(self._path(session.key), session.to_doc())

    async def drop(self, session: Session) -> None:
        await self._port.drop_doc(self._path(session.key))

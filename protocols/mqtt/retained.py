"""Retained messages: at most one per topic and namespace, durable, served to new subscribers.

Each is a document in the metadata store (core_port's `retained` kind) and, once the namespace was
used, in memory for matching. An empty payload deletes the topic's retained message. A retained
message with a message expiry is dropped when served after its deadline.
"""

from __future__ import annotations

import base64
from typing import Any

from protocols.mqtt.core_port import CorePort
from protocols.mqtt.machine.topics import matches
from protocols.mqtt.records import Message

KIND = "retained"
_BINARY = frozenset({"correlation_data"})


class RetainedStore:
    def __init__(self, port: CorePort) -> None:
        self._port = port
        self._by_namespace: dict[tuple[str, str], dict[str, Message]] = {}

    async def _loaded(self, tenant: str, namespace: str) -> dict[str, Message]:
        found = self._by_namespace.get((tenant, namespace))
        if found is not None:
            return found
        messages: dict[str, Message] = {}
        base = self._port.doc_path(KIND, tenant, namespace)
        for topic in await self._port.doc_names(base):
            doc = await self._port.load_doc(self._port.doc_path(KIND, tenant, namespace, topic))
            if doc is not None:
                messages[topic] = _from_doc(topic, doc)
        # Another coroutine may have loaded it meanwhile; keep the first (it may have changed since).
        return self._by_namespace.setdefault((tenant, namespace), messages)

    async def put(self, tenant: str, namespace: str, message: Message) -> None:
        """Keep `message` as its topic's retained message (an empty payload removes it), durably."""
        messages = await self._loaded(tenant, namespace)
        path = self._port.doc_path(KIND, tenant, namespace, message.topic)
        if message.payload:
            messages[message.topic] = message
            await self._port.save_doc(path, _to_doc(message))
        else:
            messages.pop(message.topic, None)
            await self._port.drop_doc(path)

    async def matching(self, tenant: str, namespace: str, topic_filter: str, now_ms: int) -> list[Message]:
        messages = await self._loaded(tenant, namespace)
        return [m for topic, m in messages.items()
                if matches(topic_filter, topic) and (m.expires_at_ms is None or m.expires_at_ms > now_ms)]


def _to_doc(message: Message) -> dict[str, Any]:
    properties = {name: (base64.b64encode(value).decode() if name in _BINARY else value)
                  for name, value in message.properties.items()}
    return {"payload": base64.b64encode(message.payload).decode(), "qos": message.qos, "properties": properties,
            "expires_at_ms": message.expires_at_ms, "sender": message.sender}


def _from_doc(topic: str, doc: dict[str, Any]) -> Message:
    properties = {name: (base64.b64decode(value) if name in _BINARY else
                         [tuple(pair) for pair in value] if name == "user_property" else value)
                  for name, value in doc.get("properties", {}).items()}
    return Message(topic, base64.b64decode(doc["payload"]), doc["qos"], True, properties, doc.get("sender", ""),
                   doc.get("expires_at_ms"))

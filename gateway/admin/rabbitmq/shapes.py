"""The core's objects as RabbitMQ 3.10's management API shows them: the same field names and JSON
types, so tools that read RabbitMQ read these. Pure functions; what the gateway cannot know (memory
per queue, Erlang process counts) is left out rather than made up."""

from __future__ import annotations

import base64
import datetime
import decimal
import hashlib
import json
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from core.queues.exchange import Binding, DestinationKind, Exchange
from core.queues.queue import QueueInfo

MANAGEMENT_VERSION = "3.10.8"          # the API these shapes follow
PRODUCT_NAME = "gateway"
AMQP_PROTOCOL = "AMQP 0-9-1"
DEFAULT_EXCHANGE_NAME = ""
_PROTOCOLS = {"amqp": AMQP_PROTOCOL, "kafka": "Kafka"}


def node_name() -> str:
    return f"gateway@{socket.gethostname()}"


def plain(value: Any) -> Any:
    """An AMQP argument value as plain JSON (RabbitMQ shows long strings as text)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def rate(value: float) -> dict[str, float]:
    return {"rate": round(value, 1)}


def exchange_doc(vhost: str, exchange: Exchange) -> dict[str, Any]:
    return {"name": exchange.name, "vhost": vhost, "type": exchange.type.value, "durable": exchange.durable,
            "auto_delete": exchange.auto_delete, "internal": exchange.internal,
            "arguments": plain(exchange.arguments), "user_who_performed_action": ""}


def default_exchange_doc(vhost: str) -> dict[str, Any]:
    return {"name": DEFAULT_EXCHANGE_NAME, "vhost": vhost, "type": "direct", "durable": True, "auto_delete": False,
            "internal": False, "arguments": {}, "user_who_performed_action": "rmq-internal"}


def queue_type(info: QueueInfo) -> str:
    value = plain(info.arguments.get("x-queue-type", "classic"))
    return value if isinstance(value, str) else "classic"


def queue_doc(vhost: str, info: QueueInfo, *, ready: int, unacked: int, consumers: int,
              publish_rate: float = 0.0, ack_rate: float = 0.0, published: int | None = None) -> dict[str, Any]:
    doc = {"name": info.name, "vhost": vhost, "durable": info.durable, "auto_delete": info.auto_delete,
           "exclusive": info.exclusive, "arguments": plain(info.arguments), "node": node_name(),
           "type": queue_type(info), "state": "running", "policy": None, "exclusive_consumer_tag": None,
           "consumers": consumers, "consumer_utilisation": None,
           "messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked,
           "messages_details": rate(0.0), "messages_ready_details": rate(0.0),
           "messages_unacknowledged_details": rate(0.0)}
    if published is not None:
        doc["message_stats"] = {"publish": published, "publish_details": rate(publish_rate),
                                "ack_details": rate(ack_rate), "deliver_get_details": rate(ack_rate)}
    return doc


def properties_key(key: str, arguments: Mapping[str, Any]) -> str:
    """What names a binding in its URL: the routing key, "~" for none, plus a hash of its arguments."""
    if not arguments:
        return quote(key, safe="") if key else "~"
    digest = hashlib.sha256(json.dumps(plain(arguments), sort_keys=True).encode()).digest()
    return f"{quote(key, safe='')}~{base64.urlsafe_b64encode(digest[:8]).decode().rstrip('=')}"


def binding_doc(vhost: str, binding: Binding) -> dict[str, Any]:
    return {"source": binding.source, "vhost": vhost, "destination": binding.destination,
            "destination_type": "queue" if binding.kind is DestinationKind.QUEUE else "exchange",
            "routing_key": binding.key, "arguments": plain(binding.arguments),
            "properties_key": properties_key(binding.key, binding.arguments)}


def default_binding_doc(vhost: str, queue: str) -> dict[str, Any]:
    """Every queue is bound to the default exchange by its name (implicitly, as RabbitMQ lists it)."""
    return {"source": DEFAULT_EXCHANGE_NAME, "vhost": vhost, "destination": queue, "destination_type": "queue",
            "routing_key": queue, "arguments": {}, "properties_key": quote(queue, safe="")}


def user_doc(name: str, tags: tuple[str, ...] | list[str]) -> dict[str, Any]:
    # Only SCRAM keys are stored: there is no RabbitMQ password hash to show.
    return {"name": name, "password_hash": "", "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": list(tags), "limits": {}}


def permission_doc(user: str, vhost: str, configure: str, write: str, read: str) -> dict[str, Any]:
    return {"user": user, "vhost": vhost, "configure": configure, "write": write, "read": read}


def vhost_doc(name: str, *, ready: int = 0, unacked: int = 0) -> dict[str, Any]:
    return {"name": name, "description": "", "tags": [], "default_queue_type": "classic",
            "metadata": {"description": "", "tags": []}, "tracing": False,
            "cluster_state": {node_name(): "running"},
            "messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked,
            "messages_details": rate(0.0), "messages_ready_details": rate(0.0),
            "messages_unacknowledged_details": rate(0.0)}


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


def connection_name(peer: str, listener: str) -> str:
    """RabbitMQ names a connection by its two ends: "127.0.0.1:50432 -> 127.0.0.1:5672"."""
    return f"{peer} -> {listener}"


def connection_doc(connection, listener: str, vhost: str | None, channels: int) -> dict[str, Any]:
    peer_host, peer_port = split_address(connection.address)
    host, port = split_address(listener)
    return {"name": connection_name(connection.address, listener), "node": node_name(), "type": "network",
            "protocol": _PROTOCOLS.get(connection.protocol, connection.protocol), "user": connection.user or "",
            "vhost": vhost, "host": host, "port": port, "peer_host": peer_host, "peer_port": peer_port,
            "ssl": False, "state": "running", "channels": channels, "connected_at": connection.connected_ms,
            "client_properties": {"connection_name": connection.client_id} if connection.client_id else {},
            "user_who_performed_action": connection.user or ""}


def channel_doc(connection_doc_: Mapping[str, Any], channel: Mapping[str, Any]) -> dict[str, Any]:
    details = {key: connection_doc_[key] for key in ("name", "peer_host", "peer_port")}
    return {"name": f"{connection_doc_['name']} ({channel['number']})", "number": channel["number"],
            "node": node_name(), "user": connection_doc_["user"], "vhost": connection_doc_["vhost"],
            "connection_details": details, "state": "running",
            "prefetch_count": channel["prefetch_count"], "global_prefetch_count": channel["global_prefetch_count"],
            "confirm": channel["confirm"], "transactional": channel["transactional"],
            "consumer_count": channel["consumer_count"], "messages_unacknowledged": channel["unacknowledged"],
            "messages_unconfirmed": 0, "messages_uncommitted": 0, "acks_uncommitted": 0}

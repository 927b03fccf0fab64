"""A tiny in-memory broker on a real socket, driven by the AMQP machine: enough of queue.declare,
basic.publish, basic.get, basic.consume, confirms and the close handshakes for real clients (pika,
aio-pika) to run their happy paths against. It records every byte the client sent, for golden files.
Test support only: the real adapter and broker semantics live elsewhere.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass, field

from protocols.amqp.machine.connection import AmqpServerConnection
from protocols.amqp.machine.errors import ChannelError
from protocols.amqp.machine.events import (
    AuthenticationRequested, ConnectionCloseRequested, ConnectionClosed, ContentReceived, MethodReceived,
    ProtocolHeaderRejected, VhostOpenRequested,
)
from protocols.amqp.machine.settings import ServerSettings
from protocols.amqp.spec import ReplyCode

CAPABILITIES = {
    "publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True,
    "exchange_exchange_bindings": True, "connection.blocked": True, "authentication_failure_close": True,
    "per_consumer_qos": True,
}
USERS = {"guest": "guest"}


@dataclass
class Stored:
    exchange: str
    routing_key: str
    properties: object
    body: bytes


@dataclass
class FakeBroker:
    settings: ServerSettings = field(default_factory=lambda: ServerSettings(capabilities=CAPABILITIES))
    queues: dict[str, deque] = field(default_factory=dict)
    captured: list[bytes] = field(default_factory=list)     # client bytes, one entry per connection
    events: list[list] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = AmqpServerConnection(self.settings)
        captured = bytearray()
        events_seen: list = []
        self.events.append(events_seen)
        confirming: set[int] = set()
        publish_seq: dict[int, itertools.count] = {}
        delivery_tags = itertools.count(1)
        consumers: dict[int, list[str]] = {}
        try:
            while not conn.terminated:
                data = await reader.read(65536)
                captured += data
                loop_time = asyncio.get_running_loop().time()
                pending = deque(conn.receive_data(data, now=loop_time))
                while pending:
                    event = pending.popleft()
                    events_seen.append(event)
                    out = getattr(event, "data", b"")
                    if isinstance(event, AuthenticationRequested):
                        ok = USERS.get(event.username) == event.password
                        out = conn.accept_authentication() if ok else conn.refuse_authentication()
                        pending.extend(conn.next_events())
                    elif isinstance(event, VhostOpenRequested):
                        out = conn.accept_vhost() if event.vhost == "/" else conn.refuse_vhost()
                        pending.extend(conn.next_events())
                    elif isinstance(event, ConnectionCloseRequested):
                        out = conn.send_method(0, "connection.close-ok")
                    elif isinstance(event, MethodReceived):
                        try:
                            out = self._method(conn, event, confirming, publish_seq, consumers, delivery_tags)
                        except ChannelError as exc:
                            out = conn.send_error(event.channel, exc)
                    elif isinstance(event, ContentReceived):
                        out = self._publish(conn, event, confirming, publish_seq, consumers, delivery_tags)
                    if out:
                        writer.write(out)
                        conn.mark_sent(loop_time)
                    if isinstance(event, (ProtocolHeaderRejected, ConnectionClosed)):
                        break
                await writer.drain()
                if not data:
                    break
        finally:
            self.captured.append(bytes(captured))
            writer.close()

    def _method(self, conn, event, confirming, publish_seq, consumers, delivery_tags) -> bytes:
        ch, name, args = event.channel, event.method_name, event.args
        if name == "channel.open":
            return conn.send_method(ch, "channel.open-ok")
        if name == "channel.close":
            consumers.pop(ch, None)
            return conn.send_method(ch, "channel.close-ok")
        if name == "confirm.select":
            confirming.add(ch)
            publish_seq[ch] = itertools.count(1)
            return b"" if args["nowait"] else conn.send_method(ch, "confirm.select-ok")
        if name == "basic.qos":
            return conn.send_method(ch, "basic.qos-ok")
        if name == "exchange.declare":
            return b"" if args["nowait"] else conn.send_method(ch, "exchange.declare-ok")
        if name == "queue.declare":
            queue = args["queue"] or f"amq.gen-{len(self.queues)}"
            if args["passive"] and queue not in self.queues:
                raise ChannelError(ReplyCode.NOT_FOUND, f"no queue '{queue}' in vhost '/'", method_name=name)
            self.queues.setdefault(queue, deque())
            return conn.send_method(ch, "queue.declare-ok", queue=queue, message_count=len(self.queues[queue]),
                                    consumer_count=0)
        if name == "queue.bind":
            return conn.send_method(ch, "queue.bind-ok")
        if name == "basic.get":
            messages = self.queues.get(args["queue"])
            if not messages:
                return conn.send_method(ch, "basic.get-empty")
            message = messages.popleft()
            return conn.send_content(ch, "basic.get-ok", message.properties, message.body,
                                     delivery_tag=next(delivery_tags), exchange=message.exchange,
                                     routing_key=message.routing_key, message_count=len(messages))
        if name == "basic.consume":
            tag = args["consumer_tag"] or f"ctag-{ch}"
            consumers.setdefault(ch, []).append(args["queue"])
            out = conn.send_method(ch, "basic.consume-ok", consumer_tag=tag)
            messages = self.queues.get(args["queue"], deque())
            while messages:
                message = messages.popleft()
                out += conn.send_content(ch, "basic.deliver", message.properties, message.body, consumer_tag=tag,
                                         delivery_tag=next(delivery_tags), exchange=message.exchange,
                                         routing_key=message.routing_key)
            return out
        if name == "basic.cancel":
            return conn.send_method(ch, "basic.cancel-ok", consumer_tag=args["consumer_tag"])
        if name in ("basic.ack", "basic.nack", "basic.reject"):
            return b""
        raise ChannelError(ReplyCode.NOT_FOUND, f"{name} is not part of the fake broker", *event.method.key)

    def _publish(self, conn, event, confirming, publish_seq, consumers, delivery_tags) -> bytes:
        ch, args = event.channel, event.args
        queue = args["routing_key"] if args["exchange"] == "" else "routed"
        self.queues.setdefault(queue, deque()).append(
            Stored(args["exchange"], args["routing_key"], event.properties, event.body))
        if ch in confirming:
            return conn.send_method(ch, "basic.ack", delivery_tag=next(publish_seq[ch]))
        return b""

"""The asyncio adapter: one task per MQTT connection, bytes from the socket into the connection's
machine (machine/connection.py), each packet to its handler, and what they answer back out.

Packets are handled in arrival order. A QoS 1 or 2 PUBLISH is routed and appended at once, and
its PUBACK / PUBREC is sent once every queue it reached stored it (and, for QoS 2, once its packet
identifier is stored with a kept session): replies wait in one line, so they leave in the order
their publishes came, as MQTT requires. SUBSCRIBE and UNSUBSCRIBE are awaited before the next
packet, so a publish that follows a SUBACK is routed to the new subscription.

Deliveries are written by the queues' dispatchers into this connection's output, gathered over one
event-loop turn into one write. A session's QoS 1/2 deliveries stay unacknowledged in the core until
PUBACK (QoS 1) or PUBREC (QoS 2; then only PUBREL/PUBCOMP is owed, which never repeats the
message); when the connection goes, what was unacknowledged goes back to the queue and comes again,
with DUP set, to the session's next connection. At most the client's receive maximum are in flight.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections import deque
from collections.abc import Awaitable

from core.connections import ClientConnection
from core.errors import CoreError
from core.queues.queue import Queue
from core.queues.subscription import QueuedMessage
from core.trace import CURRENT_CLIENT
from protocols.mqtt.broker import MAX_CLIENT_ID_BYTES, MqttBroker, MqttSettings
from protocols.mqtt.codec import packets as pk
from protocols.mqtt.machine import errors as rc
from protocols.mqtt.machine.connection import MqttMachine
from protocols.mqtt.machine.errors import ConnectionEnded
from protocols.mqtt.machine.topics import InvalidTopic, check_filter, check_name, matches, routing_key, split_shared
from protocols.mqtt.records import CARRIED, Message, from_queued, to_record
from protocols.mqtt.session import NEVER_EXPIRES, Session, Subscription, queue_name, share_queue_name

log = logging.getLogger("gateway.mqtt")

READ_BYTES = 256 * 1024
OUTPUT_HIGH_WATER = 4 << 20
DEFAULT_RECEIVE_MAXIMUM = 65_535
_WILL_PROPERTIES = ("message_expiry_interval", *CARRIED, "user_property")


class MqttConnectionHandler:
    def __init__(self, broker: MqttBroker) -> None:
        self.broker = broker

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await MqttConnection(self.broker, reader, writer).run()


def make_broker(core, queues, settings: MqttSettings | None = None) -> MqttBroker:
    return MqttBroker(core, settings or MqttSettings(), queues)


def connection_handler(broker: MqttBroker) -> MqttConnectionHandler:
    return MqttConnectionHandler(broker)


class SessionConsumer:
    """The core's Consumer of one queue (the session's, or a share group's) for one connection."""

    __slots__ = ("connection", "queue", "prefetch", "auto_ack", "share")

    def __init__(self, connection: "MqttConnection", queue: Queue, prefetch: int,
                 share: Subscription | None = None) -> None:
        self.connection = connection
        self.queue = queue
        self.prefetch = prefetch
        self.auto_ack = False
        self.share = share

    @property
    def client(self) -> ClientConnection:
        return self.connection.client

    def can_deliver(self) -> bool:
        return self.connection.can_deliver()

    def deliver(self, message: QueuedMessage) -> None:
        self.connection.deliver(self, message)

    def flush(self) -> None:
        self.connection.flush()

    def queue_deleted(self) -> None:
        pass


class MqttConnection:
    def __init__(self, broker: MqttBroker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.port = broker.port
        self.settings = broker.settings
        self.machine = MqttMachine(self.settings.connect_max_packet_bytes, self.settings.topic_alias_maximum)
        self._reader = reader
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._peer = writer.get_extra_info("peername")
        self.client = self.port.connection_opened(self._peer, self._close_for_operator)
        self.session: Session | None = None
        self.space = None
        self.will: pk.Will | None = None
        self.client_id = ""
        self.client_receive_maximum = DEFAULT_RECEIVE_MAXIMUM
        self.inflight: dict[int, tuple[Queue | None, int]] = {}    # packet id -> (queue, offset)
        self.consumers: dict[str, SessionConsumer] = {}             # by queue name
        self._inbound_qos: set[int] = set()       # QoS 1/2 publishes received and not yet answered
        self._replies: deque[asyncio.Future] = deque()
        self._output: list[bytes] = []
        self._flush_scheduled = False
        self._pending_acks: dict[Queue, list[int]] = {}
        self._released = asyncio.Event()       # the session is offline: another connection may take it
        self._taken_over = False
        self._send_will = True               # False after a normal DISCONNECT
        self._closed = False

    @property
    def version(self) -> int:
        return self.machine.version or pk.V311

    # --- the connection's life ------------------------------------------------------------------

    async def run(self) -> None:
        CURRENT_CLIENT.set(self.client)
        timer = asyncio.create_task(self._keep_time(), name=f"mqtt-timer {self._peer}")
        try:
            await self._serve()
        except ConnectionEnded as exc:
            log.info("MQTT connection from %s closed: %s (reason 0x%02x)", self._peer, exc, exc.reason_code)
            if self.machine.version == pk.V5:
                self._send(pk.Disconnect(exc.reason_code, {"reason_string": str(exc)[:200]}))
        except pk.UnsupportedProtocol as exc:
            log.info("MQTT connection from %s refused: %s", self._peer, exc)
            code = rc.UNSUPPORTED_PROTOCOL_VERSION if exc.level == pk.V5 else rc.V3_CONNACK[rc.UNSUPPORTED_PROTOCOL_VERSION]
            self._output.append(pk.ConnAck(code).encode(pk.V311))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:
            log.exception("MQTT connection from %s failed", self._peer)
        finally:
            timer.cancel()
            try:
                await self._end()
            finally:
                self.flush()
                self._writer.close()
                self._released.set()

    async def _serve(self) -> None:
        while not self._closed:
            data = await self._reader.read(READ_BYTES)
            if not data:
                return
            for packet in self.machine.receive(data, self._loop.time()):
                await self._handle(packet)
                if self._closed:
                    return
            self.flush()

    def _close(self) -> None:
        """Stop: the serve loop ends after the packet in hand, the socket closes once output is sent."""
        self._closed = True
        self._flush_all()
        self._writer.transport.close()

    def _close_for_operator(self, reason: str) -> None:
        if self.machine.version == pk.V5:
            self._send(pk.Disconnect(rc.IMPLEMENTATION_SPECIFIC_ERROR, {"reason_string": reason[:200]}))
        self._close()

    async def take_over(self) -> None:
        """Another connection with this client id came: end this one, wait until it is released."""
        self._taken_over = True
        if self.machine.version == pk.V5:
            self._send(pk.Disconnect(rc.SESSION_TAKEN_OVER))
        self._close()
        await self._released.wait()

    async def _keep_time(self) -> None:
        opened = self._loop.time()
        while True:
            keep_alive = self.machine.keep_alive_s
            await asyncio.sleep(max(1.0, keep_alive / 4) if keep_alive else 1.0)
            now = self._loop.time()
            if self.session is None and self.machine.version is None and now - opened > self.settings.connect_timeout_s:
                log.info("MQTT connection from %s sent no CONNECT in time", self._peer)
                self._close()
                return
            if self.machine.keep_alive_expired(now):
                log.info("MQTT client %r from %s silent past its keep-alive", self.client_id, self._peer)
                if self.machine.version == pk.V5:
                    self._send(pk.Disconnect(rc.KEEP_ALIVE_TIMEOUT))
                self._close()
                return

    # --- output ---------------------------------------------------------------------------------

    def _send(self, packet) -> bool:
        data = self.machine.encode(packet)
        if data is None:
            return False
        self._output.append(data)
        self._schedule_flush()
        return True

    def flush(self) -> None:
        """Write what waits (one write per event-loop turn)."""
        if self._output:
            data = b"".join(self._output)
            self._output.clear()
            if not self._writer.transport.is_closing():
                self._writer.write(data)

    def _flush_all(self) -> None:
        """Output, then the acknowledgements owed to queues: never from inside a queue's dispatch."""
        self._flush_scheduled = False
        self.flush()
        if self._pending_acks:
            pending, self._pending_acks = self._pending_acks, {}
            for queue, offsets in pending.items():
                self.port.ack(queue, offsets)

    def can_deliver(self) -> bool:
        return (not self._closed and len(self.inflight) < self.client_receive_maximum
                and self._writer.transport.get_write_buffer_size() < OUTPUT_HIGH_WATER)

    # --- packets --------------------------------------------------------------------------------

    async def _handle(self, packet) -> None:
        if isinstance(packet, pk.Publish):
            self._on_publish(packet)
        elif isinstance(packet, pk.PublishAck):
            self._on_publish_ack(packet)
        elif isinstance(packet, pk.Subscribe):
            await self._on_subscribe(packet)
        elif isinstance(packet, pk.Unsubscribe):
            await self._on_unsubscribe(packet)
        elif isinstance(packet, pk.PingReq):
            self._send(pk.PingResp())
        elif isinstance(packet, pk.Connect):
            await self._on_connect(packet)
        elif isinstance(packet, pk.Disconnect):
            self._on_disconnect(packet)
        elif isinstance(packet, pk.Auth):
            raise ConnectionEnded(rc.PROTOCOL_ERROR, "AUTH without an authentication method")

    # --- CONNECT --------------------------------------------------------------------------------

    async def _refuse(self, code: int, why: str) -> None:
        log.info("MQTT CONNECT from %s refused: %s", self._peer, why)
        self._send(pk.ConnAck(code if self.version == pk.V5 else rc.V3_CONNACK[code]))
        self._close()

    async def _on_connect(self, connect: pk.Connect) -> None:
        version = connect.version
        username = connect.username or ""
        vhost, _, name = username.rpartition(":") if ":" in username else ("/", "", username)
        password = (connect.password or b"").decode("utf-8", "replace")
        if connect.properties.get("authentication_method") is not None:
            return await self._refuse(rc.BAD_AUTHENTICATION_METHOD if version == pk.V5 else rc.NOT_AUTHORIZED,
                                      "enhanced authentication is not offered")
        user = await self.port.log_in(name, password, _host(self._peer), default_guest=self.settings.default_guest)
        if user is None:
            return await self._refuse(rc.BAD_USER_NAME_OR_PASSWORD, f"bad credentials for user {name!r}")
        namespace = self.port.namespace_of(vhost)
        if namespace is None or not self.port.may_open(user, *namespace):
            return await self._refuse(rc.NOT_AUTHORIZED, f"user {name!r} may not use vhost {vhost!r}")
        client_id = connect.client_id
        assigned = None
        if not client_id:
            if version != pk.V5 and not connect.clean_start:
                return await self._refuse(rc.CLIENT_IDENTIFIER_NOT_VALID, "empty client id with a kept session")
            client_id = assigned = "auto-" + uuid.uuid4().hex
        if len(client_id.encode()) > MAX_CLIENT_ID_BYTES:
            return await self._refuse(rc.CLIENT_IDENTIFIER_NOT_VALID, "client id too long")
        if connect.will is not None:
            try:
                check_name(connect.will.topic)
            except InvalidTopic as exc:
                raise ConnectionEnded(rc.TOPIC_NAME_INVALID, str(exc)) from None
        if version == pk.V5:
            expiry = min(connect.properties.get("session_expiry_interval", 0), self.settings.max_session_expiry_s)
            self.client_receive_maximum = connect.properties.get("receive_maximum", DEFAULT_RECEIVE_MAXIMUM)
            if self.client_receive_maximum == 0:
                raise ConnectionEnded(rc.PROTOCOL_ERROR, "receive maximum 0")
        else:
            expiry = 0 if connect.clean_start else NEVER_EXPIRES
        self.client_id = client_id
        self.client.user, (self.client.tenant, self.client.namespace) = user.principal.user, namespace
        self.client.client_id = client_id
        self.space = await self.port.namespace(*namespace)
        key = (*namespace, client_id)
        async with self.broker.session_lock(key):
            session = await self.broker.session_for(key)
            if session is not None and session.connection is not None:
                await session.connection.take_over()
                session = self.broker.session_for_now(key)
                if session is not None and not session.durable:   # it ended with its connection
                    await self._discard(session)
                    session = None
            if session is not None and session.expired(self.port.now_ms()):    # ran out while the gateway was down
                await self._discard(session)
                session = None
            if session is not None:
                for handle in (session.expiry_handle, session.will_handle):
                    if handle is not None:
                        handle.cancel()
                session.expiry_handle = session.will_handle = None
                if connect.clean_start:
                    await self._discard(session)
                    session = None
            present = session is not None
            if session is None:
                session = Session(*namespace, client_id)
            was_durable = session.durable
            session.expiry_s = expiry
            session.connection = self
            session.offline_since_ms = None
            self.session = session
            self.broker.sessions[key] = session
            # A clean session gets its queue with its first subscription: a device that only
            # publishes costs no queue.
            queue = None
            if session.durable or any(s.share_group is None for s in session.subscriptions.values()):
                queue = await self.port.open_queue(self.space, queue_name(client_id), durable=session.durable)
            for subscription in session.subscriptions.values():
                if subscription.share_group is None:
                    await self.port.bind(self.space, queue.name, routing_key(subscription.topic_filter))
            if session.durable:
                await self.broker.stored_sessions.save(session)
            elif was_durable:
                await self.broker.stored_sessions.drop(session)
        self.will = connect.will
        self.machine._framer.max_packet_bytes = self.settings.max_packet_bytes
        properties = {}
        if version == pk.V5:
            properties = {"receive_maximum": self.settings.receive_maximum,
                          "topic_alias_maximum": self.settings.topic_alias_maximum,
                          "maximum_packet_size": self.settings.max_packet_bytes,
                          "retain_available": 1, "wildcard_subscription_available": 1,
                          "shared_subscription_available": 1, "subscription_identifier_available": 1}
            if assigned is not None:
                properties["assigned_client_identifier"] = assigned
            if connect.properties.get("session_expiry_interval", 0) != expiry:
                properties["session_expiry_interval"] = expiry
        self.machine.connected = True
        self._send(pk.ConnAck(rc.SUCCESS, present, properties))
        for packet_id in sorted(session.awaiting_pubcomp):
            self._send(pk.PublishAck(pk.PUBREL, packet_id))
        if queue is not None:
            await self._consume(queue, None)
        for subscription in session.subscriptions.values():
            if subscription.share_group is not None:
                await self._consume_share(subscription)

    async def _consume(self, queue: Queue, share: Subscription | None) -> None:
        consumer = SessionConsumer(self, queue, self.client_receive_maximum, share)
        self.consumers[queue.name] = consumer
        await self.port.consume(queue, consumer)

    async def _session_queue(self) -> Queue:
        """The session's queue, declared and consumed from on first use."""
        name = queue_name(self.client_id)
        consumer = self.consumers.get(name)
        if consumer is not None:
            return consumer.queue
        queue = await self.port.open_queue(self.space, name, durable=self.session.durable)
        await self._consume(queue, None)
        return queue

    async def _consume_share(self, subscription: Subscription) -> None:
        name = share_queue_name(subscription.share_group, subscription.topic_filter)
        queue = await self.port.open_queue(self.space, name, durable=True, auto_delete=True)
        await self.port.bind(self.space, name, routing_key(subscription.topic_filter))
        if name not in self.consumers:
            await self._consume(queue, subscription)

    async def _discard(self, session: Session) -> None:
        """The session ends: its queue, its stored document and its place in the broker go."""
        await self.port.delete_queue(self.space, queue_name(session.client_id))
        await self.broker.stored_sessions.drop(session)
        if self.broker.sessions.get(session.key) is session:
            del self.broker.sessions[session.key]

    # --- DISCONNECT and the end ------------------------------------------------------------------

    def _on_disconnect(self, disconnect: pk.Disconnect) -> None:
        self._send_will = disconnect.reason_code == rc.DISCONNECT_WITH_WILL
        expiry = disconnect.properties.get("session_expiry_interval")
        if expiry is not None and self.session is not None:
            if self.session.expiry_s == 0 and expiry > 0:
                raise ConnectionEnded(rc.PROTOCOL_ERROR, "session expiry set on DISCONNECT after 0 on CONNECT")
            self.session.expiry_s = min(expiry, self.settings.max_session_expiry_s)
        self._close()

    async def _end(self) -> None:
        self.port.connection_closed(self.client)
        self._flush_all()       # QoS 0 deliveries already written are acknowledged, not handed out again
        session = self.session
        mine = session is not None and session.connection is self
        if mine:
            session.connection = None        # offline from here on: a new connection may take it
            if self.will is not None and self._send_will:
                self._publish_will(session)
        self._released.set()
        for consumer in list(self.consumers.values()):
            try:
                await self.port.stop_consuming(self.space, consumer.queue, consumer)
            except Exception as exc:          # closing down: the queues may be closed already
                log.warning("MQTT client %r: leaving queue %s failed: %s", self.client_id, consumer.queue.name, exc)
        self.consumers.clear()
        if not mine or self._taken_over:
            return
        async with self.broker.session_lock(session.key):
            if session.connection is not None or self.broker.sessions.get(session.key) is not session:
                return                        # a new connection has it now
            try:
                if not session.durable:
                    await self._discard(session)
                else:
                    session.offline_since_ms = self.port.now_ms()
                    await self.broker.stored_sessions.save(session)
                    if session.expiry_s != NEVER_EXPIRES:
                        session.expiry_handle = self._loop.call_later(session.expiry_s, self._expire, session)
            except Exception as exc:          # closing down: the store may be gone already
                log.warning("MQTT client %r: ending its session failed: %s", self.client_id, exc)

    def _expire(self, session: Session) -> None:
        asyncio.ensure_future(self._expire_now(session))

    async def _expire_now(self, session: Session) -> None:
        async with self.broker.session_lock(session.key):
            if session.connection is None and self.broker.sessions.get(session.key) is session:
                await self._discard(session)

    def _publish_will(self, session: Session) -> None:
        will = self.will
        delay = will.properties.get("will_delay_interval", 0) if self.version == pk.V5 else 0
        delay = min(delay, session.expiry_s)
        if delay > 0:
            session.will_handle = self._loop.call_later(delay, lambda: asyncio.ensure_future(self._will_now(will)))
        else:
            asyncio.ensure_future(self._will_now(will))

    async def _will_now(self, will: pk.Will) -> None:
        properties = {name: will.properties[name] for name in _WILL_PROPERTIES if name in will.properties}
        message = self._message(will.topic, will.payload, will.qos, will.retain, properties)
        try:
            waiting, _ = self._route(message)
            if waiting:
                await asyncio.gather(*waiting)
        except Exception as exc:
            log.warning("MQTT client %r: publishing its will failed: %s", self.client_id, exc)

    # --- PUBLISH from the client ------------------------------------------------------------------

    def _message(self, topic: str, payload: bytes, qos: int, retain: bool, properties: dict) -> Message:
        expiry = properties.pop("message_expiry_interval", None)
        now = self.port.now_ms()
        return Message(topic, payload, qos, retain, properties, self.client_id,
                       None if expiry is None else now + expiry * 1000)

    def _route(self, message: Message) -> tuple[list[Awaitable], bool]:
        """Append to every queue the topic reaches (and keep it as retained): what to wait for, and
        whether any queue was reached."""
        waiting = self.port.publish(self.space, routing_key(message.topic), to_record(message, self.port.now_ms()),
                                    expires=message.expires_at_ms is not None)
        routed = bool(waiting)
        if message.retain:
            waiting.append(asyncio.ensure_future(self.broker.retained.put(self.space.tenant, self.space.namespace,
                                                                          message)))
        return waiting, routed

    def _on_publish(self, publish: pk.Publish) -> None:
        try:
            check_name(publish.topic)
        except InvalidTopic as exc:
            raise ConnectionEnded(rc.TOPIC_NAME_INVALID, str(exc)) from None
        if publish.qos and publish.packet_id not in self._inbound_qos:
            if len(self._inbound_qos) >= self.settings.receive_maximum and self.version == pk.V5:
                raise ConnectionEnded(rc.RECEIVE_MAXIMUM_EXCEEDED, "more QoS 1/2 publishes in flight than allowed")
        session = self.session
        kind = pk.PUBACK if publish.qos == 1 else pk.PUBREC
        if publish.qos == 2 and publish.packet_id in session.received_qos2:
            self._reply(None, pk.PublishAck(pk.PUBREC, publish.packet_id))   # stored already: not again
            return
        properties = {name: publish.properties[name] for name in (*CARRIED, "message_expiry_interval", "user_property")
                      if name in publish.properties}
        message = self._message(publish.topic, publish.payload, publish.qos, publish.retain, properties)
        waiting, routed = self._route(message)
        if publish.qos == 0:
            for future in waiting:
                asyncio.ensure_future(future).add_done_callback(_quiet)
            return
        code = rc.SUCCESS if routed or self.version != pk.V5 else rc.NO_MATCHING_SUBSCRIBERS
        self._inbound_qos.add(publish.packet_id)
        stored = _all_of(waiting)
        if publish.qos == 2:
            if session.durable:     # the identifier is stored too before PUBREC: a resend after a restart is known
                stored = asyncio.ensure_future(self._qos2_stored(stored, publish.packet_id))
            else:
                session.received_qos2.add(publish.packet_id)
        self._reply(stored, pk.PublishAck(kind, publish.packet_id, code), publish.packet_id)

    async def _qos2_stored(self, stored: asyncio.Future | None, packet_id: int) -> None:
        if stored is not None:
            await stored
        self.session.received_qos2.add(packet_id)
        await self.broker.stored_sessions.save(self.session)

    def _reply(self, waiting: asyncio.Future | None, packet: pk.PublishAck, packet_id: int = 0) -> None:
        """Send `packet` once `waiting` is done and every reply before it was sent."""
        self._replies.append((waiting, packet, packet_id))
        if waiting is None:
            self._send_replies()
        else:
            waiting.add_done_callback(self._send_replies)

    def _send_replies(self, _future: asyncio.Future | None = None) -> None:
        replies = self._replies
        while replies:
            waiting, packet, packet_id = replies[0]
            if waiting is not None and not waiting.done():
                return
            replies.popleft()
            self._inbound_qos.discard(packet_id)
            if waiting is not None and (waiting.cancelled() or waiting.exception() is not None):
                error = "cancelled" if waiting.cancelled() else waiting.exception()
                log.warning("MQTT client %r: storing a publish failed: %s", self.client_id, error)
                if self.version != pk.V5:
                    self._close()      # 3.1.1 has no way to say so: the client sends it again
                    return
                packet.reason_code = rc.UNSPECIFIED_ERROR
            self._send(packet)

    def _on_publish_ack(self, ack: pk.PublishAck) -> None:
        session = self.session
        if session is None:
            raise ConnectionEnded(rc.PROTOCOL_ERROR, "acknowledgement before CONNECT")
        if ack.kind == pk.PUBREL:
            known = ack.packet_id in session.received_qos2
            session.received_qos2.discard(ack.packet_id)
            code = rc.SUCCESS if known or self.version != pk.V5 else rc.PACKET_IDENTIFIER_NOT_FOUND
            saved = asyncio.ensure_future(self.broker.stored_sessions.save(session)) if known and session.durable else None
            self._reply(saved, pk.PublishAck(pk.PUBCOMP, ack.packet_id, code))
            return
        if ack.kind == pk.PUBCOMP:
            session.awaiting_pubcomp.discard(ack.packet_id)
            return
        entry = self.inflight.pop(ack.packet_id, None)
        if entry is not None:
            queue, offset = entry
            if queue is not None:
                self._pending_acks.setdefault(queue, []).append(offset)
                self._schedule_flush()
        if ack.kind == pk.PUBREC and entry is not None and ack.reason_code < 0x80:
            session.awaiting_pubcomp.add(ack.packet_id)
            self._send(pk.PublishAck(pk.PUBREL, ack.packet_id))

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_all)

    # --- SUBSCRIBE / UNSUBSCRIBE -----------------------------------------------------------------

    async def _on_subscribe(self, subscribe: pk.Subscribe) -> None:
        session = self.session
        identifier = None
        if self.version == pk.V5:
            identifiers = subscribe.properties.get("subscription_identifier", [])
            identifier = identifiers[0] if identifiers else None
            if identifier == 0:
                raise ConnectionEnded(rc.PROTOCOL_ERROR, "subscription identifier 0")
        codes = []
        fresh: list[Subscription] = []
        for request in subscribe.requests:
            try:
                group, topic_filter = split_shared(check_filter(request.topic_filter))
            except InvalidTopic as exc:
                log.info("MQTT client %r: %s", self.client_id, exc)
                codes.append(rc.TOPIC_FILTER_INVALID if self.version == pk.V5 else rc.V3_SUBACK_FAILURE)
                continue
            if group is not None and request.no_local:
                raise ConnectionEnded(rc.PROTOCOL_ERROR, "no local on a shared subscription")
            request.qos = min(request.qos, 2)
            subscription = Subscription(request, identifier, group, topic_filter)
            existed = request.topic_filter in session.subscriptions
            session.subscriptions[request.topic_filter] = subscription
            try:
                if group is None:
                    queue = await self._session_queue()
                    await self.port.bind(self.space, queue.name, routing_key(topic_filter))
                else:
                    await self._consume_share(subscription)
            except CoreError as exc:
                log.warning("MQTT client %r: subscribing to %s failed: %s", self.client_id, request.topic_filter, exc)
                del session.subscriptions[request.topic_filter]
                codes.append(rc.UNSPECIFIED_ERROR if self.version == pk.V5 else rc.V3_SUBACK_FAILURE)
                continue
            codes.append(request.qos)
            if group is None and (request.retain_handling == 0 or (request.retain_handling == 1 and not existed)):
                fresh.append(subscription)
        await self.broker.stored_sessions.save(session)
        self._send(pk.SubAck(subscribe.packet_id, codes))
        for subscription in fresh:
            await self._send_retained(subscription)

    async def _send_retained(self, subscription: Subscription) -> None:
        now = self.port.now_ms()
        for message in await self.broker.retained.matching(self.space.tenant, self.space.namespace,
                                                           subscription.topic_filter, now):
            qos = min(message.qos, subscription.request.qos)
            self._publish_to_client(message, qos, True, [subscription], None, 0, False, now)

    async def _on_unsubscribe(self, unsubscribe: pk.Unsubscribe) -> None:
        session = self.session
        codes = []
        for topic_filter in unsubscribe.topic_filters:
            subscription = session.subscriptions.pop(topic_filter, None)
            if subscription is None:
                codes.append(rc.NO_SUBSCRIPTION_EXISTED)
                continue
            if subscription.share_group is None:
                await self.port.unbind(self.space, queue_name(session.client_id), routing_key(subscription.topic_filter))
            else:
                name = share_queue_name(subscription.share_group, subscription.topic_filter)
                consumer = self.consumers.pop(name, None)
                if consumer is not None:
                    await self.port.stop_consuming(self.space, consumer.queue, consumer)
            codes.append(rc.SUCCESS)
        await self.broker.stored_sessions.save(session)
        self._send(pk.UnsubAck(unsubscribe.packet_id, codes))

    # --- deliveries -------------------------------------------------------------------------------

    def deliver(self, consumer: SessionConsumer, queued: QueuedMessage) -> None:
        """A message of one of this session's queues (called by the queue's dispatcher)."""
        message = from_queued(queued)
        now = self.port.now_ms()
        if consumer.share is not None:
            subscriptions = [consumer.share] if matches(consumer.share.topic_filter, message.topic) else []
        else:
            subscriptions = [s for s in self.session.subscriptions.values()
                             if s.share_group is None and matches(s.topic_filter, message.topic)]
        subscriptions = [s for s in subscriptions if not (s.request.no_local and message.sender == self.client_id)]
        expired = message.expires_at_ms is not None and message.expires_at_ms <= now
        if not subscriptions or expired:
            self._pending_acks.setdefault(consumer.queue, []).append(queued.offset)
            self._schedule_flush()
            return
        qos = min(message.qos, max(s.request.qos for s in subscriptions))
        retain = message.retain and any(s.request.retain_as_published for s in subscriptions)
        self._publish_to_client(message, qos, retain, subscriptions, consumer.queue, queued.offset,
                                queued.redelivered, now)

    def _publish_to_client(self, message: Message, qos: int, retain: bool, subscriptions: list[Subscription],
                           queue: Queue | None, offset: int, dup: bool, now: int) -> None:
        properties = {}
        if self.version == pk.V5:
            properties = dict(message.properties)
            identifiers = sorted({s.identifier for s in subscriptions if s.identifier})
            if identifiers:
                properties["subscription_identifier"] = identifiers
            if message.expires_at_ms is not None:
                properties["message_expiry_interval"] = max(0, math.ceil((message.expires_at_ms - now) / 1000))
        packet_id = 0
        if qos:
            packet_id = self.machine.take_packet_id(self.inflight.keys() | self.session.awaiting_pubcomp)
        sent = self._send(pk.Publish(message.topic, message.payload, qos, retain, dup and qos > 0, packet_id,
                                     properties))
        if qos and sent:
            self.inflight[packet_id] = (queue, offset)
        elif queue is not None:
            self._pending_acks.setdefault(queue, []).append(offset)
            self._schedule_flush()


def _host(peer) -> str | None:
    return peer[0] if isinstance(peer, tuple) and peer else None


def _all_of(waiting: list[Awaitable]) -> asyncio.Future | None:
    """One future for all of `waiting` (None for nothing to wait for)."""
    if not waiting:
        return None
    if len(waiting) == 1:
        return asyncio.ensure_future(waiting[0])
    return asyncio.gather(*waiting)


def _quiet(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()

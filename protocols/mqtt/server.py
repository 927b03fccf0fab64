"""The asyncio adapter: one task per MQTT connection, bytes from the socket into the connection's
machine (machine/connection.py), each packet to its handler (handlers/), deliveries from the
session's queues (delivery.py), and what they answer back out.

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
from collections import deque

from core.queues.queue import Queue
from core.trace import CURRENT_CLIENT
from protocols.mqtt.broker import MqttBroker, MqttSettings
from protocols.mqtt.codec import packets as pk
from protocols.mqtt.delivery import SessionConsumer
from protocols.mqtt.handlers import connect, publish, subscribe
from protocols.mqtt.machine import errors as rc
from protocols.mqtt.machine.connection import MqttMachine
from protocols.mqtt.machine.errors import ConnectionEnded
from protocols.mqtt.machine.topics import routing_key
from protocols.mqtt.session import NEVER_EXPIRES, Session, Subscription, queue_name, share_queue_name

log = logging.getLogger("gateway.mqtt")

READ_BYTES = 256 * 1024
OUTPUT_HIGH_WATER = 4 << 20
DEFAULT_RECEIVE_MAXIMUM = 65_535


class MqttConnectionHandler:
    def __init__(self, broker: MqttBroker) -> None:
        self.broker = broker

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await MqttConnection(self.broker, reader, writer).run()


def make_broker(core, queues, settings: MqttSettings | None = None) -> MqttBroker:
    return MqttBroker(core, settings or MqttSettings(), queues)


def connection_handler(broker: MqttBroker) -> MqttConnectionHandler:
    return MqttConnectionHandler(broker)


class MqttConnection:
    def __init__(self, broker: MqttBroker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.port = broker.port
        self.settings = broker.settings
        self.machine = MqttMachine(self.settings.connect_max_packet_bytes, self.settings.topic_alias_maximum)
        self._reader = reader
        self._writer = writer
        self.loop = asyncio.get_running_loop()
        self.peer = writer.get_extra_info("peername")
        self.client = self.port.connection_opened(self.peer, self._close_for_operator)
        self.session: Session | None = None
        self.user = None                       # the core's User, once CONNECT was accepted
        self.space = None
        self.will: pk.Will | None = None
        self.client_id = ""
        self.client_receive_maximum = DEFAULT_RECEIVE_MAXIMUM
        self.inflight: dict[int, tuple[Queue | None, int]] = {}    # packet id -> (queue, offset)
        self.consumers: dict[str, SessionConsumer] = {}             # by queue name
        self.inbound_qos: set[int] = set()       # QoS 1/2 publishes received and not yet answered
        self.replies: deque[asyncio.Future] = deque()
        self._output: list[bytes] = []
        self._flush_scheduled = False
        self.pending_acks: dict[Queue, list[int]] = {}
        self.released = asyncio.Event()       # the session is offline: another connection may take it
        self.taken_over = False
        self.send_will = True               # False after a normal DISCONNECT
        self.closed = False

    @property
    def version(self) -> int:
        return self.machine.version or pk.V311

    # --- the connection's life ------------------------------------------------------------------

    async def run(self) -> None:
        CURRENT_CLIENT.set(self.client)
        timer = asyncio.create_task(self._keep_time(), name=f"mqtt-timer {self.peer}")
        try:
            await self._serve()
        except ConnectionEnded as exc:
            log.info("MQTT connection from %s closed: %s (reason 0x%02x)", self.peer, exc, exc.reason_code)
            if self.machine.version == pk.V5:
                self.send(pk.Disconnect(exc.reason_code, {"reason_string": str(exc)[:200]}))
        except pk.UnsupportedProtocol as exc:
            log.info("MQTT connection from %s refused: %s", self.peer, exc)
            code = rc.UNSUPPORTED_PROTOCOL_VERSION
            if exc.level != pk.V5:
                code = rc.V3_CONNACK[code]
            self._output.append(pk.ConnAck(code).encode(pk.V311))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:
            log.exception("MQTT connection from %s failed", self.peer)
        finally:
            timer.cancel()
            try:
                await self._end()
            finally:
                self.flush()
                self._writer.close()
                self.released.set()

    async def _serve(self) -> None:
        while not self.closed:
            data = await self._reader.read(READ_BYTES)
            if not data:
                return
            for packet in self.machine.receive(data, self.loop.time()):
                await self._handle(packet)
                if self.closed:
                    return
            self.flush()

    def close(self) -> None:
        """Stop: the serve loop ends after the packet in hand, the socket closes once output is sent."""
        self.closed = True
        self.flush_all()
        self._writer.transport.close()

    def _close_for_operator(self, reason: str) -> None:
        if self.machine.version == pk.V5:
            self.send(pk.Disconnect(rc.IMPLEMENTATION_SPECIFIC_ERROR, {"reason_string": reason[:200]}))
        self.close()

    async def take_over(self) -> None:
        """Another connection with this client id came: end this one, wait until it is released."""
        self.taken_over = True
        if self.machine.version == pk.V5:
            self.send(pk.Disconnect(rc.SESSION_TAKEN_OVER))
        self.close()
        await self.released.wait()

    async def _keep_time(self) -> None:
        opened = self.loop.time()
        while True:
            keep_alive = self.machine.keep_alive_s
            await asyncio.sleep(max(1.0, keep_alive / 4) if keep_alive else 1.0)
            now = self.loop.time()
            if self.session is None and self.machine.version is None and now - opened > self.settings.connect_timeout_s:
                log.info("MQTT connection from %s sent no CONNECT in time", self.peer)
                self.close()
                return
            if self.machine.keep_alive_expired(now):
                log.info("MQTT client %r from %s silent past its keep-alive", self.client_id, self.peer)
                if self.machine.version == pk.V5:
                    self.send(pk.Disconnect(rc.KEEP_ALIVE_TIMEOUT))
                self.close()
                return

    # --- output ---------------------------------------------------------------------------------

    def send(self, packet) -> bool:
        data = self.machine.encode(packet)
        if data is None:
            return False
        self._output.append(data)
        self.schedule_flush()
        return True

    def flush(self) -> None:
        """Write what waits (one write per event-loop turn)."""
        if self._output:
            data = b"".join(self._output)
            self._output.clear()
            if not self._writer.transport.is_closing():
                self._writer.write(data)

    def schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush_all)

    def ack_later(self, queue: Queue, offset: int) -> None:
        """Acknowledge a delivery at the end of this event-loop turn (never inside the queue's dispatch)."""
        self.pending_acks.setdefault(queue, []).append(offset)
        self.schedule_flush()

    def flush_all(self) -> None:
        """Output, then the acknowledgements owed to queues: never from inside a queue's dispatch."""
        self._flush_scheduled = False
        self.flush()
        if self.pending_acks:
            pending, self.pending_acks = self.pending_acks, {}
            for queue, offsets in pending.items():
                self.port.ack(queue, offsets)

    def can_deliver(self) -> bool:
        return (not self.closed and len(self.inflight) < self.client_receive_maximum
                and self._writer.transport.get_write_buffer_size() < OUTPUT_HIGH_WATER)

    # --- packets --------------------------------------------------------------------------------

    async def _handle(self, packet) -> None:
        if isinstance(packet, pk.Publish):
            publish.on_publish(self, packet)
        elif isinstance(packet, pk.PublishAck):
            publish.on_publish_ack(self, packet)
        elif isinstance(packet, pk.Subscribe):
            await subscribe.on_subscribe(self, packet)
        elif isinstance(packet, pk.Unsubscribe):
            await subscribe.on_unsubscribe(self, packet)
        elif isinstance(packet, pk.PingReq):
            self.send(pk.PingResp())
        elif isinstance(packet, pk.Connect):
            await connect.on_connect(self, packet)
        elif isinstance(packet, pk.Disconnect):
            self._on_disconnect(packet)
        elif isinstance(packet, pk.Auth):
            raise ConnectionEnded(rc.PROTOCOL_ERROR, "AUTH without an authentication method")

    # --- the session's queues ----------------------------------------------------------------------

    async def consume(self, queue: Queue, share: Subscription | None) -> None:
        consumer = SessionConsumer(self, queue, self.client_receive_maximum, share)
        self.consumers[queue.name] = consumer
        await self.port.consume(queue, consumer)

    async def session_queue(self) -> Queue:
        """The session's queue, declared and consumed from on first use."""
        name = queue_name(self.client_id)
        consumer = self.consumers.get(name)
        if consumer is not None:
            return consumer.queue
        queue = await self.port.open_queue(self.space, name, durable=self.session.durable)
        await self.consume(queue, None)
        return queue

    async def consume_share(self, subscription: Subscription) -> None:
        name = share_queue_name(subscription.share_group, subscription.topic_filter)
        queue = await self.port.open_queue(self.space, name, durable=True, auto_delete=True)
        await self.port.bind(self.space, name, routing_key(subscription.topic_filter))
        if name not in self.consumers:
            await self.consume(queue, subscription)

    async def discard(self, session: Session) -> None:
        """The session ends: its queue, its stored document and its place in the broker go."""
        await self.port.delete_queue(self.space, queue_name(session.client_id))
        await self.broker.stored_sessions.drop(session)
        if self.broker.sessions.get(session.key) is session:
            del self.broker.sessions[session.key]

    # --- DISCONNECT and the end ------------------------------------------------------------------

    def _on_disconnect(self, disconnect: pk.Disconnect) -> None:
        self.send_will = disconnect.reason_code == rc.DISCONNECT_WITH_WILL
        expiry = disconnect.properties.get("session_expiry_interval")
        if expiry is not None and self.session is not None:
            if self.session.expiry_s == 0 and expiry > 0:
                raise ConnectionEnded(rc.PROTOCOL_ERROR, "session expiry set on DISCONNECT after 0 on CONNECT")
            self.session.expiry_s = min(expiry, self.settings.max_session_expiry_s)
        self.close()

    async def _end(self) -> None:
        self.port.connection_closed(self.client)
        self.flush_all()       # QoS 0 deliveries already written are acknowledged, not handed out again
        session = self.session
        mine = session is not None and session.connection is self
        if mine:
            session.connection = None        # offline from here on: a new connection may take it
            if self.will is not None and self.send_will:
                publish.publish_will(self, session)
        self.released.set()
        for consumer in list(self.consumers.values()):
            try:
                await self.port.stop_consuming(self.space, consumer.queue, consumer)
            except Exception as exc:          # closing down: the queues may be closed already
                log.warning("MQTT client %r: leaving queue %s failed: %s", self.client_id, consumer.queue.name, exc)
        self.consumers.clear()
        if not mine or self.taken_over:
            return
        async with self.broker.session_lock(session.key):
            if session.connection is not None or self.broker.sessions.get(session.key) is not session:
                return                        # a new connection has it now
            try:
                if not session.durable:
                    await self.discard(session)
                else:
                    session.offline_since_ms = self.port.now_ms()
                    await self.broker.stored_sessions.save(session)
                    if session.expiry_s != NEVER_EXPIRES:
                        session.expiry_handle = self.loop.call_later(session.expiry_s, self._expire, session)
            except Exception as exc:          # closing down: the store may be gone already
                log.warning("MQTT client %r: ending its session failed: %s", self.client_id, exc)

    def _expire(self, session: Session) -> None:
        asyncio.ensure_future(self._expire_now(session))

    async def _expire_now(self, session: Session) -> None:
        async with self.broker.session_lock(session.key):
            if session.connection is None and self.broker.sessions.get(session.key) is session:
                await self.discard(session)

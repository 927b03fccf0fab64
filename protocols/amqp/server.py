"""The asyncio adapter: one task per AMQP connection, bytes from the socket into the connection
machine (machine/connection.py), its events to the handlers, and what they answer back out.

Events are handled one after another in arrival order; a handler that needs storage (declaring,
binding, basic.get) is awaited before the next event, so a channel's methods take effect in order.
basic.publish and the acks never wait: a publish is routed and queued for its queues' next batch at
once, and its confirm follows when the batch is durable. A method that looks at a queue's messages
(basic.get, queue.declare's count, queue.purge, queue.delete) first waits for this connection's
publishes to that queue to be stored, so it sees them, as it would in RabbitMQ.

Deliveries are written by the queues' dispatchers (other tasks) into this connection's output; what
is written in one event-loop turn goes to the transport as one write (one system call, not one per
delivery or confirm), sooner once OUTPUT_FLUSH_BYTES wait. Back-pressure: once more than
OUTPUT_HIGH_WATER bytes wait to be sent, the consumers of
this connection get nothing more until the transport drains; while a queue this connection published
to holds more than its backlog limit not yet durable, or the output is beyond OUTPUT_PAUSE_READING,
the connection is not read (TCP pushes back on the client); a client with the connection.blocked
capability is sent connection.blocked when that starts for a queue backlog, and
connection.unblocked when it ends.

Timers (one task per connection, ticking every TICK_S at most): the handshake must finish within
handshake_timeout_s; heartbeats are sent when nothing else was for half the negotiated interval, and
a peer silent for two intervals is dropped; after our connection.close the client has
CLOSE_OK_TIMEOUT_S to answer; a channel whose oldest unacknowledged delivery is older than its
queue's x-consumer-timeout (else consumer_timeout_ms) is closed with PRECONDITION_FAILED, as
RabbitMQ's delivery acknowledgement timeout, which gives what it held back to its queues
(core/queues/ack_timeout.py). The timer closes channels only between two reads' events, never while
a method is half handled.

When the connection ends, however it ends, its channels give back what they held unacknowledged
(redelivered first), its consumers go (auto-delete queues with them) and its exclusive queues are
deleted.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import ssl
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field, replace

from core.access import AccessControl, Action, UserGrants
from core.auth import Permission, Principal, User, UserStore
from core.certificates import common_name, describe_tls
from core.connections import ClientConnection, peer_address
from core.errors import CoreError, StorageUnavailable
from core.queues.service import QueueService
from core.meters import NamespaceMeter
from core.queues.ack_timeout import DEFAULT_TIMEOUT_MS, DeliveryClock
from core.tokens import InvalidToken, TokenValidator, looks_like_jwt, token_user
from core.trace import CURRENT_CLIENT
from protocols.amqp import delayed
from protocols.amqp.channel import Channel
from protocols.amqp.codec.errors import DecodeError
from protocols.amqp.errors import from_core
from protocols.amqp.handlers import HANDLERS
from protocols.amqp.machine.connection import AmqpServerConnection, ConnectionState
from protocols.amqp.machine.handshake import EXTERNAL
from protocols.amqp.machine.errors import AmqpConnectionError, AmqpError, ChannelError
from protocols.amqp.machine.events import (
    AuthenticationRequested, ChannelErrorRaised, ConnectionCloseRequested, ConnectionClosed, ConnectionErrorRaised,
    ConnectionLost, ContentReceived, Event, MethodReceived, ProtocolHeaderAccepted, ProtocolHeaderRejected,
    VhostOpenRequested,
)
from protocols.amqp.machine.settings import ServerSettings
from protocols.amqp.spec import ReplyCode
from protocols.amqp.permissions import ResourceAccess
from protocols.amqp.session import Session
from protocols.amqp.vhosts import authenticate, vhost_namespace

log = logging.getLogger("gateway.amqp")

# Exactly the extensions that work (consumer priorities and direct reply-to do not yet).
CAPABILITIES = {
    "connection.blocked": True,
    "publisher_confirms": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "exchange_exchange_bindings": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}
READ_BYTES = 256 * 1024
OUTPUT_HIGH_WATER = 4 << 20
OUTPUT_FLUSH_BYTES = 128 << 10
OUTPUT_PAUSE_READING = 16 << 20
CLOSE_OK_TIMEOUT_S = 3.0
BLOCKED_REASON = "publish backlog above its limit: the storage is not keeping up"
RATE_LIMITED_REASON = "the namespace's publish rate limit is reached"
TICK_S = 1.0
_CHANNEL_LIFECYCLE = ("channel.open", "channel.close", "channel.close-ok")


@dataclass(frozen=True, slots=True)
class AmqpSettings:
    server: ServerSettings = field(default_factory=lambda: ServerSettings(capabilities=CAPABILITIES))
    default_guest: bool = True            # guest/guest on "/" from loopback, unless [[users]] has a guest
    handshake_timeout_s: float = 10.0     # RabbitMQ's handshake_timeout
    # RabbitMQ's consumer_timeout: how long a delivery may stay unacknowledged (queues without
    # x-consumer-timeout); None: no limit
    consumer_timeout_ms: int | None = DEFAULT_TIMEOUT_MS


class AmqpBroker:
    """What every AMQP connection shares."""

    def __init__(self, core, settings: AmqpSettings, queues: QueueService | None = None, *,
                 tokens: TokenValidator | None = None) -> None:
        self.core = core
        self.settings = settings
        # held messages are routed by their AMQP headers and properties
        self.queues = queues if queues is not None else QueueService(core, message_facts=delayed.message_facts)
        self.users = UserStore(core.metadata)
        self.tokens = tokens     # a JWT as the password (RabbitMQ's OAuth 2 backend); None: passwords only


def make_broker(core, settings: AmqpSettings | None = None, queues: QueueService | None = None, *,
                tokens: TokenValidator | None = None) -> AmqpBroker:
    return AmqpBroker(core, settings or AmqpSettings(), queues, tokens=tokens)


class AmqpConnectionHandler:
    """The listener's connection handler; `close()` saves the queues' state once connections are gone."""

    def __init__(self, broker: AmqpBroker) -> None:
        self.broker = broker

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await AmqpConnection(self.broker, reader, writer).run()

    async def close(self) -> None:
        await self.broker.queues.close()


def connection_handler(broker: AmqpBroker) -> AmqpConnectionHandler:
    return AmqpConnectionHandler(broker)


# The states in which a token login's expiry closes the connection (later ones are closing already).
_EXPIRABLE = (ConnectionState.HANDSHAKE, ConnectionState.OPEN)


class _Stop(Exception):
    """Nothing more is to be read: the connection is over."""


class AmqpConnection:
    def __init__(self, broker: AmqpBroker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        ssl_object = writer.get_extra_info("ssl_object")
        # A verified client certificate may log in by itself (RabbitMQ's rabbitmq_auth_mechanism_ssl):
        # EXTERNAL is offered where client certificates are asked for, and refused to a client without one
        self._certificate = (ssl_object.getpeercert() or None) if ssl_object is not None else None
        server = broker.settings.server
        if ssl_object is not None and ssl_object.context.verify_mode != ssl.CERT_NONE \
                and EXTERNAL not in server.mechanisms:
            server = replace(server, mechanisms=(EXTERNAL, *server.mechanisms))
        self.machine = AmqpServerConnection(server)
        self.clock = broker.core.clock
        self.channels: dict[int, Channel] = {}
        self.principal: Principal | None = None
        self.user: User | None = None
        self.token_expires_at: float | None = None   # a token login's "exp" (epoch seconds); None: no token
        self.session = Session(self.machine, self.write, self.clock, lambda: self.writable,
                               DeliveryClock(self.clock, int(TICK_S * 1000)), self.flush)
        self.meter: NamespaceMeter | None = None     # the vhost's namespace's rates, set when it is open
        self.writable = True                 # False while the output is backed up or the dispatch rate is spent
        self._rate_paused = False            # the namespace's dispatch rate holds deliveries back
        self._reader = reader
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._peer = writer.get_extra_info("peername")
        self._blocked = False                # connection.blocked sent, connection.unblocked not yet
        self._close_deadline: float | None = None
        self._drainer: asyncio.Task | None = None
        self._output: list[bytes] = []       # written this event-loop turn, not yet in the transport
        self._output_bytes = 0
        self._flush_scheduled = False
        self._handling = asyncio.Lock()      # held while a read's events are handled (the timer waits)
        self.client = broker.core.connections.add(ClientConnection("amqp", peer_address(self._peer),
                                                                    self._close_for_operator,
                                                                    tls=describe_tls(ssl_object)))
        self.session.client = self.client
        self.client.channels = self._channel_facts

    @property
    def username(self) -> str:
        return self.machine.username

    @property
    def vhost(self) -> str:
        return self.machine.vhost

    def _channel_facts(self) -> list[dict]:
        """The open channels, for operators (the admin API's channel list)."""
        return [{"number": number, "prefetch_count": channel.consumer_prefetch,
                 "global_prefetch_count": channel.channel_prefetch, "confirm": channel.confirming,
                 "transactional": channel.tx is not None, "consumer_count": len(channel.consumers),
                 "unacknowledged": len(channel.unacked)}
                for number, channel in sorted(self.channels.items())]

    # --- the connection's life ------------------------------------------------------------------

    async def run(self) -> None:
        CURRENT_CLIENT.set(self.client)   # who this task's appends and reads are for (core/trace.py)
        timer = asyncio.create_task(self._keep_time(), name=f"amqp-timer {self._peer}")
        try:
            await self._serve()
        except (_Stop, ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:
            log.exception("AMQP connection from %s failed", self._peer)
        finally:
            self.broker.core.connections.remove(self.client)
            timer.cancel()
            if self._drainer is not None:
                self._drainer.cancel()
            await self._release_everything()
            self.flush()
            self._writer.close()

    async def _serve(self) -> None:
        while not self.machine.terminated:
            data = await self._reader.read(READ_BYTES)
            async with self._handling:
                await self._handle(self.machine.receive_data(data, now=self._loop.time()))
            self.flush()
            if not data:
                return
            await self._apply_backpressure()

    async def _handle(self, events: list[Event]) -> None:
        pending = deque(events)
        while pending:
            event = pending.popleft()
            if isinstance(event, ContentReceived):
                failure = self._content(event)
                if failure is not None:
                    await failure
            elif isinstance(event, MethodReceived):
                if event.method_name == "basic.ack":
                    await self._acks(event, pending)
                else:
                    await self._method(event)
            elif isinstance(event, AuthenticationRequested):
                await self._authenticate(event)
                pending.extend(self.machine.next_events())
            elif isinstance(event, VhostOpenRequested):
                await self._open_vhost(event)
                pending.extend(self.machine.next_events())
            elif isinstance(event, ProtocolHeaderAccepted):
                self.write(event.data)
            elif isinstance(event, ProtocolHeaderRejected):
                self.write(event.data)
                raise _Stop
            elif isinstance(event, ChannelErrorRaised):
                self.write(event.data)
                await self._close_channel(event.channel)
            elif isinstance(event, ConnectionErrorRaised):
                log.info("closing AMQP connection from %s: %s", self._peer, event.reply_text)
                self.write(event.data)
                if event.lost_sync:
                    raise _Stop
                await self._closing()
            elif isinstance(event, ConnectionCloseRequested):
                await self._release_everything()
                self.write(self.machine.send_method(0, "connection.close-ok"))
                raise _Stop
            elif isinstance(event, (ConnectionClosed, ConnectionLost)):
                raise _Stop

    # --- handshake ------------------------------------------------------------------------------

    async def _authenticate(self, event: AuthenticationRequested) -> None:
        username = event.username
        try:
            if event.mechanism == EXTERNAL:
                # The user the certificate's CN names, who must exist (RabbitMQ's default: no password needed)
                username = (common_name(self._certificate) if self._certificate else None) or ""
                user = await self.broker.users.get(username)
            elif self.broker.tokens is not None and looks_like_jwt(event.password):
                user = await self._token_login(event.password)
            else:
                host = self._peer[0] if isinstance(self._peer, tuple) else None
                user = await authenticate(self.broker.users, event.username, event.password, host,
                                          default_guest=self.broker.settings.default_guest)
        except StorageUnavailable as exc:
            log.warning("AMQP login of user %r from %s cannot be checked now: %s", username, self._peer, exc)
            self.write(self.machine.defer_authentication("the broker cannot check logins now; retry later"))
            raise _Stop from None
        if user is None:
            log.info("AMQP login of user %r from %s (%s) refused", username, self._peer, event.mechanism)
            self.broker.core.audit.refused("login", "amqp", username, "login", "bad credentials",
                                           self.client.address)
            self.write(self.machine.refuse_authentication())
            raise _Stop
        self.client.mechanism = event.mechanism
        self.user, self.principal = user, user.principal
        self.broker.core.connections.logged_in(self.client, user.principal.user, user.principal.tenant,
                                               user.principal.namespace, stored=bool(user.scram))
        properties = self.machine.client_properties
        name = properties.get("connection_name") or properties.get("product")
        self.client.client_id = name if isinstance(name, str) else None
        self.write(self.machine.accept_authentication(username if event.mechanism == EXTERNAL else None))

    async def _grants(self) -> UserGrants:
        """The logged-in user's live grants; one the store does not hold (the built-in guest, a
        token's user) has fixed ones on its own namespace."""
        if not self.user.scram:
            own = self.user.principal
            return AccessControl.fixed(own, (Permission(own.tenant, own.namespace),))
        return await self.broker.core.access.grants(self.user.principal.user)

    async def _token_login(self, token: str) -> User | None:
        """As RabbitMQ's OAuth 2 backend: the password is the token, the user name is not looked at;
        the user is the one the token names (core/tokens.py)."""
        try:
            identity = await self.broker.tokens.validate(token)
        except InvalidToken as exc:
            log.info("AMQP token login from %s refused: %s", self._peer, exc)
            return None
        self.token_expires_at = identity.expires_at
        return await token_user(self.broker.users, identity)

    async def _open_vhost(self, event: VhostOpenRequested) -> None:
        mapped = vhost_namespace(event.vhost)
        core = self.broker.core
        refusal = grants = None
        if mapped is None or mapped[1] not in await core.registry.namespaces(mapped[0]):
            refusal = f"vhost {event.vhost} not found"
        elif self.user is None or (grants := await self._grants()).on(*mapped) is None:
            refusal = f"access to vhost '{event.vhost}' refused for user '{self.username}'"
            core.audit.refused("authorization", "amqp", self.username, f"vhost {event.vhost}", "open",
                               self.client.address)
        elif not await core.connections.enter(self.client, *mapped):
            refusal = f"vhost '{event.vhost}' is at its max_connections"
        if refusal is not None:
            self.write(self.machine.refuse_vhost(refusal))
            await self._closing()
            return

        def refused(kind: str, name: str, action: Action) -> None:
            core.audit.refused("authorization", "amqp", self.username, f"{kind} {mapped[0]}/{mapped[1]}/{name}",
                               action.value, self.client.address)

        self.session.access = ResourceAccess(grants, *mapped, event.vhost, self.username, refused)
        self.session.space = await self.broker.queues.namespace(*mapped)
        self.meter = await self.broker.core.meters.load(*mapped)
        self.write(self.machine.accept_vhost())

    # --- methods --------------------------------------------------------------------------------

    def _ignored(self, number: int, name: str) -> bool:
        """What was read after we closed the channel or the connection (in the same read) is dropped,
        as RabbitMQ drops everything after an error up to the client's close-ok."""
        if self._close_deadline is not None:
            return True
        return number != 0 and number not in self.channels and name not in _CHANNEL_LIFECYCLE

    async def _method(self, event: MethodReceived) -> None:
        number, name = event.channel, event.method_name
        if self._ignored(number, name):
            return
        try:
            if number == 0:    # connection.update-secret
                await self._update_secret(event.args)
            elif name == "channel.open":
                self.channels[number] = Channel(self.session, number)
                self.write(self.machine.send_method(number, "channel.open-ok"))
            elif name == "channel.close":
                await self._close_channel(number)
                self.write(self.machine.send_method(number, "channel.close-ok"))
            elif name == "channel.close-ok":
                pass    # the answer to our channel.close; the channel was released when we sent it
            else:
                handler = HANDLERS.get(name)
                if handler is None:
                    raise AmqpConnectionError(ReplyCode.NOT_IMPLEMENTED, f"{name} is not implemented",
                                              method_name=name)
                result = handler(self.channels[number], event.args)
                if inspect.isawaitable(result):
                    await result
        except Exception as exc:
            await self._failed(number, event.method.key, exc)

    async def _acks(self, first: MethodReceived, pending: deque[Event]) -> None:
        """basic.ack and the acks right after it on the same channel, applied together (consumers
        ack one message at a time, so one read holds many)."""
        run = [first]
        while pending and _is_ack_on(pending[0], first.channel):
            run.append(pending.popleft())
        channel = self.channels.get(first.channel)
        if channel is None or channel.tx is not None or self._ignored(first.channel, first.method_name):
            for event in run:    # one by one, as any method: dropped, or settled at commit
                await self._method(event)
            return
        try:
            channel.ack_all([(event.args["delivery_tag"], event.args["multiple"]) for event in run])
        except Exception as exc:
            await self._failed(first.channel, first.method.key, exc)

    async def _update_secret(self, args) -> None:
        """A token login takes a new token of the same user before its own expires, as RabbitMQ's
        OAuth 2 backend does (else NOT_ALLOWED closes the connection). A password login is checked
        once and never expires: as RabbitMQ with its internal user store, the new secret is taken
        without effect and acknowledged."""
        if self.token_expires_at is not None:
            secret = args["new_secret"]
            secret = secret.decode("utf-8", "replace") if isinstance(secret, bytes) else str(secret)
            try:
                identity = await self.broker.tokens.validate(secret)
            except InvalidToken as exc:
                raise AmqpConnectionError(ReplyCode.NOT_ALLOWED, f"Secret update was refused for user "
                                          f"'{self.principal.user}': {exc}") from None
            if (await token_user(self.broker.users, identity)).principal != self.principal:
                raise AmqpConnectionError(ReplyCode.NOT_ALLOWED, f"Secret update was refused for user "
                                          f"'{self.principal.user}': the token names another user")
            self.token_expires_at = identity.expires_at
        log.info("AMQP connection from %s (user %r) updated its secret: %s", self._peer, self.username,
                 args["reason"])
        self.write(self.machine.send_method(0, "connection.update-secret-ok"))

    def _content(self, event: ContentReceived):
        """basic.publish, synchronously (publishes never wait); the error path, or a publish that must
        look at the store before it can be routed, is returned to await."""
        if self._ignored(event.channel, event.method_name):
            return None
        try:
            later = HANDLERS[event.method_name](self.channels[event.channel], event)
        except Exception as exc:
            return self._failed(event.channel, event.method.key, exc)
        return None if later is None else self._content_later(event, later)

    async def _content_later(self, event: ContentReceived, later: Awaitable[None]) -> None:
        try:
            await later
        except Exception as exc:
            await self._failed(event.channel, event.method.key, exc)

    async def _failed(self, number: int, method_key: tuple[int, int], exc: Exception) -> None:
        if isinstance(exc, CoreError):
            error = from_core(exc, self.vhost, *method_key)
        elif isinstance(exc, AmqpError):
            error = exc
            if not (error.class_id or error.method_id):
                error.class_id, error.method_id = method_key
        elif isinstance(exc, DecodeError):
            error = AmqpConnectionError(exc.reply_code, str(exc), *method_key)
        else:
            log.exception("AMQP method %s on channel %d from %s failed", method_key, number, self._peer)
            error = AmqpConnectionError(ReplyCode.INTERNAL_ERROR, f"internal error: {exc!r}", *method_key)
        self.write(self.machine.send_error(number, error))
        if error.closes_connection:
            log.info("closing AMQP connection from %s: %s", self._peer, error.reply_text)
            await self._closing()
        else:
            await self._close_channel(number)

    # --- closing --------------------------------------------------------------------------------

    async def _close_channel(self, number: int) -> None:
        channel = self.channels.pop(number, None)
        if channel is not None:
            await self._release_channel(channel)

    async def _release_channel(self, channel: Channel) -> None:
        for queue in channel.close():
            try:
                await self.session.space.consumer_removed(queue)
            except CoreError as exc:
                log.warning("auto-deleting queue %s failed: %s", queue.name, exc)

    def _close_for_operator(self, reason: str) -> None:
        """connection.close with CONNECTION_FORCED (as RabbitMQ closes a connection from its
        management API); the timer drops the connection if no close-ok comes back in time."""
        self.write(self.machine.send_error(0, AmqpConnectionError(ReplyCode.CONNECTION_FORCED, reason)))
        self.flush()
        if self._close_deadline is None:
            self._close_deadline = self._loop.time() + CLOSE_OK_TIMEOUT_S

    async def _closing(self) -> None:
        """We sent connection.close: release everything now, wait a little for the close-ok."""
        self._close_deadline = self._loop.time() + CLOSE_OK_TIMEOUT_S
        await self._release_everything()

    async def _release_everything(self) -> None:
        channels, self.channels = list(self.channels.values()), {}
        for channel in channels:
            await self._release_channel(channel)
        if self.session.space is not None:
            try:
                await self.session.space.release_owner(self.session.owner)
            except CoreError as exc:
                log.warning("deleting the exclusive queues of %s failed: %s", self._peer, exc)

    # --- output ---------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if not data or self._writer.transport.is_closing():
            return
        self._output.append(data)
        self._output_bytes += len(data)
        self.machine.mark_sent(self._loop.time())
        if self._output_bytes >= OUTPUT_FLUSH_BYTES:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Hand what was written to the transport, as one write."""
        self._flush_scheduled = False
        if not self._output:
            return
        output, self._output, self._output_bytes = self._output, [], 0
        transport = self._writer.transport
        if transport.is_closing():
            return
        self._writer.write(output[0] if len(output) == 1 else b"".join(output))
        if self.writable and transport.get_write_buffer_size() > OUTPUT_HIGH_WATER:
            self.writable = False
            self._drainer = asyncio.create_task(self._wait_drained(), name=f"amqp-drain {self._peer}")
        if self.writable and self.meter is not None and self.meter.dispatch_limit is not None:
            self._check_dispatch_rate()

    async def _wait_drained(self) -> None:
        try:
            await self._writer.drain()
        except ConnectionError:
            return
        self._drainer = None
        self._resume_deliveries()

    def _check_dispatch_rate(self) -> None:
        """The namespace's dispatch rate (core/meters.py, shared with Kafka fetches) is spent: the
        consumers of this connection get nothing more until it allows again (checked per flush, not
        per delivery)."""
        delay = self.meter.dispatch_delay_s()
        if delay > 0:
            self.writable = False
            self._rate_paused = True
            self._loop.call_later(delay, self._end_rate_pause)

    def _end_rate_pause(self) -> None:
        self._rate_paused = False
        self._resume_deliveries()

    def _resume_deliveries(self) -> None:
        if self._drainer is not None or self._rate_paused:
            return   # still held back for the other reason
        self.writable = True
        for channel in list(self.channels.values()):
            channel.wake_consumers()

    async def _apply_backpressure(self) -> None:
        session = self.session
        if session.published:
            published, session.published = session.published, set()
            for queue in published:
                intake = queue.intake
                if not intake.writable:
                    self._set_blocked(True)
                await intake.wait_writable()
            self._set_blocked(False)
            if self.meter is not None and self.meter.publish_limit is not None:
                await self._wait_for_publish_rate()
        if self._writer.transport.get_write_buffer_size() > OUTPUT_PAUSE_READING:
            await self._writer.drain()

    async def _wait_for_publish_rate(self) -> None:
        """The namespace's publish rate (core/meters.py, shared with Kafka) is used up: read nothing
        more until it allows again."""
        await asyncio.sleep(0)   # the queues' publishers append (and so meter) what was just read
        delay = self.meter.publish_delay_s()
        if delay <= 0:
            return
        self._set_blocked(True, RATE_LIMITED_REASON)
        while delay > 0:
            await asyncio.sleep(delay)
            delay = self.meter.publish_delay_s()
        self._set_blocked(False)

    def _set_blocked(self, blocked: bool, reason: str = BLOCKED_REASON) -> None:
        """Tell a client that understands it (capability connection.blocked) why it is not read."""
        if blocked == self._blocked:
            return
        self._blocked = blocked
        if self.machine.client_capabilities.get("connection.blocked") is not True:
            return
        if blocked:
            self.write(self.machine.send_method(0, "connection.blocked", reason=reason))
        else:
            self.write(self.machine.send_method(0, "connection.unblocked"))

    # --- timers ---------------------------------------------------------------------------------

    async def _keep_time(self) -> None:
        handshake_deadline = self._loop.time() + self.broker.settings.handshake_timeout_s
        machine = self.machine
        while True:
            interval = machine.heartbeat_interval
            await asyncio.sleep(min(TICK_S, interval / 2) if interval else TICK_S)
            now = self._loop.time()
            if machine.state in (ConnectionState.AWAITING_HEADER, ConnectionState.HANDSHAKE) \
                    and now > handshake_deadline:
                log.info("AMQP connection from %s: handshake timed out", self._peer)
                self._writer.transport.abort()
                return
            if self._close_deadline is not None and now > self._close_deadline:
                self._writer.transport.abort()
                return
            if machine.peer_is_dead(now):
                log.info("AMQP connection from %s: missed heartbeats from client, timeout: %ds", self._peer,
                         interval)
                self._writer.transport.abort()
                return
            if self.token_expires_at is not None and time.time() > self.token_expires_at \
                    and self._close_deadline is None and machine.state in _EXPIRABLE:
                # As RabbitMQ: a token login lasts until its token expires, unless update-secret
                # brought a newer one.
                log.info("closing AMQP connection from %s (user %r): its token expired", self._peer,
                         self.principal.user if self.principal else None)
                if machine.state is ConnectionState.HANDSHAKE:   # expired before connection.open
                    self._writer.transport.abort()
                    return
                self.write(machine.send_error(0, AmqpConnectionError(ReplyCode.ACCESS_REFUSED, "credential expired")))
                self._close_deadline = now + CLOSE_OK_TIMEOUT_S
                self.flush()
            if machine.needs_heartbeat(now):
                self.write(machine.send_heartbeat())
            self.session.delivery_clock.tick()
            await self._close_overdue_channels()

    async def _close_overdue_channels(self) -> None:
        """Close, as RabbitMQ does, each channel that kept a delivery unacknowledged too long."""
        default_ms = self.broker.settings.consumer_timeout_ms
        if not any(channel.overdue_timeout(default_ms) is not None for channel in self.channels.values()):
            return
        async with self._handling:      # looked at again: acks may have come in meanwhile
            for number, channel in list(self.channels.items()):
                timeout = channel.overdue_timeout(default_ms)
                if timeout is None or self._close_deadline is not None:
                    continue
                log.warning("AMQP connection from %s: channel %d kept a delivery unacknowledged longer than "
                            "%d ms; closing it", self._peer, number, timeout)
                error = ChannelError(ReplyCode.PRECONDITION_FAILED,
                                     f"delivery acknowledgement on channel {number} timed out. Timeout value "
                                     f"used: {timeout} ms. This timeout value can be configured, see consumers "
                                     "doc guide to learn more")
                self.write(self.machine.send_error(number, error))
                await self._close_channel(number)
            self.flush()


def _is_ack_on(event: Event, channel: int) -> bool:
    return isinstance(event, MethodReceived) and event.method_name == "basic.ack" and event.channel == channel

"""The asyncio adapter: one task per Pulsar connection, bytes from the socket into the connection
machine (machine/connection.py), its frames to the session's handlers (session.py), and what they
answer back out.

Frames are handled one after another in arrival order. Output written in one event-loop turn goes
to the transport as one write. Back-pressure: consumers of a connection whose output holds more
than OUTPUT_HIGH_WATER bytes get nothing more until it drains; reading stops while the output is
beyond OUTPUT_PAUSE_READING, and while more than UNSTORED_PAUSE_READING bytes of its sends wait to be
stored (TCP then pushes back on the client). Keep-alive as Pulsar's brokers do: a PING after KEEPALIVE_S of
silence, and the connection is dropped if the next round finds it still unanswered.

Bad input (a frame over the size limit, one that does not parse, a command before CONNECT) is
logged once and closes that connection only; nothing of it is stored.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass

from core.names import TopicName
from protocols.pulsar.codec.frames import DEFAULT_MAX_MESSAGE_BYTES, FRAME_PADDING
from protocols.pulsar.core_port import CorePort
from protocols.pulsar.machine.connection import ProtocolViolation, PulsarServerConnection
from protocols.pulsar.codec.errors import DecodeError
from protocols.pulsar.producers import Dedup, Producer
from protocols.pulsar.session import Session

log = logging.getLogger("gateway.pulsar")

READ_BYTES = 256 * 1024
OUTPUT_HIGH_WATER = 4 << 20
OUTPUT_PAUSE_READING = 16 << 20
UNSTORED_PAUSE_READING = 64 << 20   # a connection's sends not yet durable: reading waits beyond this
KEEPALIVE_S = 30.0
HANDSHAKE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class PulsarSettings:
    host: str = "127.0.0.1"             # advertised in lookups as pulsar://host:port
    port: int = 6650
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    keepalive_s: float = KEEPALIVE_S


@dataclass(slots=True)
class PulsarFailures:
    """Connections closed for a failure, by reason (the listener's metrics)."""

    bad_frames: int = 0
    handshake_timeouts: int = 0
    keepalive_timeouts: int = 0


class PulsarBroker:
    """What every Pulsar connection shares."""

    def __init__(self, core, settings: PulsarSettings) -> None:
        self.settings = settings
        self.port = CorePort(core)
        self.dedup = Dedup()
        self.name_prefix = f"gateway-{uuid.uuid4().hex[:8]}"
        self.failures = PulsarFailures()
        self._producers: dict[tuple[TopicName, int], set[Producer]] = {}
        self.port.on_bundle_released(self._bundle_released)

    async def _bundle_released(self, bundle) -> None:
        """As a Pulsar broker unloading a bundle: its topics' producers and consumers are closed, so
        their clients look the topics up again and go to the next owner."""
        try:
            for (topic, index), producers in list(self._producers.items()):
                if self.port.in_bundle(bundle, topic, index):
                    for producer in list(producers):
                        producer.close_by_broker()
            for consumer in await self.port.release_bundle(bundle):
                consumer.queue_deleted()
        except Exception:     # never in the way of the core's release
            log.exception("pulsar: closing the clients of bundle %s failed", bundle)

    @property
    def service_url(self) -> str:
        host = self.settings.host
        host = f"[{host}]" if ":" in host else host
        return f"pulsar://{host}:{self.settings.port}"

    @property
    def max_message_bytes(self) -> int:
        return self.settings.max_message_bytes

    def producers_on(self, topic: TopicName, index: int) -> set[Producer]:
        return self._producers.get((topic, index), set())

    def producer_opened(self, producer: Producer) -> None:
        self._producers.setdefault((producer.topic, producer.index), set()).add(producer)

    def producer_closed(self, producer: Producer) -> None:
        producers = self._producers.get((producer.topic, producer.index))
        if producers is not None:
            producers.discard(producer)
            if not producers:
                del self._producers[(producer.topic, producer.index)]


def make_broker(core, settings: PulsarSettings | None = None) -> PulsarBroker:
    return PulsarBroker(core, settings or PulsarSettings())


class PulsarConnectionHandler:
    """The listener's connection handler; `close()` saves the subscriptions once connections are gone."""

    def __init__(self, broker: PulsarBroker) -> None:
        self.broker = broker
        self.failures = broker.failures

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await PulsarConnection(self.broker, reader, writer).run()

    async def close(self) -> None:
        await self.broker.port.close()


def connection_handler(broker: PulsarBroker) -> PulsarConnectionHandler:
    return PulsarConnectionHandler(broker)


class PulsarConnection:
    def __init__(self, broker: PulsarBroker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.machine = PulsarServerConnection(broker.max_message_bytes + FRAME_PADDING)
        self.session = Session(broker, self.write, self.writable, self.flush)
        self._reader = reader
        self._writer = writer
        self._peer = writer.get_extra_info("peername")
        self._output: list[bytes] = []
        self._output_bytes = 0
        self._flush_scheduled = False
        self._closing = False
        self._drainer: asyncio.Task | None = None
        self._loop = asyncio.get_running_loop()
        self.client = broker.port.connection_opened(self._peer, self._close_for_operator)

    # --- output ---------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        self._output.append(data)
        self._output_bytes += len(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if not self._output or self._writer.transport.is_closing():
            self._output.clear()
            self._output_bytes = 0
            return
        self._writer.write(b"".join(self._output))
        self._output.clear()
        self._output_bytes = 0

    def writable(self) -> bool:
        transport = self._writer.transport
        if transport.is_closing():
            return False
        if transport.get_write_buffer_size() + self._output_bytes < OUTPUT_HIGH_WATER:
            return True
        if self._drainer is None:     # the consumers go on once the client has read some of it
            self._drainer = asyncio.ensure_future(self._drain_then_wake())
        return False

    async def _drain_then_wake(self) -> None:
        try:
            self.flush()
            await self._writer.drain()
        except (ConnectionError, OSError):
            return
        finally:
            self._drainer = None
        self._wake_consumers()

    def _wake_consumers(self) -> None:
        for consumer in list(self.session.consumers.values()):
            consumer.subscription.dispatch()

    async def _close_for_operator(self) -> None:
        self._closing = True
        self._writer.transport.abort()

    # --- the loop -------------------------------------------------------------------------------

    async def run(self) -> None:
        keepalive = asyncio.ensure_future(self._keep_alive())
        try:
            await self._serve()
        finally:
            keepalive.cancel()
            if self._drainer is not None:
                self._drainer.cancel()
            self._closing = True
            try:
                await self.session.close()
            finally:
                self.broker.port.connection_closed(self.client)

    async def _serve(self) -> None:
        reader, machine = self._reader, self.machine
        while True:
            try:
                data = await reader.read(READ_BYTES)
            except (ConnectionError, OSError):
                return
            if not data:
                return
            try:
                frames = machine.receive_data(data)
                for frame in frames:
                    if frame.command.type == frame.command.CONNECT:
                        self.write(machine.connected(self.broker.max_message_bytes))
                        continue
                    await self.session.handle(frame)
            except (ProtocolViolation, DecodeError) as exc:
                self.broker.failures.bad_frames += 1
                log.warning("pulsar: closing the connection from %s: %s", self._peer, exc)
                self.flush()
                return
            self.flush()
            if self.session.unstored_bytes >= UNSTORED_PAUSE_READING:
                await self.session.wait_stored(UNSTORED_PAUSE_READING)
            if self._writer.transport.get_write_buffer_size() > OUTPUT_PAUSE_READING:
                try:
                    await self._writer.drain()
                except (ConnectionError, OSError):
                    return
                self._wake_consumers()

    async def _keep_alive(self) -> None:
        settings = self.broker.settings
        await asyncio.sleep(HANDSHAKE_TIMEOUT_S)
        if not self.machine.handshaken:
            self.broker.failures.handshake_timeouts += 1
            log.info("pulsar: %s sent no CONNECT within %.0fs", self._peer, HANDSHAKE_TIMEOUT_S)
            self._writer.transport.abort()
            return
        while True:
            await asyncio.sleep(settings.keepalive_s)
            if not self.machine.heard_since_ping:
                self.broker.failures.keepalive_timeouts += 1
                log.info("pulsar: %s did not answer a keep-alive ping", self._peer)
                self._writer.transport.abort()
                return
            self.write(self.machine.ping())

"""The asyncio adapter: bytes from the socket into the connection machine, requests to handlers,
responses back in request order.

Requests are handled one after another, in order, as a Kafka broker does; a handler may return an
awaitable instead of a response (Produce does, once its batches are queued for storage), so the
next request is read while earlier ones wait for durability. Responses are written strictly in
request order. At most MAX_PENDING responses may wait; past that the connection is not read, so a
fast producer or a slow reader cannot make the gateway buffer without bound.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable

from core.errors import CoreError
from protocols.kafka import registry
from protocols.kafka.broker import KafkaBroker, KafkaSettings, RequestContext
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.machine.connection import (KafkaServerConnection, RemoteProtocolError, RequestReceived,
                                                UnsupportedApiVersions)
from protocols.kafka.schema.api_versions import API_VERSIONS

log = logging.getLogger("gateway.kafka")

MAX_PENDING = 32
READ_BYTES = 256 * 1024


def make_broker(core, settings: KafkaSettings) -> KafkaBroker:
    return KafkaBroker(core, settings, registry.advertised())


def connection_handler(broker: KafkaBroker):
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await KafkaConnection(broker, reader, writer).run()
    return serve


class KafkaConnection:
    def __init__(self, broker: KafkaBroker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._broker = broker
        self._reader = reader
        self._writer = writer
        self._conn = KafkaServerConnection(registry.APIS, broker.settings.limits)
        self._pending: asyncio.Queue[tuple[object, Awaitable[bytes | None] | bytes | None]] = asyncio.Queue(MAX_PENDING)
        self._peer = writer.get_extra_info("peername")

    async def run(self) -> None:
        sender = asyncio.create_task(self._send_responses(), name=f"kafka-send {self._peer}")
        try:
            await self._read_requests()
        except RemoteProtocolError as exc:
            log.warning("closing Kafka connection from %s: %s", self._peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            await self._pending.put((None, None))   # the sender stops after what is queued
            try:
                await sender
            except Exception:
                log.exception("Kafka connection %s: sending failed", self._peer)
            self._writer.close()

    async def _read_requests(self) -> None:
        while True:
            data = await self._reader.read(READ_BYTES)
            for event in self._conn.receive_data(data):
                if isinstance(event, UnsupportedApiVersions):
                    body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": self._broker.api_versions}
                    await self._pending.put((event, self._conn.response(API_VERSIONS, event.header, body, version=0)))
                    continue
                await self._pending.put((event, await self._dispatch(event)))
            if not data:
                return

    async def _dispatch(self, event: RequestReceived) -> Awaitable[bytes | None] | bytes | None:
        ctx = RequestContext(self._broker, event.header)
        result = await registry.HANDLERS[event.api.key](event.body, ctx)
        if inspect.isawaitable(result):
            return self._finish(event, result)
        return self._encode(event, result)

    async def _finish(self, event: RequestReceived, result: Awaitable) -> bytes | None:
        return self._encode(event, await result)

    def _encode(self, event: RequestReceived, body) -> bytes | None:
        return None if body is None else self._conn.response(event.api, event.header, body)

    async def _send_responses(self) -> None:
        while True:
            event, response = await self._pending.get()
            if event is None:
                return
            if inspect.isawaitable(response):
                response = await response
            if response is not None:      # acks=0 Produce: no response at all
                self._writer.write(response)
                await self._writer.drain()

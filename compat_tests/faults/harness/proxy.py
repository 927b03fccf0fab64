"""A userspace TCP proxy in front of one port, for network faults (`tc netem` is not available here).

    proxy = TcpProxy(("127.0.0.1", server_port), listen=("127.0.0.2", server_port)).start()
    proxy.drop()        # blackhole: connections stay open, nothing gets through either way
    proxy.delay(200)    # every chunk waits 200 ms (order kept)
    proxy.half_open("upstream")   # client -> server flows, server -> client is dropped
    proxy.reset()       # every open connection gets an RST, and so does every new one
    proxy.heal()        # pass everything again

It runs its own asyncio loop in a thread; the mode methods may be called from any thread and apply
to open connections at once (each chunk is judged when it arrives).

Kafka clients connect to the address Metadata advertises, so a proxied Kafka listener needs the
proxy on the advertised address: e.g. the gateway on 127.0.0.1:P with `--kafka-advertised-host
127.0.0.2` and the proxy listening on 127.0.0.2:P.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from dataclasses import dataclass

PASS, DROP, DELAY, HALF_OPEN, RESET = "pass", "drop", "delay", "half_open", "reset"
UPSTREAM, DOWNSTREAM = "upstream", "downstream"  # client -> server, server -> client
_CHUNK = 65536


@dataclass
class ProxyStats:
    connections: int = 0
    forwarded_bytes: int = 0
    dropped_bytes: int = 0
    resets: int = 0


class TcpProxy:
    def __init__(self, upstream: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.upstream = upstream
        self._listen = listen
        self.mode = PASS
        self.delay_s = 0.0
        self.flowing = UPSTREAM     # the direction that still flows when half open
        self.stats = ProxyStats()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self.address: tuple[str, int] | None = None

    # --- control (any thread) --------------------------------------------------------------------

    def start(self) -> "TcpProxy":
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, *self._listen, reuse_address=True), self._loop).result(10)
        self.address = self._server.sockets[0].getsockname()[:2]
        return self

    def heal(self) -> None:
        self.mode = PASS

    def drop(self) -> None:
        self.mode = DROP

    def delay(self, milliseconds: float) -> None:
        self.delay_s = milliseconds / 1000
        self.mode = DELAY

    def half_open(self, flowing: str = UPSTREAM) -> None:
        assert flowing in (UPSTREAM, DOWNSTREAM)
        self.flowing = flowing
        self.mode = HALF_OPEN

    def reset(self) -> None:
        """RST every open connection; new ones are reset too until another mode is set."""
        self.mode = RESET
        asyncio.run_coroutine_threadsafe(self._reset_all(), self._loop).result(10)

    def close(self) -> None:
        async def shutdown() -> None:
            self._server.close()
            await self._reset_all()
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> "TcpProxy":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- the loop --------------------------------------------------------------------------------

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        if self.mode == RESET:
            _abort(client_writer)
            self.stats.resets += 1
            return
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            _abort(client_writer)
            return
        self._writers |= {client_writer, server_writer}
        try:
            await asyncio.gather(self._pump(client_reader, server_writer, UPSTREAM),
                                 self._pump(server_reader, client_writer, DOWNSTREAM))
        finally:
            for writer in (client_writer, server_writer):
                self._writers.discard(writer)
                writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str) -> None:
        try:
            while data := await reader.read(_CHUNK):
                mode = self.mode
                if mode == DROP or (mode == HALF_OPEN and direction != self.flowing):
                    self.stats.dropped_bytes += len(data)
                    continue
                if mode == DELAY:
                    await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()
                self.stats.forwarded_bytes += len(data)
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            _abort(writer)

    async def _reset_all(self) -> None:
        for writer in list(self._writers):
            _abort(writer)
            self.stats.resets += 1
        self._writers.clear()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (linger 0), not a FIN: the peer sees "connection reset"."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()

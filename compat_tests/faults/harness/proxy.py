"""A userspace TCP proxy in front of one port, for network faults (`tc netem` is not available here).

    proxy = TcpProxy(("127.0.0.1", server_port), listen=("127.0.0.2", server_port)).start()
    proxy.drop()        # blackhole: connections stay open, nothing gets through either way
    proxy.delay(200)    # every chunk waits 200 ms (order kept)
    proxy.half_open("upstream")   # client -> server flows, server -> client is blackholed
    proxy.reset()       # every open connection gets an RST, and so does every new one
    proxy.heal()        # pass everything again

It runs its own asyncio loop in a thread; the mode methods may be called from any thread and apply
to open connections at once.

A blackholed direction is held, not discarded: the proxy stops reading it, so the sender's socket
buffers fill up and it blocks, and what was sent arrives once healed, as TCP retransmission would
deliver it after a partition heals. (Throwing bytes away would cut a hole in the middle of a stream,
which no network does to TCP.) A side that gives up meanwhile closes its connection, and the other
side sees that once the direction flows again, or at once on `reset()`.

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
    stalls: int = 0         # times a direction of a connection waited for a blackhole to heal
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
        self._mode_changed = asyncio.Event()  # only touched on the loop
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
        self._set(PASS)

    def drop(self) -> None:
        self._set(DROP)

    def delay(self, milliseconds: float) -> None:
        self.delay_s = milliseconds / 1000
        self._set(DELAY)

    def half_open(self, flowing: str = UPSTREAM) -> None:
        assert flowing in (UPSTREAM, DOWNSTREAM)
        self.flowing = flowing
        self._set(HALF_OPEN)

    def reset(self) -> None:
        """RST every open connection; new ones are reset too until another mode is set."""
        self._set(RESET)
        asyncio.run_coroutine_threadsafe(self._reset_all(), self._loop).result(10)

    def _set(self, mode: str) -> None:
        self.mode = mode
        self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._mode_changed.set()
        self._mode_changed = asyncio.Event()

    def close(self) -> None:
        async def shutdown() -> None:
            self._server.close()
            await self._reset_all()
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
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

    def _blackholed(self, direction: str) -> bool:
        return self.mode == DROP or (self.mode == HALF_OPEN and direction != self.flowing)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str) -> None:
        try:
            while True:
                await self._while_blackholed(direction)  # not even reading: the sender's buffers fill
                data = await reader.read(_CHUNK)
                if not data:
                    break
                await self._while_blackholed(direction)  # read just before the blackhole: held
                if self.mode == DELAY:
                    await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()
                self.stats.forwarded_bytes += len(data)
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            _abort(writer)

    async def _while_blackholed(self, direction: str) -> None:
        if self._blackholed(direction):
            self.stats.stalls += 1
        while self._blackholed(direction):
            await self._mode_changed.wait()

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

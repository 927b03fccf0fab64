"""The admin HTTP server: uvicorn serving the admin app on a pre-bound socket inside the gateway's
own event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from gateway.listeners import format_address

log = logging.getLogger("gateway.admin")

_FORCE_EXIT_WAIT_S = 1.0  # after the grace period: how long uvicorn gets to drop its connections


class _SignallessServer(uvicorn.Server):
    """A uvicorn server that leaves signals alone: the gateway handles SIGTERM/SIGINT itself and
    tells this server when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # uvicorn >= 0.29 installs its handlers here
        yield

    def install_signal_handlers(self) -> None:  # older uvicorn installs them here
        pass


class AdminServer:
    name = "admin"

    def __init__(self, sock: socket.socket, app: FastAPI, grace_s: float,
                 tls: tuple[str, str] | None = None) -> None:
        """`tls`: (certificate file, key file) to serve HTTPS; None serves plain HTTP."""
        self.sock = sock
        self.address = format_address(sock)
        self.scheme = "http" if tls is None else "https"
        config = uvicorn.Config(
            app,
            ssl_certfile=tls[0] if tls else None,
            ssl_keyfile=tls[1] if tls else None,
            log_config=None,  # gateway.logging owns logging configuration
            lifespan="off",
            ws="none",
            server_header=False,
            timeout_graceful_shutdown=grace_s,
        )
        self._server = _SignallessServer(config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start serving and return once uvicorn accepts connections (raise if it cannot)."""
        self._task = asyncio.create_task(self._server.serve(sockets=[self.sock]), name="admin-server")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # re-raises the failure
                raise RuntimeError("admin server stopped during start-up")
            await asyncio.sleep(0.01)
        log.info("admin API listening on %s://%s", self.scheme, self.address)

    def stop_accepting(self) -> None:
        # uvicorn notices within ~0.1 s, closes its listening socket and asks idle connections to close.
        self._server.should_exit = True
        if self._task is None:
            self.sock.close()

    async def close_connections(self, grace_s: float) -> None:
        if self._task is None:
            return
        # uvicorn applies the grace period itself; the extra second covers its polling interval.
        done, _ = await asyncio.wait({self._task}, timeout=grace_s + _FORCE_EXIT_WAIT_S)
        if not done:
            log.warning("admin server still busy after %.1fs; forcing it to stop", grace_s)
            self._server.force_exit = True
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=_FORCE_EXIT_WAIT_S)
        elif not self._task.cancelled() and self._task.exception() is not None:
            log.error("admin server failed while stopping", exc_info=self._task.exception())

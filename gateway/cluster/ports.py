"""Ports for the servers of a local cluster, chosen so that a restarted server gets its port back.

A port the kernel hands out for `bind(0)` comes from the ephemeral range, the same range every
outgoing connection takes its local port from. Once a server on such a port dies, any client socket
on the machine may take the port, and the restarted server then fails with "Address already in
use". So the launcher picks listening ports below the ephemeral range itself, at random (test
workers start clusters side by side), and keeps each server on its port across restarts.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000        # below this sit well-known services and other test tools' fixed ports
ATTEMPTS = 200


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768   # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now and no outgoing connection will take (the kernel's pick when
    the ephemeral range leaves no room below it)."""
    top = _ephemeral_start()
    if top - LOWEST >= 1_000:
        for _ in range(ATTEMPTS):
            port = random.randrange(LOWEST, top)
            with socket.socket() as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]

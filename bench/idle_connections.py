"""Resident memory per idle Kafka connection of one `gateway serve`.

Opens --connections TCP connections to the gateway's Kafka listener, each sending one ApiVersions v0
request and reading its answer (so the connection is served, with its reader and sender tasks), then
leaves them idle and reads the gateway's resident memory (psutil, RSS) before and after.

    python -m bench.idle_connections [--connections 10000]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import struct
import tempfile
import time
from pathlib import Path

import psutil

from bench.reference import start_gateway

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, 0)   # api key, version, correlation id, no client id
SETTLE_S = 2.0


def open_connections(address: str, count: int) -> list[socket.socket]:
    host, _, port = address.rpartition(":")
    request = struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)), timeout=30)
        sock.sendall(request)
        size = struct.unpack(">i", _read(sock, 4))[0]
        _read(sock, size)
        sockets.append(sock)
    return sockets


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the gateway closed a connection")
        data += chunk
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=10_000)
    args = parser.parse_args(argv)
    work_dir = Path(tempfile.mkdtemp(dir=Path.cwd(), prefix="bench-idle-"))
    gateway = start_gateway(work_dir / "data", work_dir)
    sockets: list[socket.socket] = []
    try:
        process = psutil.Process(gateway.pid)
        time.sleep(SETTLE_S)
        before = process.memory_info().rss
        started = time.perf_counter()
        sockets = open_connections(gateway.bootstrap, args.connections)
        opened_s = time.perf_counter() - started
        time.sleep(SETTLE_S)
        after = process.memory_info().rss
        print(f"{args.connections:,} idle Kafka connections (one ApiVersions each) opened in {opened_s:.1f} s; "
              f"gateway RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB, "
              f"{(after - before) / args.connections / 1024:.1f} KiB per connection")
    finally:
        for sock in sockets:
            sock.close()
        gateway.stop()
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()

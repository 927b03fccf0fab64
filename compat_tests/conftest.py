"""Run the real `gateway serve` process for black-box tests.

`start_gateway(tmp_path, *extra_args, env=None)` starts one and returns once it printed its READY
line. Fixtures: `gateway_process` is one started with the defaults; `gateway_launcher` starts more
(`.start(...)`, `.expect_start_failure(...)`). Both stop what they started at teardown.

For AMQP comparisons: `rabbitmq` is a private RabbitMQ node per module (Debian's rabbitmq-server;
skipped, saying why, where it is not installed), and `broker` runs a test once against the
module's own `gateway` fixture and once against that node (the AMQP address of each).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from core.cluster.bundles import Layouts, follow

READY_PREFIX = "GATEWAY READY "
READY_DEADLINE_S = 30.0
WAIT_DEADLINE_S = 30.0


@pytest.fixture(autouse=True)
def first_layouts_after():
    """A test that split bundles leaves this process's layouts (core/cluster/bundles.py) as they
    were: the next one's brokers, or a test computing bundles without a broker, start from the first."""
    yield
    follow(Layouts())


def wait_for(condition, what: str, deadline_s: float = WAIT_DEADLINE_S, interval_s: float = 0.1):
    """Poll `condition` until it returns something true (returned) or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
STOP_DEADLINE_S = 10.0


class GatewayStartFailed(Exception):
    """The process exited (or hung) before printing its READY line."""

    def __init__(self, message: str, returncode: int | None, stdout: str, stderr: str) -> None:
        super().__init__(f"{message}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}")
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


@dataclass
class GatewayProcess:
    proc: subprocess.Popen[str]
    ready: dict[str, object]  # the READY line's JSON
    stderr_path: Path
    stdout_lines: list[str] = field(default_factory=list)  # everything on stdout, READY line included

    @property
    def kafka(self) -> tuple[str, int]:
        return _host_port(self.ready["kafka"])

    @property
    def amqp(self) -> tuple[str, int]:
        return _host_port(self.ready["amqp"])

    @property
    def mqtt(self) -> tuple[str, int]:
        return _host_port(self.ready["mqtt"])

    @property
    def pulsar(self) -> tuple[str, int]:
        return _host_port(self.ready["pulsar"])

    @property
    def admin(self) -> tuple[str, int]:
        return _host_port(self.ready["admin"])

    @property
    def admin_url(self) -> str:
        host, port = self.admin
        return f"http://{host}:{port}"

    @property
    def data_dir(self) -> Path:
        return Path(str(self.ready["data_dir"]))

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def send_signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float = STOP_DEADLINE_S) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_DEADLINE_S) -> int:
        """Send `sig` and wait for the exit; SIGKILL it if it takes longer than `timeout`."""
        self.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"gateway did not exit within {timeout}s of {signal.Signals(sig).name}\n{self.stderr}")

    def kill(self) -> None:
        """SIGKILL: no shutdown at all, as a crash would leave things."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _host_port(address: object) -> tuple[str, int]:
    host, _, port = str(address).rpartition(":")
    return host.strip("[]"), int(port)


def serve_command(data_dir: Path | None, *extra_args: str) -> list[str]:
    """`gateway serve` on free ports; without data_dir, --data-dir is left to config/env."""
    command = [sys.executable, "-m", "gateway", "serve"]
    if data_dir is not None:
        command += ["--data-dir", str(data_dir)]
    return command + ["--kafka-port", "0", "--amqp-port", "0", "--mqtt-port", "0", "--pulsar-port", "0",
                      "--admin-port", "0", *extra_args]


def start_gateway(
    tmp_path: Path,
    *extra_args: str,
    env: Mapping[str, str] | None = None,
    command: Sequence[str] | None = None,
    data_dir: Path | None = None,
    deadline_s: float = READY_DEADLINE_S,
) -> GatewayProcess:
    """Start `gateway serve` (data in tmp_path/"data" unless `data_dir` or `command` say otherwise)
    and wait for its READY line. Raises GatewayStartFailed if it exits or hangs first.

    `env` is added to the test's environment, minus any GATEWAY_* variables of the caller's shell.
    The process runs in tmp_path, and its stderr goes to a file there (so no pipe can fill up).
    """
    if command is None:
        command = serve_command(data_dir or tmp_path / "data", *extra_args)
    else:
        command = [*command, *extra_args]
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    # Groups form after 0.5 s instead of Kafka's 3 s, as test setups of Kafka itself shorten it.
    child_env["GATEWAY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] = "500"
    # MQTT's default port 1883 would make gateways of parallel tests (or a local broker) collide.
    child_env["GATEWAY_MQTT_PORT"] = "0"
    child_env.update(env or {})
    stderr_path = _fresh_path(tmp_path, "gateway-stderr", ".log")
    with stderr_path.open("w") as stderr_file:
        proc = subprocess.Popen(
            list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr_file,
            text=True, cwd=tmp_path, env=child_env,
        )
    lines: queue.Queue[str | None] = queue.Queue()
    stdout_lines: list[str] = []
    threading.Thread(target=_pump_stdout, args=(proc, lines, stdout_lines), daemon=True).start()

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            proc.kill()
            proc.wait()
            raise GatewayStartFailed(f"no READY line within {deadline_s}s", None,
                                     "".join(stdout_lines), stderr_path.read_text(errors="replace"))
        if line is None:  # stdout closed: the process is exiting
            returncode = proc.wait(timeout=STOP_DEADLINE_S)
            raise GatewayStartFailed(f"gateway exited with {returncode} before READY", returncode,
                                     "".join(stdout_lines), stderr_path.read_text(errors="replace"))
        if line.startswith(READY_PREFIX):
            ready = json.loads(line[len(READY_PREFIX):])
            return GatewayProcess(proc=proc, ready=ready, stderr_path=stderr_path, stdout_lines=stdout_lines)


def _pump_stdout(proc: subprocess.Popen[str], lines: queue.Queue[str | None], seen: list[str]) -> None:
    # Keeps reading after READY too, so a chatty process can never block on a full pipe.
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        lines.put(line)
    lines.put(None)


def _fresh_path(directory: Path, stem: str, suffix: str) -> Path:
    path = directory / f"{stem}{suffix}"
    counter = 1
    while path.exists():  # a restarted gateway in the same test keeps the earlier log
        counter += 1
        path = directory / f"{stem}-{counter}{suffix}"
    return path


class GatewayLauncher:
    """`start_gateway` for one test, as a fixture: stops every process it started at teardown."""

    StartFailed = GatewayStartFailed

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[GatewayProcess] = []

    def start(self, *extra_args: str, **options) -> GatewayProcess:
        gateway = start_gateway(self.tmp_path, *extra_args, **options)
        self.started.append(gateway)
        return gateway

    def expect_start_failure(self, *extra_args: str, **options) -> GatewayStartFailed:
        """Start a gateway that must exit before READY; returns what it left behind."""
        try:
            gateway = self.start(*extra_args, **options)
        except GatewayStartFailed as exc:
            return exc
        raise AssertionError(f"gateway started although it should not have: {gateway.ready}")

    def stop_all(self) -> None:
        for gateway in self.started:
            if gateway.proc.poll() is None:
                gateway.stop()


@pytest.fixture
def gateway_launcher(tmp_path: Path) -> Iterator[GatewayLauncher]:
    launcher = GatewayLauncher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.stop_all()


@pytest.fixture
def gateway_process(gateway_launcher: GatewayLauncher) -> GatewayProcess:
    try:
        return gateway_launcher.start()
    except GatewayStartFailed as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory):
    from bench.rabbitmq import RABBIT_BIN, pick_port, start_rabbitmq
    if not (RABBIT_BIN / "rabbitmq-server").exists():
        pytest.skip(f"no rabbitmq-server in {RABBIT_BIN} (apt-get install rabbitmq-server): nothing to compare with")
    # Each pytest-xdist worker looks from its own port up, so two workers never race for one.
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    node = start_rabbitmq(tmp_path_factory.mktemp("rabbit"), pick_port(5760 + 40 * worker))
    yield node
    node.stop()


@pytest.fixture(params=["gateway", "rabbitmq"])
def broker(request) -> tuple[str, int]:
    """The AMQP address of the broker under test."""
    if request.param == "gateway":
        return request.getfixturevalue("gateway").amqp
    return "127.0.0.1", request.getfixturevalue("rabbitmq").port

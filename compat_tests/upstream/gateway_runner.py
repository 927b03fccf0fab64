"""Start and stop one `gateway serve` for an upstream test suite (standard library only: it is
imported by the suite runner and by the aiokafka docker stand-in, inside the suites' own
interpreter, where the gateway's packages must not shadow theirs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

READY_PREFIX = "GATEWAY READY "
REPO = Path(__file__).resolve().parents[2]
# Set by run_kafka_suites.py for the processes it starts: the interpreter that runs the gateway.
PYTHON_ENV = "GATEWAY_SUITE_PYTHON"


class Gateway:
    """A gateway with a suite's test-broker settings, on `port` (0: any free port)."""

    def __init__(self, port: int = 0, partitions: int = 1, min_session_timeout_ms: int = 6000,
                 python: str | None = None, log_dir: Path | None = None) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="gateway-suite-"))
        self.log_path = (log_dir or self.data_dir) / f"gateway-{os.getpid()}-{time.monotonic_ns()}.log"
        command = [python or os.environ.get(PYTHON_ENV, "python3"), "-m", "gateway", "serve",
                   "--data-dir", str(self.data_dir / "data"), "--kafka-port", str(port), "--amqp-port", "0", "--mqtt-port", "0", "--pulsar-port", "0",
                   "--admin-port", "0", "--kafka-default-partitions", str(partitions),
                   "--kafka-group-min-session-timeout-ms", str(min_session_timeout_ms)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_") or k == PYTHON_ENV}
        env.update(PYTHONPATH=str(REPO), GATEWAY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0")
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(READY_PREFIX):
                ready = json.loads(line[len(READY_PREFIX):])
                host, _, kafka_port = ready["kafka"].rpartition(":")
                self.host, self.port = host, int(kafka_port)
                return
        raise RuntimeError(f"the gateway exited with {self.proc.wait()} before it was ready; see {self.log_path}")

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

"""A private ZooKeeper server, run as a child process from Debian's `zookeeper` package.

Standalone, on one address and a free port, with a data directory of its own and a zoo.cfg written
for it: the admin HTTP server off, only the `ruok` and `srvr` four-letter words (the readiness probe)
enabled, no limit on connections per address (every process of a local cluster comes from
127.0.0.1). The Java server is started from the package's jars, never through its init scripts, so a
system-wide ZooKeeper service is neither needed nor touched.

Layout of `directory`: zoo.cfg, data/ (snapshots and transaction log), zookeeper.log (its output).
Starting again with the same directory and port resumes the same data, as a restarted server would.

The child is tied to the process that starts it (gateway/cluster/children.py): a crashed test run
leaves no ZooKeeper behind.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import time
from pathlib import Path

from gateway.cluster.children import spawn
from gateway.cluster.ports import free_port

log = logging.getLogger("gateway.cluster.zookeeper")

JARS = Path("/usr/share/java")
SERVER_JAR = JARS / "zookeeper.jar"  # its manifest's Class-Path names the jars it needs
LOG_BINDING_JAR = JARS / "slf4j-simple.jar"  # without a binding the server's log is silent
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")



def four_letter_word(host: str, port: int, word: str, timeout_s: float = 1.0) -> str:
    """ZooKeeper's plain-text admin commands: send the word, read until the server closes."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    def __init__(self, directory: Path, *, host: str = "127.0.0.1", port: int = 0, tick_ms: int = 1000) -> None:
        self.directory = directory
        self.host = host
        self.port = port or free_port(host)
        self.tick_ms = tick_ms
        self._process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _write_config(self) -> Path:
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={self.directory / 'data'}\n"
            f"clientPortAddress={self.host}\n"
            f"clientPort={self.port}\n"
            "maxClientCnxns=0\n"
            f"minSessionTimeout={2 * self.tick_ms}\n"
            "maxSessionTimeout=60000\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
            "autopurge.snapRetainCount=3\n"
            "autopurge.purgeInterval=1\n")
        return config

    def command(self) -> list[str]:
        if not SERVER_JAR.exists():
            raise RuntimeError(f"{SERVER_JAR} is missing: install Debian's zookeeper package (make system-packages)")
        java = shutil.which("java") or "/usr/bin/java"
        classpath = ":".join(str(jar) for jar in (SERVER_JAR, LOG_BINDING_JAR) if jar.exists())
        return [java, *JVM_OPTIONS, "-cp", classpath, MAIN_CLASS, str(self._write_config())]

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the server and return once it serves requests (RuntimeError if it does not in time)."""
        if self._process is not None and self._process.poll() is None:
            raise RuntimeError(f"ZooKeeper on {self.address} is already running")
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "zookeeper.log", "ab") as output:
            self._process = spawn(self.command(), stdin=subprocess.DEVNULL, stdout=output,
                                  stderr=subprocess.STDOUT, cwd=self.directory)
        deadline = time.monotonic() + timeout_s
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self._process.returncode}; see {self.directory}/zookeeper.log")
            if self.serving():
                log.info("ZooKeeper serves on %s (pid %d)", self.address, self._process.pid)
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper did not serve on {self.address} within {timeout_s}s")
            time.sleep(0.05)

    def serving(self) -> bool:
        try:
            return "Mode: standalone" in four_letter_word(self.host, self.port, "srvr")
        except OSError:
            return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate the server (SIGTERM, then SIGKILL past the timeout) and wait for it."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> "ZooKeeperServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

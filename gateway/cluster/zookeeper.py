"""A private ZooKeeper server, run as a child process from Debian's `zookeeper` package.

Standalone, or one member of an ensemble (`peers`: every member's id and its quorum and election
ports, written as zoo.cfg's server.N lines, and this one's id in data/myid). On one address and a
free port, with a data directory of its own and a zoo.cfg written for it: the admin HTTP server off,
only the `ruok`, `srvr` and `stat` four-letter words enabled (`srvr` is the readiness probe and says
whether a member leads or follows), no limit on connections per address (every process of a local
cluster comes from 127.0.0.1). The Java server is started from the package's jars, never through its
init scripts, so a system-wide ZooKeeper service is neither needed nor touched.

Layout of `directory`: zoo.cfg, data/ (snapshots, transaction log, myid), zookeeper.log (its output).
Starting again with the same directory and ports resumes the same data, as a restarted server would.

The child is tied to the process that starts it (gateway/cluster/children.py): a crashed test run
leaves no ZooKeeper behind.
"""

from __future__ import annotations

import logging
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gateway.cluster.children import spawn
from gateway.cluster.ports import free_port

log = logging.getLogger("gateway.cluster.zookeeper")

JARS = Path("/usr/share/java")
SERVER_JAR = JARS / "zookeeper.jar"  # its manifest's Class-Path names the jars it needs
LOG_BINDING_JAR = JARS / "slf4j-simple.jar"  # without a binding the server's log is silent
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"   # reads server.N lines
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
SERVING_MODES = ("standalone", "leader", "follower")


@dataclass(frozen=True, slots=True)
class Peer:
    """One member of an ensemble as every member's zoo.cfg names it."""
    myid: int
    host: str
    quorum_port: int      # followers' connections to the leader
    election_port: int    # leader election among the members

    def line(self) -> str:
        return f"server.{self.myid}={self.host}:{self.quorum_port}:{self.election_port}"


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 1.0) -> str:
    """ZooKeeper's plain-text admin commands: send the word, read until the server closes."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    def __init__(self, directory: Path, *, host: str = "127.0.0.1", port: int = 0, tick_ms: int = 1000,
                 myid: int | None = None, peers: tuple[Peer, ...] = ()) -> None:
        """With `peers` (the whole ensemble, this one included as `myid`) a member of an ensemble;
        without, standalone."""
        self.directory = directory
        self.host = host
        self.port = port or free_port(host)
        self.tick_ms = tick_ms
        self.myid = myid
        self.peers = peers
        self._process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _write_config(self) -> Path:
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        ensemble = ""
        if self.peers:
            (self.directory / "data" / "myid").write_text(f"{self.myid}\n")
            # initLimit/syncLimit in ticks: a follower has 10 s to sync, 5 s to answer the leader.
            ensemble = "initLimit=10\nsyncLimit=5\n" + "".join(f"{peer.line()}\n" for peer in self.peers)
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
            "4lw.commands.whitelist=ruok,srvr,stat\n"
            "autopurge.snapRetainCount=3\n"
            "autopurge.purgeInterval=1\n"
            + ensemble)
        return config

    def command(self) -> list[str]:
        if not SERVER_JAR.exists():
            raise RuntimeError(f"{SERVER_JAR} is missing: install Debian's zookeeper package (make system-packages)")
        java = shutil.which("java") or "/usr/bin/java"
        classpath = ":".join(str(jar) for jar in (SERVER_JAR, LOG_BINDING_JAR) if jar.exists())
        main = QUORUM_MAIN_CLASS if self.peers else MAIN_CLASS
        return [java, *JVM_OPTIONS, "-cp", classpath, main, str(self._write_config())]

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the server and return once it serves requests (RuntimeError if it does not in time).
        A member of an ensemble serves only once a majority of the ensemble runs."""
        self.launch()
        self.wait_serving(timeout_s)

    def launch(self) -> None:
        """Start the process without waiting for it to serve."""
        if self._process is not None and self._process.poll() is None:
            raise RuntimeError(f"ZooKeeper on {self.address} is already running")
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "zookeeper.log", "ab") as output:
            self._process = spawn(self.command(), stdin=subprocess.DEVNULL, stdout=output,
                                  stderr=subprocess.STDOUT, cwd=self.directory)

    def wait_serving(self, timeout_s: float = 60.0) -> None:
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
        return self.mode() in SERVING_MODES

    def mode(self) -> str | None:
        """standalone, leader or follower while it serves; None when it does not answer or does
        not serve (a member without a quorum answers `srvr` with an error)."""
        try:
            answer = four_letter_word(self.host, self.port, "srvr")
        except OSError:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode: "):
                return line.removeprefix("Mode: ").strip()
        return None

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash: the next start() resumes from what it had written."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate the server (SIGTERM, then SIGKILL past the timeout) and wait for it."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGCONT)   # a paused server cannot handle SIGTERM
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

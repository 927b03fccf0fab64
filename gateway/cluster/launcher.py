"""`gateway cluster up`: a whole replicated cluster on this machine, for development and tests.

A private ZooKeeper (one server, or an ensemble: gateway/cluster/zookeeper_ensemble.py), N `gateway
bookie` processes and M `gateway serve` processes in replicated mode (broker ids 0..M-1; they share the partitions by bundle ownership,
core/cluster/), each on free ports, under one directory:

    <data dir>/cluster.toml        the shared config: [storage] mode, metadata, secret (mode 0600), quorums
    <data dir>/zookeeper/          ZooKeeper's data and log (zookeeper-<n>/ per member of an ensemble)
    <data dir>/bookie-<i>/         a bookie's data; bookie-<i>.log its stderr
    <data dir>/broker-<j>/         a gateway's data directory (holds nothing durable); broker-<j>.log
    <data dir>/tls/                with --tls: the private CA and the node certificate (gateway/cluster/certificates.py)

Once every process serves, one line goes to stdout:

    CLUSTER READY {"zookeeper": "host:port[,host:port...]", "zookeepers": [{"address", "pid"}, ...],
                   "bookies": [{"id", "address", "metrics", "pid"}, ...],
                   "brokers": [{"id", "kafka", "amqp", "admin", "pid"}, ...]}

With --tls every link is TLS: bookies and brokers take only peers with a certificate of the
cluster's CA ([storage] tls_cert, tls_key, tls_ca; the secret stays a second factor), and each
broker has Kafka and AMQP TLS ports beside its plaintext ones ("kafka_tls", "amqp_tls", and
"tls_ca" for clients to trust in the READY line). ZooKeeper's own connection stays plaintext.

`LocalCluster` is the same thing as a library: tests use it to kill, pause and restart processes.
Starting again on the same directory resumes the same cluster (same secret, ids and data).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from gateway.cluster.certificates import ClusterCertificates, cluster_certificates
from gateway.cluster.children import spawn
from gateway.cluster.ports import free_port
from gateway.cluster.zookeeper_ensemble import ZooKeeperEnsemble

log = logging.getLogger("gateway.cluster")

READY_PREFIX = "CLUSTER READY "
START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 15.0
ZK_ROOT = "/gateway"


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    data_dir: Path
    bookies: int = 3
    brokers: int = 1
    read_only_brokers: int = 0                           # more brokers with --role read-only, after the others
    read_only_rack: str = "/rack-readers"                # their rack (clients set client.rack to it)
    ensemble: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    racks: int = 1
    zookeepers: int = 1                                  # members of the ZooKeeper ensemble
    log_level: str = "info"
    host: str = "127.0.0.1"
    extra_storage: dict = field(default_factory=dict)   # more [storage] keys for cluster.toml
    broker_args: tuple[str, ...] = ()                    # more `gateway serve` flags for every broker
    extra_config: str = ""                               # more TOML after [storage], e.g. [[users]] tables
    tls: bool = False    # TLS everywhere: a private CA, mutual TLS between nodes, TLS client ports beside plaintext

    def __post_init__(self) -> None:
        if not self.ensemble >= self.write_quorum >= self.ack_quorum >= 1:
            raise ValueError("need --ensemble >= --write-quorum >= --ack-quorum >= 1")
        if self.bookies < self.ensemble:
            raise ValueError(f"--bookies {self.bookies} is fewer than --ensemble {self.ensemble}")
        if self.brokers < 1:
            raise ValueError("--brokers must be at least 1")
        if self.read_only_brokers < 0:
            raise ValueError("--read-only-brokers must not be negative")
        if self.racks < 1:
            raise ValueError("--racks must be at least 1")
        if self.zookeepers < 1:
            raise ValueError("--zookeepers must be at least 1")


@dataclass
class Process:
    name: str
    command: list[str]
    log_path: Path
    ready_prefix: str
    proc: subprocess.Popen | None = None
    ready: dict = field(default_factory=dict)
    env: dict[str, str] | None = None        # more environment variables for this process

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self, deadline_s: float = START_DEADLINE_S) -> dict:
        lines: queue.Queue[str | None] = queue.Queue()
        with self.log_path.open("a") as stderr:
            self.proc = spawn(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                              text=True, start_new_session=True,
                              env=None if self.env is None else {**os.environ, **self.env})
        threading.Thread(target=_pump, args=(self.proc, lines), daemon=True, name=f"{self.name}-stdout").start()
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            if line.startswith(self.ready_prefix):
                self.ready = json.loads(line[len(self.ready_prefix):])
                return self.ready
        self.kill()
        raise RuntimeError(f"{self.name} did not start; its log: {self.log_path}\n" + _tail(self.log_path))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def stop(self, deadline_s: float = STOP_DEADLINE_S) -> None:
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGCONT)   # a paused process cannot handle SIGTERM
        self.proc.terminate()
        try:
            self.proc.wait(deadline_s)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in %.0f s: killing it", self.name, deadline_s)
            self.kill()


def _pump(proc: subprocess.Popen, lines: queue.Queue) -> None:
    for line in proc.stdout:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class LocalCluster:
    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.dir = spec.data_dir
        self.zookeeper = ZooKeeperEnsemble(self.dir, spec.zookeepers, host=spec.host)
        self.bookies: list[Process] = []
        self.brokers: list[Process] = []
        self.config_path = self.dir / "cluster.toml"
        self.certificates: ClusterCertificates | None = None   # with spec.tls: <data dir>/tls/

    @property
    def metadata_url(self) -> str:
        return f"zk://{self.zookeeper.address}{ZK_ROOT}"

    def start(self) -> dict:
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.zookeeper.start()
            if self.spec.tls:
                self.certificates = cluster_certificates(self.dir / "tls", self.spec.host)
            self._write_config()
            for index in range(self.spec.bookies):
                self.bookies.append(self._bookie(index))
                self.bookies[-1].start()
            for index in range(self.spec.brokers + self.spec.read_only_brokers):
                self.brokers.append(self._broker(index))
                self.brokers[-1].start()
        except BaseException:
            self.stop()
            raise
        return self.ready()

    def ready(self) -> dict:
        ready = {
            "zookeeper": self.zookeeper.address,
            "zookeepers": self.zookeeper.describe(),
            "bookies": [{"id": b.ready["id"], "address": b.ready["address"], "metrics": b.ready.get("metrics"),
                         "pid": b.pid} for b in self.bookies],
            "brokers": [{"id": index, "kafka": b.ready["kafka"], "amqp": b.ready["amqp"], "admin": b.ready["admin"],
                         "pulsar": b.ready["pulsar"], "pid": b.pid, "role": self._role(index),
                         **{name: b.ready[name] for name in ("kafka_tls", "amqp_tls") if name in b.ready}}
                        for index, b in enumerate(self.brokers)],
        }
        if self.certificates is not None:
            ready["tls_ca"] = str(self.certificates.ca)   # what clients of the TLS ports trust
        return ready

    def _write_config(self) -> None:
        secret_path = self.dir / "secret"
        if not secret_path.exists():
            fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as file:
                file.write(secrets.token_hex(32))
        storage = {"mode": "replicated", "metadata": self.metadata_url, "secret": secret_path.read_text().strip(),
                   "ensemble_size": self.spec.ensemble, "write_quorum": self.spec.write_quorum,
                   "ack_quorum": self.spec.ack_quorum, **self._node_tls(), **self.spec.extra_storage}
        body = "[storage]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in storage.items())
        body += self.spec.extra_config
        fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(body)

    def _node_tls(self) -> dict:
        """[storage] keys of mutual TLS between the nodes (storage/node_tls.py), with spec.tls."""
        files = self.certificates
        return {} if files is None else {"tls_cert": str(files.cert), "tls_key": str(files.key),
                                         "tls_ca": str(files.ca)}

    def _client_tls_args(self) -> tuple[str, ...]:
        """A broker's TLS client ports, with the node certificate; clients show none (client auth none)."""
        files = self.certificates
        if files is None:
            return ()
        return ("--kafka-tls-port", str(free_port(self.spec.host)), "--amqp-tls-port", str(free_port(self.spec.host)),
                "--tls-cert", str(files.cert), "--tls-key", str(files.key), "--tls-ca", str(files.ca))

    def _bookie(self, index: int) -> Process:
        port = free_port(self.spec.host)
        return Process(f"bookie-{index}", self.bookie_command(index, port), self.dir / f"bookie-{index}.log",
                       "BOOKIE READY ")

    def bookie_command(self, index: int, port: int = 0, *, advertised: str | None = None,
                       prefix: tuple[str, ...] = ()) -> list[str]:
        """The command of bookie `index`; `prefix` runs it under another program that execs it."""
        return [*prefix, sys.executable, "-m", "gateway", "bookie", "--config", str(self.config_path),
                "--data-dir", str(self.dir / f"bookie-{index}"), "--host", self.spec.host, "--port", str(port),
                "--id", f"bookie-{index}", "--rack", f"/rack-{index % self.spec.racks}",
                *(("--advertised-address", advertised) if advertised else ()), "--log-level", self.spec.log_level]

    def _role(self, index: int) -> str:
        return "serving" if index < self.spec.brokers else "read-only"

    def _broker(self, index: int) -> Process:
        kafka, amqp, admin, peer = (str(free_port(self.spec.host)) for _ in range(4))
        rack = f"/rack-{index % self.spec.racks}" if index < self.spec.brokers else self.spec.read_only_rack
        command = [sys.executable, "-m", "gateway", "serve", "--config", str(self.config_path),
                   "--data-dir", str(self.dir / f"broker-{index}"), "--host", self.spec.host,
                   "--kafka-port", kafka, "--amqp-port", amqp, "--mqtt-port", "0", "--pulsar-port", "0", "--admin-port", admin, "--peer-port", peer,
                   "--broker-id", str(index),
                   "--rack", rack, "--role", self._role(index), "--log-level", self.spec.log_level,
                   *self._client_tls_args(), *self.spec.broker_args]
        return Process(f"broker-{index}", command, self.dir / f"broker-{index}.log", "GATEWAY READY ")

    def add_bookie(self) -> Process:
        """Start one more bookie, with the next unused index (and so a new id)."""
        process = self._bookie(len(self.bookies))
        process.start()
        self.bookies.append(process)
        return process

    def restart(self, process: Process) -> dict:
        """Start a stopped or killed process again with the same command: the same data and the same
        ports (chosen by free_port so that no client socket takes them meanwhile), so clients that
        reconnect find it where it was."""
        process.stop()
        return process.start()

    def heal(self) -> None:
        """Resume every paused process and start again every one that is not running."""
        for process in (*self.bookies, *self.brokers):
            process.signal(signal.SIGCONT)
            if not process.alive():
                self.restart(process)

    def stop(self) -> None:
        for process in (*self.brokers, *self.bookies):
            process.stop()
        self.zookeeper.stop()


def run_cluster(spec: ClusterSpec) -> int:
    """`gateway cluster up`: start, announce, and stop everything on SIGTERM/SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    cluster = LocalCluster(spec)
    try:
        ready = cluster.start()
    except (RuntimeError, OSError) as exc:
        log.error("the cluster did not start: %s", exc)
        return 1
    sys.stdout.write(READY_PREFIX + json.dumps(ready) + "\n")
    sys.stdout.flush()
    reported: set[str] = set()
    try:
        while not stop.is_set():
            stop.wait(0.5)
            for process in (*cluster.bookies, *cluster.brokers):
                if not process.alive() and process.name not in reported and not stop.is_set():
                    reported.add(process.name)
                    log.warning("%s exited with %s; see %s", process.name, process.proc.returncode, process.log_path)
            for member in cluster.zookeeper.nodes:   # an ensemble goes on without a minority of them
                if not member.alive() and member.address not in reported and not stop.is_set():
                    reported.add(member.address)
                    log.warning("ZooKeeper %s exited; see %s", member.address, member.directory / "zookeeper.log")
    finally:
        cluster.stop()
    return 0

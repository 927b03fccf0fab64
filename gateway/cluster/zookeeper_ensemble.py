"""The ZooKeeper of a local cluster: one standalone server, or an ensemble of N members.

An ensemble serves while a majority of its members runs; one of them leads (elected among them),
the others follow. Each member has its own directory, client port and quorum and election ports
(below the ephemeral range, gateway/cluster/ports.py, so a killed member gets them back):

    <cluster dir>/zookeeper/        the one server of a one-node "ensemble" (the default)
    <cluster dir>/zookeeper-<n>/    member n (myid n, 1..N) of a larger one

Clients get the connect string of every member (`address`) and move to another member when theirs
goes; their session survives that as long as a majority serves again within its timeout.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from gateway.cluster.ports import free_port
from gateway.cluster.zookeeper import Peer, ZooKeeperServer

log = logging.getLogger("gateway.cluster.zookeeper")


class ZooKeeperEnsemble:
    def __init__(self, cluster_dir: Path, size: int = 1, *, host: str = "127.0.0.1") -> None:
        if size < 1:
            raise ValueError("a ZooKeeper ensemble needs at least one member")
        if size == 1:
            self.nodes = [ZooKeeperServer(cluster_dir / "zookeeper", host=host)]
            return
        peers = tuple(Peer(myid, host, free_port(host), free_port(host)) for myid in range(1, size + 1))
        self.nodes = [ZooKeeperServer(cluster_dir / f"zookeeper-{peer.myid}", host=host, myid=peer.myid, peers=peers)
                      for peer in peers]

    @property
    def address(self) -> str:
        """The connect string: every member's host:port, comma-separated."""
        return ",".join(node.address for node in self.nodes)

    def describe(self) -> list[dict]:
        """One {"address", "pid"} per member, as the CLUSTER READY line lists them."""
        return [{"address": node.address, "pid": node.pid} for node in self.nodes]

    def start(self, timeout_s: float = 90.0) -> None:
        """Start every member, then wait until each serves (a member serves only once a majority
        runs, so none is waited for before all are launched)."""
        try:
            for node in self.nodes:
                node.launch()
            deadline = time.monotonic() + timeout_s
            for node in self.nodes:
                node.wait_serving(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def leader(self) -> ZooKeeperServer | None:
        """The member that leads now (the only one for a standalone server); None while none does."""
        for node in self.nodes:
            if node.mode() in ("leader", "standalone"):
                return node
        return None

    def wait_serving(self, timeout_s: float = 90.0) -> None:
        """Until every running member serves (after a restart or an election)."""
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            if node.alive():
                node.wait_serving(max(1.0, deadline - time.monotonic()))

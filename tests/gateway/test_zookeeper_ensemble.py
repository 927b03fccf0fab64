"""The configuration a local cluster's ZooKeeper ensemble is started with (no server is started
here: compat_tests/faults/test_zookeeper_faults.py runs real ensembles)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cluster.launcher import ClusterSpec
from gateway.cluster.zookeeper import MAIN_CLASS, QUORUM_MAIN_CLASS
from gateway.cluster.zookeeper_ensemble import ZooKeeperEnsemble


def config_lines(node) -> list[str]:
    return (node.directory / "zoo.cfg").read_text().splitlines()


def test_three_members_share_one_server_list_and_each_has_its_own_id_ports_and_directory(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble(tmp_path, 3)
    commands = [node.command() for node in ensemble.nodes]      # writes zoo.cfg and data/myid
    assert all(command[-2] == QUORUM_MAIN_CLASS for command in commands)
    servers = [sorted(line for line in config_lines(node) if line.startswith("server.")) for node in ensemble.nodes]
    assert servers[0] == servers[1] == servers[2] and len(servers[0]) == 3
    for myid, node in enumerate(ensemble.nodes, start=1):
        assert node.directory == tmp_path / f"zookeeper-{myid}"
        assert (node.directory / "data" / "myid").read_text().strip() == str(myid)
        assert f"clientPort={node.port}" in config_lines(node)
        assert any(line.startswith(f"server.{myid}={node.host}:") for line in servers[0])
    ports = [node.port for node in ensemble.nodes] + [int(port) for line in servers[0]
                                                       for port in line.split(":")[1:]]
    assert len(set(ports)) == 9, "every client, quorum and election port is its own"
    assert ensemble.address == ",".join(node.address for node in ensemble.nodes)
    assert ensemble.describe() == [{"address": node.address, "pid": None} for node in ensemble.nodes]


def test_one_member_is_the_standalone_server_of_before(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble(tmp_path, 1)
    [node] = ensemble.nodes
    assert node.command()[-2] == MAIN_CLASS and node.directory == tmp_path / "zookeeper"
    assert not any(line.startswith("server.") for line in config_lines(node))
    assert not (node.directory / "data" / "myid").exists()
    assert ensemble.address == node.address


def test_a_cluster_needs_at_least_one_zookeeper(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--zookeepers"):
        ClusterSpec(data_dir=tmp_path, zookeepers=0)

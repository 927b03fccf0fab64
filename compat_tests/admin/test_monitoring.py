"""The monitoring shipped in deploy/monitoring against a running cluster (ZooKeeper, a bookie, a
broker): promtool accepts the rules and the scrape configuration, every series the rules and the
Grafana dashboard name is one the processes export, and a real Prometheus scraping the cluster
raises the bookie-down alert once the bookie is killed."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from pathlib import Path

import httpx
import pika
import pytest
from kafka import KafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.conftest import wait_for
from gateway.cluster.launcher import ClusterSpec, LocalCluster

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
SERIES = re.compile(r"\b((?:gateway|rabbitmq)_[a-z0-9_]+|up)\b")
# Series a plain cluster does not export: they appear with geo-replication links configured.
ONLY_WITH_REPLICATION = {"gateway_replication_lag_records"}
HISTOGRAM_AND_COUNTER_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created", "_info")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(data_dir=tmp_path_factory.mktemp("monitored"), bookies=1, brokers=1, ensemble=1,
                       write_quorum=1, ack_quorum=1)
    local = LocalCluster(spec)
    local.start()
    yield local
    local.stop()


def exported(address: str) -> set[str]:
    """Every family and sample name /metrics at `address` shows."""
    text = httpx.get(f"http://{address}/metrics", timeout=30).text
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def named_series() -> dict[str, set[str]]:
    """The series each shipped file names, by file."""
    rules = (MONITORING / "alerts.yml").read_text()
    expressions = [line.split("expr:", 1)[1] for line in rules.splitlines() if "expr:" in line]
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    return {"alerts.yml": {n for e in expressions for n in SERIES.findall(e)},
            "grafana-dashboard.json": {n for q in queries for n in SERIES.findall(q)}}


def test_promtool_accepts_the_rules_and_the_configuration(tmp_path):
    if shutil.which("promtool") is None:
        pytest.skip("no promtool (Debian's prometheus package; `make test` installs it)")
    shutil.copytree(MONITORING, tmp_path / "monitoring")
    (tmp_path / "monitoring" / "targets").mkdir()
    for name in ("brokers.json", "bookies.json"):
        (tmp_path / "monitoring" / "targets" / name).write_text("[]")
    for args in (("check", "rules", "alerts.yml"), ("check", "config", "prometheus.yml")):
        done = subprocess.run(["promtool", *args], cwd=tmp_path / "monitoring", capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    assert "15 rules found" in subprocess.run(["promtool", "check", "rules", "alerts.yml"], cwd=MONITORING,
                                              capture_output=True, text=True, timeout=60).stdout


def test_every_series_the_rules_and_the_dashboard_name_is_exported(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster.brokers[0].ready["kafka"], acks="all")
    for n in range(20):
        producer.send("monitored", f"m{n}".encode())
    producer.flush(timeout=60)
    producer.close()
    host, _, port = cluster.brokers[0].ready["amqp"].rpartition(":")
    with pika.BlockingConnection(pika.ConnectionParameters(host, int(port))) as connection:
        channel = connection.channel()
        channel.queue_declare("monitored-queue")
        channel.confirm_delivery()
        for n in range(3):
            channel.basic_publish("", "monitored-queue", f"m{n}".encode())
    broker, bookie = cluster.brokers[0].ready["admin"], cluster.bookies[0].ready["metrics"]
    assert cluster.ready()["bookies"][0]["metrics"] == bookie      # announced on the CLUSTER READY line too
    bookie_series = exported(bookie)
    names = exported(broker) | bookie_series | {"up"}
    assert {"gateway_bookie_journal_fsync_seconds_bucket", "gateway_bookie_entries_added_total",
            "gateway_bookie_read_only", "gateway_zookeeper_session_state"} <= bookie_series
    for source, used in named_series().items():
        missing = {n for n in used - ONLY_WITH_REPLICATION if n not in names
                   and not any(n.endswith(s) and n[:-len(s)] in names for s in HISTOGRAM_AND_COUNTER_SUFFIXES)}
        assert not missing, f"{source} names series no process exports: {sorted(missing)}"
    text = httpx.get(f"http://{bookie}/metrics", timeout=30).text
    added = next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == "gateway_bookie_entries_added_total")
    assert added >= 1      # the broker's writes reached this bookie (E = Qw = Qa = 1)
    assert 'gateway_zookeeper_session_state{state="connected"} 1.0' in text
    broker_text = httpx.get(f"http://{broker}/metrics", timeout=30).text
    assert 'rabbitmq_queue_messages_ready{queue="monitored-queue",vhost="/"} 3.0' in broker_text


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_prometheus_raises_the_bookie_down_alert(cluster, tmp_path):
    if shutil.which("prometheus") is None:
        pytest.skip("no prometheus (Debian's prometheus package; `make test` installs it)")
    shutil.copy(MONITORING / "alerts.yml", tmp_path / "alerts.yml")
    config = (MONITORING / "prometheus.yml").read_text()
    config = config.replace("scrape_interval: 15s", "scrape_interval: 1s").replace("evaluation_interval: 15s",
                                                                                     "evaluation_interval: 1s")
    (tmp_path / "prometheus.yml").write_text(config)
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "brokers.json").write_text(json.dumps([{"targets": [cluster.brokers[0].ready["admin"]]}]))
    bookie = cluster.bookies[0]
    (tmp_path / "targets" / "bookies.json").write_text(json.dumps([{"targets": [bookie.ready["metrics"]]}]))
    port = _free_port()
    with (tmp_path / "prometheus.log").open("w") as log:
        prometheus = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                                       f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                       f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log,
                                      cwd=tmp_path)
    api = f"http://127.0.0.1:{port}/api/v1"
    try:
        def bookie_up() -> float | None:
            try:
                answer = httpx.get(f"{api}/query", params={"query": 'up{job="gateway-bookies"}'}, timeout=5)
            except httpx.HTTPError:
                return None
            if answer.status_code != 200:     # 503 in plain text while Prometheus starts
                return None
            result = answer.json()
            values = [float(r["value"][1]) for r in result["data"]["result"]]
            return values[0] if values else None

        wait_for(lambda: bookie_up() == 1.0, "Prometheus to scrape the bookie", deadline_s=60)
        assert not _active(api, "GatewayBookieDown")
        bookie.kill()
        wait_for(lambda: _active(api, "GatewayBookieDown"), "the bookie-down alert", deadline_s=60)
        alert, = _active(api, "GatewayBookieDown")
        assert alert["labels"]["instance"] == bookie.ready["metrics"] and alert["state"] in ("pending", "firing")
        assert not _active(api, "GatewayBrokerDown")
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)


def _active(api: str, name: str) -> list[dict]:
    try:
        answer = httpx.get(f"{api}/alerts", timeout=5)
    except httpx.HTTPError:
        return []
    if answer.status_code != 200:
        return []
    alerts = answer.json()["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == name]

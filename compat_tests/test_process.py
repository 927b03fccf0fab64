"""The `gateway serve` process as its operators and launchers see it: READY line, admin API,
signals, configuration sources, start-up failures and restarts after a crash."""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

READY_PREFIX = "GATEWAY READY "


@contextlib.contextmanager
def busy_port() -> Iterator[int]:
    """A port some other program is listening on for the duration of the block."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def admin_client() -> httpx.Client:
    return httpx.Client(timeout=5.0, trust_env=False)  # never route 127.0.0.1 through a proxy


def module_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gateway", "serve", *args]


def test_ready_line_lists_four_listeners_that_accept_connections(gateway_process, tmp_path):
    ports = {gateway_process.kafka[1], gateway_process.amqp[1], gateway_process.mqtt[1], gateway_process.admin[1]}
    assert len(ports) == 4 and 0 not in ports
    assert gateway_process.data_dir == (tmp_path / "data").resolve()
    assert gateway_process.ready["pid"] == gateway_process.proc.pid
    assert gateway_process.stdout_lines == [gateway_process.stdout_lines[0]]
    assert gateway_process.stdout_lines[0].startswith(READY_PREFIX)
    for address in (gateway_process.kafka, gateway_process.amqp, gateway_process.mqtt, gateway_process.admin):
        with socket.create_connection(address, timeout=5):
            pass


def test_admin_api_answers_health_metrics_and_info(gateway_process):
    with admin_client() as client:
        health = client.get(f"{gateway_process.admin_url}/healthz")
        metrics = client.get(f"{gateway_process.admin_url}/metrics")
        info = client.get(f"{gateway_process.admin_url}/api/v1/info")

    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "gateway_up 1.0" in metrics.text
    assert "gateway_build_info{" in metrics.text
    assert set(journal_flushes(metrics.text)) == {"max_wait", "max_bytes", "idle", "inline"}
    assert info.status_code == 200
    body = info.json()
    assert body["listeners"] == {name: gateway_process.ready[name] for name in ("kafka", "amqp", "mqtt", "pulsar", "admin")}
    assert body["data_dir"] == str(gateway_process.data_dir)
    assert body["version"]


def journal_flushes(metrics_text: str) -> dict[str, float]:
    return {line.split('"')[1]: float(line.split()[-1]) for line in metrics_text.splitlines()
            if line.startswith("gateway_storage_journal_flushes_total{")}


def test_a_confirmed_publish_to_an_idle_gateway_is_one_inline_journal_flush(gateway_process):
    import pika
    host, port = gateway_process.amqp
    with admin_client() as client:
        before = journal_flushes(client.get(f"{gateway_process.admin_url}/metrics").text)
        connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
        try:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare("flushes", durable=True)
            channel.basic_publish("", "flushes", b"stored", pika.BasicProperties(delivery_mode=2))
        finally:
            connection.close()
        after = journal_flushes(client.get(f"{gateway_process.admin_url}/metrics").text)
    assert after["inline"] >= before["inline"] + 1     # the event loop flushed the idle journal


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stop_signal_exits_zero_promptly(gateway_process, sig):
    started = time.monotonic()
    assert gateway_process.stop(sig, timeout=10) == 0
    assert time.monotonic() - started < 10
    assert "Traceback" not in gateway_process.stderr


def test_shutdown_closes_idle_client_connections(gateway_process):
    # Clients that just sit on a connection (an idle consumer, a keep-alive HTTP client) must not
    # hold the shutdown up beyond the grace period.
    idle = [socket.create_connection(address, timeout=5)
            for address in (gateway_process.kafka, gateway_process.amqp, gateway_process.admin)]
    try:
        with admin_client() as client:
            assert client.get(f"{gateway_process.admin_url}/healthz").status_code == 200
            started = time.monotonic()
            assert gateway_process.stop(signal.SIGTERM, timeout=10) == 0
        assert time.monotonic() - started < 8
    finally:
        for sock in idle:
            sock.close()


def test_toml_config_env_and_flags_take_precedence_in_that_order(gateway_launcher, tmp_path):
    toml_data_dir = tmp_path / "from-toml"
    with busy_port() as taken_admin, busy_port() as taken_kafka:
        config_file = tmp_path / "gateway.toml"
        config_file.write_text(
            f'data_dir = "{toml_data_dir}"\n'
            'host = "127.0.0.1"\n'
            f"admin_port = {taken_admin}\n"     # overridden by the environment below
            f"kafka_port = {taken_kafka}\n"     # overridden by the environment, then by the flag
            "amqp_port = 0\n"
            "pulsar_port = 0\n"
            'log_level = "warning"\n'
            "\n[storage]\njournal_max_wait_ms = 1.0\n"
        )
        gateway = gateway_launcher.start(
            command=module_command("--config", str(config_file), "--kafka-port", "0"),
            env={"GATEWAY_ADMIN_PORT": "0", "GATEWAY_KAFKA_PORT": str(taken_kafka)},
        )

        assert gateway.data_dir == toml_data_dir
        assert gateway.admin[1] not in (0, taken_admin)
        assert gateway.kafka[1] not in (0, taken_kafka)
        assert gateway.admin[0] == "127.0.0.1"
        assert toml_data_dir.is_dir()
        assert " INFO " not in gateway.stderr  # log_level = "warning" from the file
        assert gateway.stop() == 0


def test_environment_alone_configures_the_process(gateway_launcher, tmp_path):
    env_data_dir = tmp_path / "from-env"
    gateway = gateway_launcher.start(
        command=module_command(),
        env={
            "GATEWAY_DATA_DIR": str(env_data_dir),
            "GATEWAY_HOST": "127.0.0.1",
            "GATEWAY_KAFKA_PORT": "0",
            "GATEWAY_AMQP_PORT": "0",
            "GATEWAY_PULSAR_PORT": "0",
            "GATEWAY_ADMIN_PORT": "0",
            "GATEWAY_LOG_LEVEL": "debug",
        },
    )
    assert gateway.data_dir == env_data_dir
    assert {gateway.kafka[1], gateway.amqp[1], gateway.admin[1]}.isdisjoint({0, 9092, 5672, 8080})
    assert gateway.stop() == 0
    assert " DEBUG " in gateway.stderr


def test_unknown_storage_setting_is_rejected(gateway_launcher, tmp_path):
    config_file = tmp_path / "gateway.toml"
    config_file.write_text("[storage]\njournal_max_wait_ms = 1.0\nno_such_setting = 3\n")
    failure = gateway_launcher.expect_start_failure("--config", str(config_file))
    assert failure.returncode not in (0, None)
    assert READY_PREFIX not in failure.stdout
    assert "no_such_setting" in failure.stderr


def test_invalid_port_from_environment_is_rejected(gateway_launcher):
    failure = gateway_launcher.expect_start_failure(
        command=module_command("--data-dir", "data"), env={"GATEWAY_KAFKA_PORT": "not-a-port"}
    )
    assert failure.returncode not in (0, None)
    assert "GATEWAY_KAFKA_PORT" in failure.stderr


@pytest.mark.parametrize("listener", ["kafka", "amqp", "mqtt", "pulsar", "admin"])
def test_port_in_use_fails_start_up_without_ready(gateway_launcher, listener):
    with busy_port() as taken:
        failure = gateway_launcher.expect_start_failure(f"--{listener}-port", str(taken))
    assert failure.returncode not in (0, None)
    assert READY_PREFIX not in failure.stdout
    assert str(taken) in failure.stderr


def test_unusable_data_dir_fails_start_up_without_ready(gateway_launcher, tmp_path):
    not_a_directory = tmp_path / "occupied"
    not_a_directory.write_text("a file where the data directory should be")
    failure = gateway_launcher.expect_start_failure(data_dir=not_a_directory)
    assert failure.returncode not in (0, None)
    assert READY_PREFIX not in failure.stdout


def test_a_second_gateway_on_a_data_dir_in_use_fails_start_up_and_the_first_goes_on(gateway_launcher, tmp_path):
    data_dir = tmp_path / "data"
    first = gateway_launcher.start(data_dir=data_dir)
    failure = gateway_launcher.expect_start_failure(data_dir=data_dir)     # other ports: 0 each
    assert failure.returncode not in (0, None)
    assert READY_PREFIX not in failure.stdout
    assert f"in use by another process (pid {first.proc.pid})" in failure.stderr
    with admin_client() as client:
        assert client.get(f"{first.admin_url}/healthz").json() == {"status": "ok"}


def test_restart_after_kill_9_on_the_same_data_dir(gateway_launcher, tmp_path):
    data_dir = tmp_path / "data"
    first = gateway_launcher.start(data_dir=data_dir)
    first.kill()
    assert first.proc.returncode == -signal.SIGKILL

    second = gateway_launcher.start(data_dir=data_dir)
    assert second.data_dir == data_dir.resolve()
    with admin_client() as client:
        assert client.get(f"{second.admin_url}/healthz").json() == {"status": "ok"}
    assert second.stop() == 0

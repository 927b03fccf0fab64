"""MQTT fixtures: `mqtt_gateway` (one gateway for the MQTT tests), `mosquitto` (a private mosquitto per
module, Debian's package; skipped, saying why, where it is not installed), and `mqtt_broker`, which
runs a test once against each (the MQTT address of the broker under test, and its name)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass

import pytest

from compat_tests.conftest import start_gateway

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
START_DEADLINE_S = 10.0
DEVICE_USER, DEVICE_PASSWORD, DEVICE_VHOST = "device", "device-secret", "iot/plant"
USERS = f"""
[[users]]
name = "{DEVICE_USER}"
password = "{DEVICE_PASSWORD}"
tenant = "iot"
namespace = "plant"
"""


@dataclass(frozen=True)
class Broker:
    name: str
    host: str
    port: int

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port


@pytest.fixture(scope="session")
def mqtt_gateway(tmp_path_factory):
    """One gateway for every MQTT test module (starting one is most of a short test's time), with
    one user of its own tenant/namespace besides the loopback guest."""
    directory = tmp_path_factory.mktemp("mqtt-gateway")
    config = directory / "gateway.toml"
    config.write_text(USERS)
    process = start_gateway(directory, "--config", str(config))
    yield process
    process.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_mosquitto(directory) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    config = directory / "mosquitto.conf"
    config.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
                      f"persistence_location {directory}/\nlog_dest stderr\n")
    proc = subprocess.Popen([MOSQUITTO, "-c", str(config)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=(directory / "mosquitto.log").open("w"))
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"mosquitto did not start: {(directory / 'mosquitto.log').read_text()}")


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory):
    if not shutil.which(MOSQUITTO):
        pytest.skip("no mosquitto (apt-get install mosquitto): nothing to compare with")
    proc, port = start_mosquitto(tmp_path_factory.mktemp("mosquitto"))
    yield Broker("mosquitto", "127.0.0.1", port)
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(params=["gateway", "mosquitto"])
def mqtt_broker(request) -> Broker:
    if request.param == "gateway":
        host, port = request.getfixturevalue("mqtt_gateway").mqtt
        return Broker("gateway", host, port)
    return request.getfixturevalue("mosquitto")

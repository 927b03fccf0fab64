"""MQTT publish/subscribe through a real `gateway serve` beside a private mosquitto, in one run.

For each QoS level: one paho-mqtt publisher sends --messages messages of --payload bytes (up to 1,000
unacknowledged at a time) to one topic, one subscriber of that QoS receives them; reported are the
messages per second from the first publish to the last delivery and the end-to-end latency (p50,
p99) under that load. Then --idle connections each CONNECT and SUBSCRIBE and stay idle: reported is
the broker's resident memory growth per connection.

mosquitto runs with its defaults: messages only in memory, no persistence. The gateway fsyncs every
QoS 1/2 message before PUBACK / PUBREC.

    python -m bench.mqtt [--messages 20000] [--payload 100] [--idle 2000]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import psutil
from paho.mqtt.enums import CallbackAPIVersion

from bench.reference import free_port, start_gateway

MOSQUITTO = "/usr/sbin/mosquitto"
_STAMP = struct.Struct(">d")
INFLIGHT = 1000           # QoS 1/2 messages each client keeps unacknowledged at most (both directions)


def start_mosquitto(directory: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    config = directory / "mosquitto.conf"
    config.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\nmax_connections -1\n"
                      "max_inflight_messages 1000\nmax_queued_messages 100000\n")
    proc = subprocess.Popen([MOSQUITTO, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("mosquitto did not start")


def _client(client_id: str) -> mqtt.Client:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311)
    client.max_inflight_messages_set(INFLIGHT)
    client.max_queued_messages_set(0)
    return client


def pubsub(port: int, qos: int, messages: int, payload: int) -> tuple[float, float, float]:
    """(messages/s, p50 latency ms, p99 latency ms)."""
    latencies: list[float] = []
    done = threading.Event()
    subscribed = threading.Event()
    subscriber = _client(f"bench-sub-{qos}")

    def on_message(client, userdata, message) -> None:
        latencies.append(time.perf_counter() - _STAMP.unpack_from(message.payload)[0])
        if len(latencies) == messages:
            done.set()
    subscriber.on_message = on_message
    subscriber.on_subscribe = lambda *args: subscribed.set()
    subscriber.connect("127.0.0.1", port)
    subscriber.loop_start()
    subscriber.subscribe(f"bench/{qos}", qos)
    subscribed.wait(10)
    publisher = _client(f"bench-pub-{qos}")
    publisher.connect("127.0.0.1", port)
    publisher.loop_start()
    padding = b"x" * max(0, payload - _STAMP.size)
    started = time.perf_counter()
    for _ in range(messages):
        publisher.publish(f"bench/{qos}", _STAMP.pack(time.perf_counter()) + padding, qos)
    done.wait(300)
    elapsed = time.perf_counter() - started
    for client in (publisher, subscriber):
        client.disconnect()
        client.loop_stop()
    latencies.sort()
    received = len(latencies)
    p50 = statistics.median(latencies) * 1000 if latencies else float("nan")
    p99 = latencies[int(received * 0.99) - 1] * 1000 if latencies else float("nan")
    return received / elapsed, p50, p99


def idle_memory(port: int, pid: int, connections: int) -> float:
    """Resident bytes the broker grows by per idle connection with one subscription."""
    process = psutil.Process(pid)
    before = process.memory_info().rss
    sockets = []
    connect_template = b"\x10%c\x00\x04MQTT\x04\x02\x00\x00\x00\x08%s"   # keep-alive 0: idle for good
    for index in range(connections):
        client_id = f"{index:08d}".encode()
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(connect_template % (10 + 2 + 8, client_id)
                     + b"\x82\x0c\x00\x01\x00\x07idle/" + f"{index % 100:02d}".encode() + b"\x00")
        sockets.append(sock)
    for sock in sockets:      # CONNACK (4 bytes) and SUBACK (5 bytes)
        got = b""
        while len(got) < 9:
            chunk = sock.recv(64)
            if not chunk:
                raise RuntimeError("connection closed while connecting")
            got += chunk
    time.sleep(1.0)
    after = process.memory_info().rss
    for sock in sockets:
        sock.close()
    return (after - before) / connections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--payload", type=int, default=100)
    parser.add_argument("--idle", type=int, default=2_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-mqtt-") as tmp:
        directory = Path(tmp)
        gateway = start_gateway(directory / "data", directory)
        mosquitto, mosquitto_port = start_mosquitto(directory)
        try:
            gateway_port = int(gateway.mqtt.rpartition(":")[2])
            brokers = (("gateway", gateway_port, gateway.pid), ("mosquitto", mosquitto_port, mosquitto.pid))
            print(f"{args.messages} messages of {args.payload} B, one publisher, one subscriber")
            for qos in (0, 1, 2):
                for name, port, _ in brokers:
                    rate, p50, p99 = pubsub(port, qos, args.messages, args.payload)
                    print(f"QoS {qos}  {name:9s} {rate:9.0f} msg/s   latency p50 {p50:8.1f} ms  p99 {p99:8.1f} ms")
            for name, port, pid in brokers:
                per_connection = idle_memory(port, pid, args.idle)
                print(f"idle     {name:9s} {per_connection / 1024:8.1f} KiB per connection ({args.idle} connections)")
        finally:
            gateway.stop()
            mosquitto.terminate()
            mosquitto.wait(10)


if __name__ == "__main__":
    main()

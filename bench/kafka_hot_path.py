"""The Kafka hot path in one process, without sockets or clients: CPU per megabyte produced and fetched.

Drives the same code a connection runs — frame parsing (KafkaServerConnection), the Produce and Fetch
handlers, the core, the managed log, the ledger client and the bookie (fsync on) — with Produce
requests of `--partitions` partitions × one batch of `--records` 1 KiB records each, at most five
in flight (as librdkafka sends them), then Fetch requests reading everything back. Then the
low-rate pattern of a tailing consumer: one Produce request of one 1 KiB record (partitions in
turn), and once it is acknowledged one Fetch of every partition at the consumer's caught-up
offsets, which returns that record (`--messages` of them; CPU per message). CPU is the process's
(every thread: the journal's and the read workers' too), so it is steadier than
end-to-end throughput on a shared machine; it is the figure to compare before and after a change.

    python -m bench.kafka_hot_path [--requests 400] [--partitions 8] [--records 100] [--messages 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import tempfile
import time
from pathlib import Path

from core.names import TopicName
from core.records.builder import Record, build_batch
from core.service import Core
from gateway.runtime import event_loop_factory, tune_gc
from protocols.kafka import registry
from protocols.kafka.broker import KafkaBroker, KafkaSettings, RequestContext
from protocols.kafka.codec.compile import request_codec
from protocols.kafka.handlers import fetch, produce
from protocols.kafka.machine.connection import KafkaServerConnection, Limits
from protocols.kafka.schema.fetch import FETCH
from protocols.kafka.schema.produce import PRODUCE
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage

TOPIC = "hot"
PRODUCE_VERSION = 8
FETCH_VERSION = 11
IN_FLIGHT = 5


def request_frame(api, version: int, correlation_id: int, body: dict) -> bytes:
    out = bytearray()
    request_codec(api, version).write(out, body)
    header = struct.pack(">hhih", api.key, version, correlation_id, 5) + b"bench"
    return struct.pack(">i", len(header) + len(out)) + header + out


def produce_frames(count: int, partitions: int, records: int) -> list[bytes]:
    value = bytes(range(256)) * 4
    batch = build_batch([Record(int(time.time() * 1000), key=None, value=value) for _ in range(records)])
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 30_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": p, "records": batch}
                                                              for p in range(partitions)]}]}
    return [request_frame(PRODUCE, PRODUCE_VERSION, i, body) for i in range(count)], len(batch)


def fetch_frame(correlation_id: int, offsets: list[int]) -> bytes:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": p, "fetch_offset": o, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
                for p, o in enumerate(offsets)]}], "forgotten_topics_data": []}
    return request_frame(FETCH, FETCH_VERSION, correlation_id, body)


def feed(conn: KafkaServerConnection, frame: bytes, chunk: int = 256 * 1024) -> list:
    """Hand the frame over in socket-sized reads, as the server does."""
    events = []
    for start in range(0, len(frame), chunk):
        events.extend(conn.receive_data(frame[start:start + chunk]))
    return events


async def _serving(data_dir: Path, partitions: int):
    """Embedded storage, a core with the topic, a Kafka broker and one connection's machine."""
    storage = await EmbeddedStorage.open(data_dir, StorageConfig())
    core = Core(storage.metadata, storage.logs)
    await core.start()
    await core.create_topic(TopicName.of(TOPIC), partitions)
    broker = KafkaBroker(core, KafkaSettings("127.0.0.1", 9092), registry.advertised())
    return storage, core, broker, KafkaServerConnection(registry.APIS, Limits())


async def run(data_dir: Path, requests: int, partitions: int, records: int) -> dict[str, float]:
    storage, core, broker, conn = await _serving(data_dir, partitions)
    frames, batch_bytes = produce_frames(requests, partitions, records)
    produced_bytes = requests * partitions * batch_bytes

    async def respond(event) -> int:
        result = await produce.handle(event.body, RequestContext(broker, event.header))
        body = await result if asyncio.iscoroutine(result) else result
        return len(conn.response(event.api, event.header, body))

    in_flight: set[asyncio.Task] = set()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for frame in frames:
        for event in feed(conn, frame):
            if len(in_flight) >= IN_FLIGHT:
                _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            in_flight.add(asyncio.ensure_future(respond(event)))
    await asyncio.gather(*in_flight)
    produce_cpu, produce_wall = time.process_time() - cpu0, time.perf_counter() - wall0

    offsets = [0] * partitions
    ends = [(await core.partition(TopicName.of(TOPIC), p)).high_watermark for p in range(partitions)]
    fetched = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    correlation = 0
    while offsets != ends:
        correlation += 1
        for event in feed(conn, fetch_frame(correlation, offsets)):
            body = await fetch.handle(event.body, RequestContext(broker, event.header))
            response = conn.response(event.api, event.header, body)
            fetched += len(response)
            for part in body["responses"][0]["partitions"]:
                records_bytes = part["records"]
                if records_bytes:
                    offsets[part["partition_index"]] = _next_offset(records_bytes)
    fetch_cpu, fetch_wall = time.process_time() - cpu0, time.perf_counter() - wall0
    await core.close()
    await storage.close()
    mb = produced_bytes / 1e6
    return {"produced_mb": mb, "produce_cpu_s": produce_cpu, "produce_wall_s": produce_wall,
            "produce_cpu_ms_per_mb": produce_cpu / mb * 1000, "produce_us_per_request": produce_cpu / requests * 1e6,
            "fetch_requests": correlation, "fetched_mb": fetched / 1e6, "fetch_cpu_s": fetch_cpu,
            "fetch_wall_s": fetch_wall, "fetch_cpu_ms_per_mb": fetch_cpu / (fetched / 1e6) * 1000}


async def run_tailing(data_dir: Path, messages: int, partitions: int) -> float:
    """CPU µs per message of: Produce one record, then Fetch every partition from where the consumer is."""
    storage, core, broker, conn = await _serving(data_dir, partitions)
    value = bytes(range(256)) * 4
    offsets = [0] * partitions
    cpu0 = time.process_time()
    for n in range(messages):
        batch = build_batch([Record(int(time.time() * 1000), key=None, value=value)])
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 30_000,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": n % partitions, "records": batch}]}]}
        for event in feed(conn, request_frame(PRODUCE, PRODUCE_VERSION, 2 * n, body)):
            result = await produce.handle(event.body, RequestContext(broker, event.header))
            conn.response(event.api, event.header, await result if asyncio.iscoroutine(result) else result)
        for event in feed(conn, fetch_frame(2 * n + 1, offsets)):
            body = await fetch.handle(event.body, RequestContext(broker, event.header))
            conn.response(event.api, event.header, body)
            for part in body["responses"][0]["partitions"]:
                if part["records"]:
                    offsets[part["partition_index"]] = _next_offset(part["records"])
    cpu = time.process_time() - cpu0
    assert sum(offsets) == messages, offsets
    await core.close()
    await storage.close()
    return cpu / messages * 1e6


def _next_offset(records: bytes | memoryview) -> int:
    """One past the last offset of the last batch in a Fetch answer."""
    view = memoryview(records)
    position = last = 0
    while position + 61 <= len(view):
        base, length = struct.unpack_from(">qi", view, position)
        last_delta = struct.unpack_from(">i", view, position + 23)[0]
        last = base + last_delta + 1
        position += 12 + length
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--records", type=int, default=100, help="1 KiB records per batch")
    parser.add_argument("--messages", type=int, default=3000, help="messages of the tailing run (0 skips it)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the lowest CPU counts")
    parser.add_argument("--only-tailing", action="store_true", help="skip the throughput runs")
    args = parser.parse_args()
    tune_gc()        # as the gateway process runs
    best: dict[str, float] = {}
    for _ in range(0 if args.only_tailing else args.repeat):
        with tempfile.TemporaryDirectory(dir=Path.cwd(), prefix="bench-hot-") as directory:
            with asyncio.Runner(loop_factory=event_loop_factory()) as runner:   # the gateway's loop
                result = runner.run(run(Path(directory), args.requests, args.partitions, args.records))
        for key in ("produce_cpu_ms_per_mb", "fetch_cpu_ms_per_mb"):
            if key not in best or result[key] < best[key]:
                best[key] = result[key]
        best.update({k: v for k, v in result.items() if k not in best})
    if args.messages:
        tailing = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(dir=Path.cwd(), prefix="bench-hot-") as directory:
                with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
                    tailing.append(runner.run(run_tailing(Path(directory), args.messages, args.partitions)))
        print(f"tailing: {args.messages} messages, each produced alone and fetched over {args.partitions} "
              f"partitions: {min(tailing):.0f} CPU µs/message (best of {args.repeat})")
    if args.only_tailing:
        return
    print(f"produce: {best['produced_mb']:.0f} MB in {args.requests} requests of {args.partitions} partitions × "
          f"{args.records} records: {best['produce_cpu_ms_per_mb']:.2f} CPU ms/MB (best of {args.repeat})")
    print(f"fetch:   {best['fetched_mb']:.0f} MB in {best['fetch_requests']:.0f} requests: "
          f"{best['fetch_cpu_ms_per_mb']:.2f} CPU ms/MB (best of {args.repeat})")


if __name__ == "__main__":
    main()

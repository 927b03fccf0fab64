"""Produce and consume through a real `gateway serve` with every real client in scope:
kafka-python, aiokafka, confluent-kafka (librdkafka) and kcat (the Debian package, librdkafka 2.0.2).

Each client writes keys, headers, CreateTime timestamps, null keys and tombstones with every
compression codec and acks setting (idempotence on wherever acks=all allows it), and each client
reads what each other client wrote, byte for byte. Also: max.message.bytes at its boundary, topics
auto-created or refused, manual assignment with seeks and offset look-ups. Transactional producers
are tested in test_kafka_transactions.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as aiokafka_errors
from aiokafka.structs import TopicPartition as AioPartition
from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import KafkaAdminClient, NewTopic

TIMEOUT_S = 20.0
T0 = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}   # RecordBatch attributes bits 0-2
CLIENTS = ("kafka-python", "aiokafka", "confluent-kafka", "kcat")
ACKS = ("0", "1", "all")
MESSAGE_TOO_LARGE = 10
UNKNOWN_TOPIC_OR_PARTITION = 3
# A one-record batch without key or headers is this much bigger than its value, for values of 8 KiB
# up to 1 MiB (whose lengths take 3-byte varints): a 61-byte batch header and 11 bytes of record framing.
ONE_RECORD_BATCH_OVERHEAD = 72


@dataclass(frozen=True)
class Message:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int | None   # None: the producer's clock (kcat cannot set a timestamp)


@dataclass(frozen=True)
class Record:
    """A consumed record, as each client reports it, normalised."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int
    create_time: bool | None   # None: the client does not say (kcat's -f output)


def message_set(writer: str) -> list[Message]:
    """What each writer sends: text with a key, a null key, a tombstone, a large compressible
    value, and binary key and value. kcat sets one header list per invocation, so the first four share one."""
    tag = writer.encode()
    headers = (("source", tag), ("dup", b"1"), ("dup", b"2"), ("empty", b""))
    stamp = (lambda i: None) if writer == "kcat" else (lambda i: T0 + i)
    return [
        Message(b"key-" + tag, "value from ".encode() + tag + " \u00e9\u6f22".encode(), headers, stamp(0)),
        Message(None, b"null key from " + tag, headers, stamp(1)),
        Message(b"tombstone-" + tag, None, headers, stamp(2)),
        Message(b"big-" + tag, b"x" * 5000 + tag, headers, stamp(3)),
        Message(bytes(range(1, 256)), bytes(range(255, -1, -1)) * 4, (("source", tag), ("kind", b"binary")), stamp(4)),
    ]


def bootstrap(gateway) -> str:
    host, port = gateway.kafka
    return f"{host}:{port}"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed: `make test` installs it (Debian package kcat, listed in the "
                    "Makefile's SYSTEM_PACKAGES); run `make system-packages` or `apt-get install kcat`")
    return path


# --- writers --------------------------------------------------------------------------------------


def write_kafka_python(gateway, topic: str, messages: list[Message], codec: str, acks: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap(gateway), compression_type=None if codec == "none" else codec,
                             acks="all" if acks == "all" else int(acks), enable_idempotence=acks == "all",
                             linger_ms=20)
    try:
        futures = [producer.send(topic, key=m.key, value=m.value, headers=list(m.headers), partition=0,
                                 timestamp_ms=m.timestamp_ms) for m in messages]
        producer.flush(TIMEOUT_S)
        for future in futures:
            future.get(TIMEOUT_S)
    finally:
        producer.close()


def write_aiokafka(gateway, topic: str, messages: list[Message], codec: str, acks: str) -> None:
    async def write() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap(gateway),
                                    compression_type=None if codec == "none" else codec,
                                    acks="all" if acks == "all" else int(acks), enable_idempotence=acks == "all",
                                    linger_ms=20)
        await producer.start()
        try:
            futures = [await producer.send(topic, key=m.key, value=m.value, headers=list(m.headers), partition=0,
                                           timestamp_ms=m.timestamp_ms) for m in messages]
            await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT_S)
        finally:
            await producer.stop()
    asyncio.run(write())


def confluent_producer(gateway, **config) -> Producer:
    return Producer({"bootstrap.servers": bootstrap(gateway), "linger.ms": 20, **config})


def write_confluent(gateway, topic: str, messages: list[Message], codec: str, acks: str) -> None:
    producer = confluent_producer(gateway, **{"compression.type": codec, "acks": acks,
                                              "enable.idempotence": acks == "all"})
    failures = []
    for m in messages:
        producer.produce(topic, value=m.value, key=m.key, headers=list(m.headers), partition=0,
                         timestamp=m.timestamp_ms or 0,
                         on_delivery=lambda err, msg: failures.append(err) if err is not None else None)
    assert producer.flush(TIMEOUT_S) == 0, "messages still undelivered"
    assert failures == []


def kcat_produce_args(gateway, topic: str, codec: str, acks: str, headers) -> list[str]:
    args = ["-b", bootstrap(gateway), "-P", "-t", topic, "-p", "0", "-X", f"acks={acks}"]
    if acks == "all":
        args += ["-X", "enable.idempotence=true"]
    if codec != "none":
        args += ["-z", codec]
    for name, value in headers:
        args += ["-H", f"{name}={value.decode()}"]
    return args


def write_kcat(gateway, topic: str, messages: list[Message], codec: str, acks: str, *, kcat: str) -> None:
    *text, binary = messages
    assert all(m.headers == text[0].headers for m in text)
    # Lines of "key<TAB>value"; with -Z an empty key or value is sent as null.
    lines = b"".join((m.key or b"") + b"\t" + (m.value or b"") + b"\n" for m in text)
    run([kcat, *kcat_produce_args(gateway, topic, codec, acks, text[0].headers), "-K", "\\t", "-Z"], lines)
    # The binary value from a file (the whole file is one message), the key from the command line.
    with file_holding(binary.value) as path:
        run([kcat, *kcat_produce_args(gateway, topic, codec, acks, binary.headers), "-k", binary.key, path], b"")


@contextlib.contextmanager
def file_holding(data: bytes) -> Iterator[str]:
    with tempfile.NamedTemporaryFile(suffix=".bin") as file:
        file.write(data)
        file.flush()
        yield file.name


def run(args: list, stdin: bytes) -> bytes:
    result = subprocess.run(args, input=stdin, capture_output=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, f"{args[0]} failed ({result.returncode}): {result.stderr.decode(errors='replace')}"
    return result.stdout


def writer(client: str, kcat_path: str | None) -> Callable[..., None]:
    if client == "kcat":
        return lambda *args: write_kcat(*args, kcat=kcat_path)
    return {"kafka-python": write_kafka_python, "aiokafka": write_aiokafka, "confluent-kafka": write_confluent}[client]


# --- readers: each reads partition 0 of each topic from the beginning -----------------------------


def read_kafka_python(gateway, counts: dict[str, int]) -> dict[str, list[Record]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway), group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    got: dict[str, list[Record]] = {topic: [] for topic in counts}
    try:
        consumer.assign([TopicPartition(topic, 0) for topic in counts])
        deadline = time.monotonic() + TIMEOUT_S
        while any(len(got[t]) < n for t, n in counts.items()) and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tp.topic] += [Record(r.offset, r.key, r.value, tuple(r.headers), r.timestamp, r.timestamp_type == 0)
                                  for r in records]
    finally:
        consumer.close()
    return got


def read_aiokafka(gateway, counts: dict[str, int]) -> dict[str, list[Record]]:
    async def read() -> dict[str, list[Record]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap(gateway), group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await consumer.start()
        got: dict[str, list[Record]] = {topic: [] for topic in counts}
        try:
            consumer.assign([AioPartition(topic, 0) for topic in counts])
            deadline = time.monotonic() + TIMEOUT_S
            while any(len(got[t]) < n for t, n in counts.items()) and time.monotonic() < deadline:
                for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                    got[tp.topic] += [Record(r.offset, r.key, r.value, tuple(r.headers), r.timestamp,
                                             r.timestamp_type == 0) for r in records]
        finally:
            await consumer.stop()
        return got
    return asyncio.run(read())


def confluent_consumer(gateway, **config) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap(gateway), "group.id": unique("reader"),
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                     **config})


def read_confluent(gateway, counts: dict[str, int]) -> dict[str, list[Record]]:
    consumer = confluent_consumer(gateway)
    got: dict[str, list[Record]] = {topic: [] for topic in counts}
    try:
        consumer.assign([ConfluentPartition(topic, 0, OFFSET_BEGINNING) for topic in counts])
        deadline = time.monotonic() + TIMEOUT_S
        while any(len(got[t]) < n for t, n in counts.items()) and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            kind, timestamp = message.timestamp()
            got[message.topic()].append(Record(message.offset(), message.key(), message.value(),
                                               tuple(message.headers() or ()), timestamp,
                                               kind == TIMESTAMP_CREATE_TIME))
    finally:
        consumer.close()
    return got


KCAT_FORMAT = "%o|%T|%K|%S|%h|%k%s\\n"


def parse_kcat_output(output: bytes) -> list[Record]:
    """Records printed with KCAT_FORMAT: lengths first, so keys and values may hold any byte."""
    records = []
    position = 0
    while position < len(output):
        fields = []
        for _ in range(5):
            end = output.index(b"|", position)
            fields.append(output[position:end])
            position = end + 1
        offset, timestamp, key_length, value_length = (int(f) for f in fields[:4])
        headers = tuple((name.decode(), value) for name, _, value in
                        (item.partition(b"=") for item in fields[4].split(b","))) if fields[4] else ()
        key = None if key_length < 0 else output[position:position + key_length]
        position += max(key_length, 0)
        value = None if value_length < 0 else output[position:position + value_length]
        position += max(value_length, 0)
        assert output[position:position + 1] == b"\n", f"kcat output out of step at {position}"
        position += 1
        records.append(Record(offset, key, value, headers, timestamp, None))
    return records


def read_kcat(gateway, counts: dict[str, int], *, kcat: str) -> dict[str, list[Record]]:
    return {topic: parse_kcat_output(run([kcat, "-b", bootstrap(gateway), "-C", "-t", topic, "-p", "0", "-o",
                                          "beginning", "-e", "-c", str(count), "-q", "-f", KCAT_FORMAT], b""))
            for topic, count in counts.items()}


def reader(client: str, kcat_path: str | None) -> Callable[..., dict[str, list[Record]]]:
    if client == "kcat":
        return lambda *args: read_kcat(*args, kcat=kcat_path)
    return {"kafka-python": read_kafka_python, "aiokafka": read_aiokafka, "confluent-kafka": read_confluent}[client]


# --- raw look at what is stored (hand-written Fetch v4 and ApiVersions v0) ------------------------


def raw_request(gateway, api_key: int, version: int, body: bytes) -> bytes:
    payload = struct.pack(">hhih", api_key, version, 1, 3) + b"raw" + body
    with socket.create_connection(gateway.kafka, timeout=TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        return _recv(sock, size)[4:]  # past the correlation id


def _recv(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return bytes(data)


def stored_codecs(gateway, topic: str) -> list[int]:
    """The compression codec of each stored batch of partition 0, from a raw Fetch v4."""
    name = topic.encode()
    body = struct.pack(">iiiib", -1, 0, 0, 10 << 20, 0) + struct.pack(">ih", 1, len(name)) + name + struct.pack(
        ">iiqi", 1, 0, 0, 10 << 20)
    answer = raw_request(gateway, 1, 4, body)
    position = 4 + 4                                      # throttle time, topic count
    position += 2 + struct.unpack_from(">h", answer, position)[0] + 4   # topic name, partition count
    _, error_code = struct.unpack_from(">ih", answer, position)
    assert error_code == 0
    position += 4 + 2 + 8 + 8                             # partition, error, high watermark, last stable
    aborted = struct.unpack_from(">i", answer, position)[0]
    position += 4 + 16 * max(aborted, 0)
    size = struct.unpack_from(">i", answer, position)[0]
    records = answer[position + 4:position + 4 + size]
    codecs = []
    while len(records) >= 23:
        batch_length = struct.unpack_from(">i", records, 8)[0]
        assert records[16] == 2, "magic 2"
        codecs.append(struct.unpack_from(">h", records, 21)[0] & 0x7)
        records = records[12 + batch_length:]
    return codecs


def advertised_versions(gateway) -> dict[int, tuple[int, int]]:
    answer = raw_request(gateway, 18, 0, b"")
    error_code, count = struct.unpack_from(">hi", answer)
    assert error_code == 0
    return {key: (low, high) for key, low, high in (struct.unpack_from(">hhh", answer, 6 + 6 * i) for i in range(count))}


# --- checks ---------------------------------------------------------------------------------------


def assert_records_match(records: list[Record], messages: list[Message], *, who: str,
                         window: tuple[int, int] | None = None) -> None:
    assert len(records) == len(messages), f"{who}: {len(records)} records, expected {len(messages)}"
    for index, (record, message) in enumerate(zip(records, messages)):
        where = f"{who}, record {index}"
        assert record.offset == index, where
        assert (record.key, record.value, record.headers) == (message.key, message.value, message.headers), where
        if message.timestamp_ms is not None:
            assert record.timestamp_ms == message.timestamp_ms, where
        else:
            low, high = window
            assert low <= record.timestamp_ms <= high, f"{where}: producer timestamp {record.timestamp_ms} not in {window}"
        assert record.create_time in (True, None), f"{where}: not CreateTime"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_client_reads_back_what_it_wrote_with_acks_0_1_and_all(gateway_process, client, request):
    kcat_path = request.getfixturevalue("kcat") if client == "kcat" else None
    topics = {}
    for acks, codec in zip(ACKS, ("none", "gzip", "zstd")):
        topic = unique(f"acks-{acks}-{client}")
        messages = message_set(client)
        started = now_ms()
        writer(client, kcat_path)(gateway_process, topic, messages, codec, acks)
        topics[topic] = (messages, (started, now_ms()))
    got = reader(client, kcat_path)(gateway_process, {topic: len(m) for topic, (m, _) in topics.items()})
    for topic, (messages, window) in topics.items():
        assert_records_match(got[topic], messages, who=f"{client} on {topic}", window=window)


def test_every_client_reads_what_every_client_wrote_with_every_codec_byte_for_byte(gateway_process, kcat):
    written: dict[str, tuple[list[Message], tuple[int, int], str]] = {}
    for client in CLIENTS:
        for codec in CODECS:
            topic = unique(f"matrix-{client}-{codec}")
            messages = message_set(client)
            started = now_ms()
            writer(client, kcat)(gateway_process, topic, messages, codec, "all")
            written[topic] = (messages, (started, now_ms()), codec)

    for topic, (_, _, codec) in written.items():
        codecs = stored_codecs(gateway_process, topic)
        assert codecs and set(codecs) == {CODEC_IDS[codec]}, f"{topic}: stored batch codecs {codecs}"

    counts = {topic: len(messages) for topic, (messages, _, _) in written.items()}
    seen_timestamps: dict[str, list[int]] = {}
    for client in CLIENTS:
        got = reader(client, kcat)(gateway_process, counts)
        for topic, (messages, window, _) in written.items():
            assert_records_match(got[topic], messages, who=f"{client} reading {topic}", window=window)
            previous = seen_timestamps.setdefault(topic, [r.timestamp_ms for r in got[topic]])
            assert [r.timestamp_ms for r in got[topic]] == previous, f"{client} disagrees on timestamps of {topic}"


def create_topic(gateway, name: str, configs: dict[str, str]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(gateway), request_timeout_ms=10_000)
    try:
        result = admin.create_topics([NewTopic(name, 1, 1, topic_configs=configs)])
        assert [t["error_code"] for t in result["topics"]] == [0]
    finally:
        admin.close()


MAX_MESSAGE_BYTES = 20_000


def produce_one(client: str, gateway, topic: str, value: bytes, kcat_path: str | None):
    """Produce one record without key or headers; returns None, or the Kafka error code reported."""
    if client == "kafka-python":
        producer = KafkaProducer(bootstrap_servers=bootstrap(gateway), max_request_size=4 << 20, retries=0)
        try:
            producer.send(topic, value, partition=0).get(TIMEOUT_S)
        except kafka_errors.KafkaError as exc:
            return exc.errno
        finally:
            producer.close()
        return None
    if client == "aiokafka":
        async def send():
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap(gateway), max_request_size=4 << 20)
            await producer.start()
            try:
                await asyncio.wait_for(producer.send_and_wait(topic, value, partition=0), TIMEOUT_S)
            except aiokafka_errors.KafkaError as exc:
                return exc.errno
            finally:
                await producer.stop()
            return None
        return asyncio.run(send())
    if client == "confluent-kafka":
        producer = confluent_producer(gateway, **{"message.max.bytes": 4 << 20, "retries": 0})
        errors = []
        producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: errors.append(err))
        producer.flush(TIMEOUT_S)
        [error] = errors
        return None if error is None else error.code()
    with file_holding(value) as path:   # a file is sent whole, as one message
        result = subprocess.run([kcat_path, "-b", bootstrap(gateway), "-P", "-t", topic, "-p", "0", "-X",
                                 "message.max.bytes=4194304", path], capture_output=True, timeout=TIMEOUT_S)
    if result.returncode == 0:
        return None
    assert b"Broker: Message size too large" in result.stderr, result.stderr
    return MESSAGE_TOO_LARGE


@pytest.mark.parametrize("client", CLIENTS)
def test_record_at_max_message_bytes_is_accepted_and_one_byte_more_is_message_too_large(gateway_process, client,
                                                                                         request):
    kcat_path = request.getfixturevalue("kcat") if client == "kcat" else None
    topic = unique(f"limit-{client}")
    create_topic(gateway_process, topic, {"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    largest = b"a" * (MAX_MESSAGE_BYTES - ONE_RECORD_BATCH_OVERHEAD)
    assert produce_one(client, gateway_process, topic, largest, kcat_path) is None
    assert produce_one(client, gateway_process, topic, largest + b"a", kcat_path) == MESSAGE_TOO_LARGE
    [record] = read_kafka_python(gateway_process, {topic: 1})[topic]
    assert record.value == largest


def test_default_max_message_bytes_is_kafkas_1048588(gateway_process):
    topic = unique("default-limit")
    largest = b"d" * (1048588 - ONE_RECORD_BATCH_OVERHEAD)
    assert produce_one("kafka-python", gateway_process, topic, largest, None) is None
    assert produce_one("kafka-python", gateway_process, topic, largest + b"d", None) == MESSAGE_TOO_LARGE


@pytest.mark.parametrize("client", CLIENTS)
def test_unknown_topic_is_created_on_first_produce_when_auto_creation_is_on(gateway_process, client, request):
    kcat_path = request.getfixturevalue("kcat") if client == "kcat" else None
    topic = unique(f"auto-{client}")
    messages = message_set(client)
    started = now_ms()
    writer(client, kcat_path)(gateway_process, topic, messages, "none", "all")
    got = reader(client, kcat_path)(gateway_process, {topic: len(messages)})
    assert_records_match(got[topic], messages, who=client, window=(started, now_ms()))


@pytest.fixture
def no_auto_create(gateway_launcher):
    return gateway_launcher.start("--no-kafka-auto-create-topics")


def test_unknown_topic_is_refused_when_auto_creation_is_off(no_auto_create, kcat):
    gateway = no_auto_create
    topic = unique("absent")

    # confluent-kafka: delivery fails with the broker's error, and so does subscribing.
    producer = confluent_producer(gateway, **{"topic.metadata.propagation.max.ms": 100, "message.timeout.ms": 10_000})
    errors = []
    producer.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert [e.code() for e in errors] == [KafkaError.UNKNOWN_TOPIC_OR_PART]
    consumer = confluent_consumer(gateway, **{"topic.metadata.propagation.max.ms": 100})
    try:
        consumer.subscribe([topic])
        message = poll_for(lambda: consumer.poll(0.5))
        assert message.error().code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        consumer.close()

    # aiokafka raises it from send.
    async def aiokafka_send():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap(gateway), request_timeout_ms=5000)
        await producer.start()
        try:
            await asyncio.wait_for(producer.send_and_wait(topic, b"x"), TIMEOUT_S)
        finally:
            await producer.stop()
    with pytest.raises(aiokafka_errors.UnknownTopicOrPartitionError):
        asyncio.run(aiokafka_send())

    # kafka-python's producer only waits for metadata that never names the topic; its admin client
    # shows the broker's answer.
    kp_producer = KafkaProducer(bootstrap_servers=bootstrap(gateway), max_block_ms=1000)
    try:
        with pytest.raises(kafka_errors.KafkaTimeoutError, match="Failed to update metadata"):
            kp_producer.send(topic, b"x")
    finally:
        kp_producer.close()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(gateway))
    try:
        assert [t["error_code"] for t in admin.describe_topics([topic])] == [UNKNOWN_TOPIC_OR_PARTITION]
        assert topic not in admin.list_topics()
    finally:
        admin.close()

    # kcat reports it too.
    result = subprocess.run([kcat, "-b", bootstrap(gateway), "-P", "-t", topic, "-p", "0", "-X",
                             "topic.metadata.propagation.max.ms=100"], input=b"x\n", capture_output=True,
                            timeout=TIMEOUT_S)
    assert result.returncode != 0 and b"Unknown topic or partition" in result.stderr, result.stderr

    # A Produce request naming the topic anyway gets UNKNOWN_TOPIC_OR_PARTITION for its partition.
    name = topic.encode()
    body = struct.pack(">hhii", -1, 1, 5000, 1) + struct.pack(">h", len(name)) + name + struct.pack(">iii", 1, 0, 0)
    answer = raw_request(gateway, 0, 3, body)   # v3: null transactional id, acks 1, an empty record set
    partition_error = struct.unpack_from(">ih", answer, 4 + 2 + len(name) + 4)[1]
    assert partition_error == UNKNOWN_TOPIC_OR_PARTITION


def poll_for(get):
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        value = get()
        if value is not None:
            return value
    raise AssertionError("nothing arrived in time")


# --- manual assignment, seeks and offset look-ups -------------------------------------------------

SEEK_COUNT = 10


def timed_messages() -> list[Message]:
    return [Message(b"k%d" % i, b"v%d" % i, (), T0 + 1000 * i) for i in range(SEEK_COUNT)]


def test_kafka_python_assign_seek_offsets_for_times_and_beginning_end_offsets(gateway_process):
    topic = unique("seek-kafka-python")
    write_kafka_python(gateway_process, topic, timed_messages(), "none", "all")
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(gateway_process), group_id=None, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: SEEK_COUNT}
        found = consumer.offsets_for_times({tp: T0 + 3500})[tp]
        assert (found.offset, found.timestamp) == (4, T0 + 4000)
        assert consumer.offsets_for_times({tp: T0 + 1000 * SEEK_COUNT})[tp] is None
        consumer.seek(tp, 7)
        records = poll_for(lambda: consumer.poll(timeout_ms=500).get(tp))
        assert (records[0].offset, records[0].key) == (7, b"k7")
        consumer.seek_to_beginning(tp)
        assert consumer.position(tp) == 0
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == SEEK_COUNT
    finally:
        consumer.close()


def test_aiokafka_assign_seek_offsets_for_times_and_beginning_end_offsets(gateway_process):
    topic = unique("seek-aiokafka")
    write_aiokafka(gateway_process, topic, timed_messages(), "none", "all")
    tp = AioPartition(topic, 0)

    async def check() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap(gateway_process), group_id=None,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([tp])
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: SEEK_COUNT}
            found = (await consumer.offsets_for_times({tp: T0 + 3500}))[tp]
            assert (found.offset, found.timestamp) == (4, T0 + 4000)
            assert (await consumer.offsets_for_times({tp: T0 + 1000 * SEEK_COUNT}))[tp] is None
            consumer.seek(tp, 7)
            record = await asyncio.wait_for(consumer.getone(), TIMEOUT_S)
            assert (record.offset, record.key) == (7, b"k7")
            await consumer.seek_to_beginning(tp)
            assert await consumer.position(tp) == 0
            await consumer.seek_to_end(tp)
            assert await consumer.position(tp) == SEEK_COUNT
        finally:
            await consumer.stop()
    asyncio.run(check())


def test_confluent_assign_seek_offsets_for_times_and_watermarks(gateway_process):
    topic = unique("seek-confluent")
    write_confluent(gateway_process, topic, timed_messages(), "none", "all")
    consumer = confluent_consumer(gateway_process)
    try:
        assert consumer.get_watermark_offsets(ConfluentPartition(topic, 0), timeout=TIMEOUT_S) == (0, SEEK_COUNT)
        [found] = consumer.offsets_for_times([ConfluentPartition(topic, 0, T0 + 3500)], timeout=TIMEOUT_S)
        assert found.offset == 4
        [after_end] = consumer.offsets_for_times([ConfluentPartition(topic, 0, T0 + 1000 * SEEK_COUNT)],
                                                 timeout=TIMEOUT_S)
        assert after_end.offset == -1   # librdkafka's "no such offset" (OFFSET_END)
        consumer.assign([ConfluentPartition(topic, 0, 2)])
        first = poll_for(lambda: consumer.poll(0.5))
        assert (first.offset(), first.key()) == (2, b"k2")
        consumer.seek(ConfluentPartition(topic, 0, 7))
        after_seek = poll_for(lambda: consumer.poll(0.5))
        assert (after_seek.offset(), after_seek.key()) == (7, b"k7")
    finally:
        consumer.close()


def test_kcat_queries_offsets_for_times_and_consumes_from_an_offset(gateway_process, kcat):
    topic = unique("seek-kcat")
    write_kafka_python(gateway_process, topic, timed_messages(), "none", "all")
    query = run([kcat, "-b", bootstrap(gateway_process), "-Q", "-t", f"{topic}:0:{T0 + 3500}"], b"").decode()
    assert f"{topic} [0] offset 4" in query
    records = parse_kcat_output(run([kcat, "-b", bootstrap(gateway_process), "-C", "-t", topic, "-p", "0",
                                     "-o", "7", "-e", "-q", "-f", KCAT_FORMAT], b""))
    assert [(r.offset, r.key, r.timestamp_ms) for r in records] == [(i, b"k%d" % i, T0 + 1000 * i)
                                                                    for i in range(7, SEEK_COUNT)]


# --- kcat -----------------------------------------------------------------------------------------


def test_kcat_produces_lz4_and_consumes_keys_and_headers(gateway_process, kcat):
    topic = unique("kcat-lz4")
    lines = b"".join(b"key-%d:value %d %s\n" % (i, i, b"y" * 200) for i in range(20))
    run([kcat, "-b", bootstrap(gateway_process), "-P", "-t", topic, "-z", "lz4", "-K:", "-H", "trace=abc",
         "-H", "n=1"], lines)
    # librdkafka 2.0.2 (Debian) compresses only if Produce's advertised minimum is 0 (KAFKA-18659).
    # Every stored batch is lz4 (a loaded machine may split the 20 records into more than one batch).
    codecs = stored_codecs(gateway_process, topic)
    assert codecs and set(codecs) == {CODEC_IDS["lz4"]}
    output = run([kcat, "-b", bootstrap(gateway_process), "-C", "-t", topic, "-e", "-o", "beginning", "-q",
                  "-f", "%k=%s [%h]\\n"], b"").decode().splitlines()
    assert output == [f"key-{i}=value {i} {'y' * 200} [trace=abc,n=1]" for i in range(20)]


def test_produce_is_advertised_from_version_0(gateway_process):
    # KAFKA-18659: librdkafka before 2.10 turns compression off when Produce's minimum is not 0.
    assert advertised_versions(gateway_process)[0][0] == 0

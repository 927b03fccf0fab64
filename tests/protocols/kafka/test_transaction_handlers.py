"""The transaction APIs' handlers (InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn) and transactional Produce/Fetch/ListOffsets, called through
their compiled codecs at the version under test against a real core: error codes as Kafka's, per
version, and ACLs on the transactional id when SASL is on."""

from __future__ import annotations

from types import ModuleType

import pytest

from core.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from core.auth import Principal
from core.names import TopicName
from core.records.builder import Record, build_batch
from protocols.kafka.broker import ConnectionSession, KafkaBroker, KafkaSettings, RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.codec.frames import RequestHeader
from protocols.kafka.handlers import (add_offsets_to_txn, add_partitions_to_txn, end_txn, fetch, init_producer_id,
                                      list_offsets, produce, txn_offset_commit)
from protocols.kafka.server import make_broker
from test_admin_handlers import call as wire_call

TXN_ID, TOPIC = "orders-tx", "orders"
ANONYMOUS = ConnectionSession()
ALICE = ConnectionSession(principal=Principal("alice"), client_host="127.0.0.1")


@pytest.fixture
async def core(core):
    """The shared core (tests/conftest.py), with this module's topics."""
    await core.create_topic(TopicName.of(TOPIC), 2)
    return core


@pytest.fixture
async def broker(core):
    instance = make_broker(core, KafkaSettings("127.0.0.1", 9092))
    yield instance
    instance.close()


@pytest.fixture
async def secured(core):
    instance = make_broker(core, KafkaSettings("127.0.0.1", 9092, sasl_mechanisms=("PLAIN",)))
    yield instance
    instance.close()


async def call(broker: KafkaBroker, module: ModuleType, version: int, body: dict,
               session: ConnectionSession = ANONYMOUS) -> Msg:
    return await wire_call(broker, module, version, body, session)


async def init(broker, version: int = 4, timeout_ms: int = 60_000, txn_id: str | None = TXN_ID, **extra) -> Msg:
    return await call(broker, init_producer_id, version,
                      {"transactional_id": txn_id, "transaction_timeout_ms": timeout_ms, **extra})


async def add_partitions(broker, producer_id: int, epoch: int, partitions=(0,), version: int = 3,
                         topic: str = TOPIC) -> list[int]:
    response = await call(broker, add_partitions_to_txn, version, {
        "transactional_id": TXN_ID, "producer_id": producer_id, "producer_epoch": epoch,
        "topics": [{"name": topic, "partitions": list(partitions)}]})
    return [p.error_code for topic_result in response.results for p in topic_result.results]


async def end(broker, producer_id: int, epoch: int, commit: bool, version: int = 3) -> int:
    response = await call(broker, end_txn, version, {"transactional_id": TXN_ID, "producer_id": producer_id,
                                                     "producer_epoch": epoch, "committed": commit})
    return response.error_code


def records(producer_id: int, epoch: int, values: list[bytes], sequence: int = 0, transactional: bool = True) -> bytes:
    return build_batch([Record(1000, value=v) for v in values], producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=sequence, is_transactional=transactional)


async def produce_codes(broker, data: bytes, transactional_id: str | None = TXN_ID, partition: int = 0,
                        session: ConnectionSession = ANONYMOUS) -> int:
    response = await call(broker, produce, 8, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
                                               "topic_data": [{"name": TOPIC, "partition_data": [
                                                   {"index": partition, "records": data}]}]}, session)
    return response.responses[0].partition_responses[0].error_code


async def fetch_partition(broker, isolation: int, offset: int = 0) -> Msg:
    response = await call(broker, fetch, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "fetch_offset": offset, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    return response.responses[0].partitions[0]


# --- InitProducerId -------------------------------------------------------------------------------

async def test_init_gives_the_same_producer_id_with_a_bumped_epoch(broker) -> None:
    first = await init(broker)
    again = await init(broker)
    assert first.error_code == again.error_code == ErrorCode.NONE
    assert (again.producer_id, again.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
    idempotent = await init(broker, txn_id=None)
    assert idempotent.producer_id != first.producer_id   # one counter for both kinds


@pytest.mark.parametrize("timeout_ms", [0, -5, 900_001])
async def test_init_refuses_a_timeout_outside_the_bounds(broker, timeout_ms) -> None:
    assert (await init(broker, timeout_ms=timeout_ms)).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


async def test_init_with_an_empty_transactional_id_is_an_invalid_request(broker) -> None:
    assert (await init(broker, txn_id="")).error_code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("version, code", [(3, ErrorCode.INVALID_PRODUCER_EPOCH), (4, ErrorCode.PRODUCER_FENCED)])
async def test_init_with_a_stale_epoch_is_fenced_as_the_version_knows(broker, version, code) -> None:
    first = await init(broker)
    await init(broker)
    stale = await init(broker, version, producer_id=first.producer_id, producer_epoch=first.producer_epoch)
    assert stale.error_code == code


# --- AddPartitionsToTxn / EndTxn ------------------------------------------------------------------

async def test_unknown_partition_fails_the_whole_request(broker) -> None:
    producer = await init(broker)
    codes = await add_partitions(broker, producer.producer_id, producer.producer_epoch, partitions=(0, 5))
    assert codes == [ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert await add_partitions(broker, producer.producer_id, producer.producer_epoch,
                                topic="missing") == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert await end(broker, producer.producer_id, producer.producer_epoch, True) == ErrorCode.INVALID_TXN_STATE


@pytest.mark.parametrize("version, code", [(1, ErrorCode.INVALID_PRODUCER_EPOCH), (2, ErrorCode.PRODUCER_FENCED)])
async def test_a_fenced_producer_gets_the_code_of_its_version(broker, version, code) -> None:
    old = await init(broker)
    await init(broker)
    assert await add_partitions(broker, old.producer_id, old.producer_epoch, version=version) == [code]
    assert await end(broker, old.producer_id, old.producer_epoch, True, version=version) == code


async def test_another_producer_id_is_an_invalid_mapping(broker) -> None:
    producer = await init(broker)
    assert await add_partitions(broker, producer.producer_id + 1, 0) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING]
    assert await end(broker, producer.producer_id + 1, 0, False) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


async def test_requests_while_the_transaction_completes_are_concurrent(broker) -> None:
    from core.transactions.state import TxnState
    from protocols.kafka.transactions import txn_key
    producer = await init(broker)
    await add_partitions(broker, producer.producer_id, producer.producer_epoch)
    key = txn_key(RequestContext(broker, RequestHeader(0, 0, 0, "t"), ANONYMOUS), TXN_ID)
    broker.transactions.transaction(key).state = TxnState.PREPARE_ABORT
    assert await add_partitions(broker, producer.producer_id, producer.producer_epoch, (1,)) == \
        [ErrorCode.CONCURRENT_TRANSACTIONS]
    assert await end(broker, producer.producer_id, producer.producer_epoch, False) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert (await init(broker)).error_code == ErrorCode.CONCURRENT_TRANSACTIONS


# --- Produce, Fetch, ListOffsets ------------------------------------------------------------------

async def test_transactional_produce_needs_the_partition_in_the_transaction(broker) -> None:
    producer = await init(broker)
    pid, epoch = producer.producer_id, producer.producer_epoch
    assert await produce_codes(broker, records(pid, epoch, [b"early"])) == ErrorCode.INVALID_TXN_STATE
    await add_partitions(broker, pid, epoch)
    assert await produce_codes(broker, records(pid, epoch, [b"a"]), partition=1) == ErrorCode.INVALID_TXN_STATE
    assert await produce_codes(broker, records(pid, epoch + 1, [b"a"])) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert await produce_codes(broker, records(pid + 1, epoch, [b"a"])) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert await produce_codes(broker, records(pid, epoch, [b"a"]), transactional_id=None) == \
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    two_batches = records(pid, epoch, [b"a"]) + records(pid, epoch, [b"b"], sequence=1)
    assert await produce_codes(broker, two_batches) == ErrorCode.INVALID_RECORD
    assert await produce_codes(broker, records(pid, epoch, [b"a"])) == ErrorCode.NONE
    assert await produce_codes(broker, records(pid, epoch, [b"c"], sequence=5)) == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER   # sequence checks still apply: a skipped sequence, as in Kafka


async def test_an_unknown_producer_past_sequence_zero_is_out_of_order_on_a_fully_known_log(broker) -> None:
    """Its earlier batches were never stored here (the whole log is known): the sequence skips
    them, OUT_OF_ORDER_SEQUENCE_NUMBER as Kafka answers a gap (retriable NOT_ENOUGH_REPLICAS only
    just after a refused append: tests/core/test_partition.py). UNKNOWN_PRODUCER_ID, once records
    went by retention, is tested there too."""
    response = await call(broker, produce, 8, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                                               "topic_data": [{"name": TOPIC, "partition_data": [
                                                   {"index": 0, "records": records(42, 0, [b"x"], 17, False)}]}]})
    answer = response.responses[0].partition_responses[0]
    assert (answer.error_code, answer.base_offset) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert await produce_codes(broker, records(42, 0, [b"x"], 0, False), transactional_id=None) == ErrorCode.NONE


async def test_read_committed_fetch_and_list_offsets_stop_at_the_last_stable_offset(broker) -> None:
    producer = await init(broker)
    pid, epoch = producer.producer_id, producer.producer_epoch
    await add_partitions(broker, pid, epoch)
    assert await produce_codes(broker, records(pid, epoch, [b"a", b"b"])) == ErrorCode.NONE
    committed = await fetch_partition(broker, 1)
    assert (committed.high_watermark, committed.last_stable_offset, committed.records) == (2, 0, b"")
    assert committed.aborted_transactions == []
    uncommitted = await fetch_partition(broker, 0)
    assert uncommitted.records and uncommitted.aborted_transactions is None

    async def latest(isolation: int) -> int:
        response = await call(broker, list_offsets, 5, {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        return response.topics[0].partitions[0].offset
    assert (await latest(1), await latest(0)) == (0, 2)

    assert await end(broker, pid, epoch, False) == ErrorCode.NONE
    aborted = await fetch_partition(broker, 1)
    assert (aborted.high_watermark, aborted.last_stable_offset) == (3, 3)
    assert [(a.producer_id, a.first_offset) for a in aborted.aborted_transactions] == [(pid, 0)]
    assert await latest(1) == 3


async def test_txn_offset_commit_needs_the_group_in_the_transaction(broker) -> None:
    producer = await init(broker)
    pid, epoch = producer.producer_id, producer.producer_epoch

    async def commit_offset(version: int = 3, producer_id: int = pid, producer_epoch: int = epoch) -> list[int]:
        response = await call(broker, txn_offset_commit, version, {
            "transactional_id": TXN_ID, "group_id": "etl", "producer_id": producer_id,
            "producer_epoch": producer_epoch, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                "committed_metadata": None},
                                               {"partition_index": 9, "committed_offset": 5,
                                                "committed_metadata": None}]}]})
        return [p.error_code for p in response.topics[0].partitions]
    assert await commit_offset() == [ErrorCode.INVALID_TXN_STATE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    response = await call(broker, add_offsets_to_txn, 3, {"transactional_id": TXN_ID, "producer_id": pid,
                                                          "producer_epoch": epoch, "group_id": "etl"})
    assert response.error_code == ErrorCode.NONE
    assert await commit_offset(0) == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert await commit_offset(producer_epoch=epoch + 3) == \
        [ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert await end(broker, pid, epoch, True) == ErrorCode.NONE
    from core.groups.store import GroupKey
    committed = await broker.groups.fetch_offsets(GroupKey("public", "default", "etl"), [(TOPIC, 0)])
    assert committed[(TOPIC, 0)].offset == 5


# --- ACLs -----------------------------------------------------------------------------------------

async def allow(broker: KafkaBroker, resource_type: ResourceType, name: str, operation: Operation) -> None:
    binding = AclBinding.of(resource_type, name, PatternType.LITERAL, "User:alice", "*", operation, Permission.ALLOW)
    assert await broker.authorizer.create_acls(ALICE.principal.tenant, [binding]) == [None]


async def test_transactional_apis_need_write_on_the_transactional_id(secured) -> None:
    denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert (await call(secured, init_producer_id, 4, {"transactional_id": TXN_ID, "transaction_timeout_ms": 60_000},
                       ALICE)).error_code == denied
    for module, body in ((end_txn, {"committed": True}), (add_offsets_to_txn, {"group_id": "g"})):
        response = await call(secured, module, 3, {"transactional_id": TXN_ID, "producer_id": 1, "producer_epoch": 0,
                                                   **body}, ALICE)
        assert response.error_code == denied
    assert await produce_codes(secured, records(1, 0, [b"a"]), session=ALICE) == denied
    await allow(secured, ResourceType.TRANSACTIONAL_ID, TXN_ID, Operation.WRITE)
    producer = await call(secured, init_producer_id, 4, {"transactional_id": TXN_ID,
                                                         "transaction_timeout_ms": 60_000}, ALICE)
    assert producer.error_code == ErrorCode.NONE
    response = await call(secured, add_partitions_to_txn, 3, {
        "transactional_id": TXN_ID, "producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch,
        "topics": [{"name": TOPIC, "partitions": [0]}]}, ALICE)
    assert response.results[0].results[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    response = await call(secured, add_offsets_to_txn, 3, {
        "transactional_id": TXN_ID, "producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch,
        "group_id": "g"}, ALICE)
    assert response.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


async def test_txn_offset_commit_v3_checks_the_member_and_generation(broker) -> None:
    producer = await init(broker)

    async def commit_as(member_id: str, generation: int) -> int:
        response = await call(broker, txn_offset_commit, 3, {
            "transactional_id": TXN_ID, "group_id": "etl", "producer_id": producer.producer_id,
            "producer_epoch": producer.producer_epoch, "generation_id": generation, "member_id": member_id,
            "group_instance_id": None, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                "committed_metadata": None}]}]})
        return response.topics[0].partitions[0].error_code
    assert await commit_as("ghost", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert await commit_as("", 4) == ErrorCode.ILLEGAL_GENERATION
    assert await commit_as("", -1) == ErrorCode.INVALID_TXN_STATE   # checks passed; the group was not added

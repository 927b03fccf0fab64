"""The transaction coordinator: state transitions, fencing, timeouts, offsets, and recovery from its
stored records after a restart."""

import itertools

import pytest

from core.clock import FakeClock
from core.errors import InvalidProducerEpoch
from core.groups.coordinator import GroupCoordinator
from core.groups.store import GroupKey
from core.groups.values import OffsetAndMetadata
from core.names import TopicName
from core.records.builder import Record, build_batch
from core.service import Core
from core.transactions.coordinator import TransactionCoordinator, TransactionSettings
from core.transactions.errors import (ConcurrentTransactions, InvalidProducerIdMapping, InvalidTransactionalId,
                                      InvalidTransactionTimeout, InvalidTxnState, ProducerFenced)
from core.transactions.state import MAX_EPOCH, Transaction, TxnState
from core.transactions.store import TransactionStore, TxnKey, stored_name, transactional_id_of
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage

KEY = TxnKey("public", "default", "payments-tx")
TOPIC = TopicName.of("payments")
TIMEOUT_MS = 60_000


def txn_batch(values: list[bytes], producer_id: int, epoch: int = 0, sequence: int = 0) -> bytes:
    return build_batch([Record(1000, value=v) for v in values], producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=sequence, is_transactional=True)


def coordinator_of(core: Core, **settings) -> TransactionCoordinator:
    ids = itertools.count(1000)

    async def next_id() -> int:
        return next(ids)
    return TransactionCoordinator(core, GroupCoordinator(core), next_id, TransactionSettings(**settings))


@pytest.fixture
async def coordinator(core):
    await core.create_topic(TOPIC, 2)
    instance = coordinator_of(core)
    yield instance
    instance.close()


# --- the pure state machine -----------------------------------------------------------------------

@pytest.mark.parametrize("state, commit, outcome", [
    (TxnState.ONGOING, True, TxnState.PREPARE_COMMIT),
    (TxnState.ONGOING, False, TxnState.PREPARE_ABORT),
    (TxnState.PREPARE_COMMIT, True, ConcurrentTransactions),
    (TxnState.PREPARE_ABORT, False, ConcurrentTransactions),
    (TxnState.PREPARE_COMMIT, False, InvalidTxnState),
    (TxnState.COMPLETE_COMMIT, True, None),          # a retried EndTxn: nothing to do
    (TxnState.COMPLETE_ABORT, False, None),
    (TxnState.COMPLETE_COMMIT, False, InvalidTxnState),
    (TxnState.EMPTY, True, InvalidTxnState),
])
def test_ending_a_transaction(state, commit, outcome) -> None:
    txn = Transaction(1, 0, TIMEOUT_MS, state)
    if isinstance(outcome, type) and issubclass(outcome, Exception):
        with pytest.raises(outcome):
            txn.prepare_end(commit)
    elif outcome is None:
        assert txn.prepare_end(commit) is False and txn.state is state
    else:
        assert txn.prepare_end(commit) is True and txn.state is outcome


def test_adding_to_a_completed_transaction_starts_the_next_one() -> None:
    txn = Transaction(1, 0, TIMEOUT_MS, TxnState.COMPLETE_COMMIT)
    assert txn.add_partitions({("t", 0)}, now_ms=5)
    assert (txn.state, txn.started_ms, txn.partitions) == (TxnState.ONGOING, 5, {("t", 0)})
    assert not txn.add_partitions({("t", 0)}, now_ms=9)   # already in: no change to store
    with pytest.raises(InvalidTxnState):
        txn.stage_offsets("g", {("t", 0): OffsetAndMetadata(3)})   # the group was not added
    txn.add_group("g", now_ms=9)
    txn.stage_offsets("g", {("t", 0): OffsetAndMetadata(3), ("t", 1): OffsetAndMetadata(4, "m", 7)})
    assert Transaction.from_dict(txn.to_dict()) == txn


def test_staged_offsets_stored_without_a_leader_epoch_read_as_unknown() -> None:
    stored = Transaction(1, 0, TIMEOUT_MS, TxnState.ONGOING).to_dict() | {"offsets": {"g": [["t", 0, 3, "m"]]}}
    assert Transaction.from_dict(stored).offsets == {"g": {("t", 0): OffsetAndMetadata(3, "m", -1)}}


def test_producer_checks_distinguish_id_and_epoch() -> None:
    txn = Transaction(1, 4, TIMEOUT_MS, TxnState.ONGOING, 0, {("t", 0)})
    with pytest.raises(InvalidProducerIdMapping):
        txn.check_producer(2, 4)
    with pytest.raises(ProducerFenced):
        txn.check_producer(1, 3)
    with pytest.raises(InvalidProducerEpoch):
        txn.check_produce(1, 3, ("t", 0))
    with pytest.raises(InvalidTxnState):
        txn.check_produce(1, 4, ("t", 1))
    txn.check_produce(1, 4, ("t", 0))


def test_stored_names_round_trip_any_transactional_id() -> None:
    for transactional_id in ("simple", "with/slash and space", "ünïcode.tx", "a.b-c_d"):
        name = stored_name(transactional_id)
        assert "/" not in name and transactional_id_of(name) == transactional_id
    with pytest.raises(InvalidTransactionalId):
        stored_name("")
    with pytest.raises(InvalidTransactionalId):
        stored_name("x" * 300)


# --- the coordinator ------------------------------------------------------------------------------

async def test_init_allocates_then_bumps_the_epoch(coordinator) -> None:
    assert await coordinator.init_producer_id(KEY, TIMEOUT_MS) == (1000, 0)
    assert await coordinator.init_producer_id(KEY, TIMEOUT_MS) == (1000, 1)
    other = TxnKey("public", "default", "other")
    assert await coordinator.init_producer_id(other, TIMEOUT_MS) == (1001, 0)


async def test_transaction_timeout_is_validated(coordinator) -> None:
    for bad in (0, -1, 900_001):
        with pytest.raises(InvalidTransactionTimeout):
            await coordinator.init_producer_id(KEY, bad)


async def test_commit_writes_markers_and_applies_staged_offsets(core, coordinator) -> None:
    producer_id, epoch = await coordinator.init_producer_id(KEY, TIMEOUT_MS)
    await coordinator.add_partitions(KEY, producer_id, epoch, [("payments", 0), ("payments", 1)])
    partition = await core.partition(TOPIC, 0)
    await partition.append(txn_batch([b"a"], producer_id=producer_id))
    assert partition.last_stable_offset == 0
    await coordinator.add_offsets(KEY, producer_id, epoch, "etl")
    await coordinator.stage_offsets(KEY, producer_id, epoch, "etl", {("payments", 1): OffsetAndMetadata(7, "m")})
    await coordinator.end(KEY, producer_id, epoch, commit=True)
    assert partition.last_stable_offset == partition.high_watermark == 2
    assert (await core.partition(TOPIC, 1)).high_watermark == 1          # a marker even without data
    offsets = await coordinator._groups.fetch_offsets(GroupKey("public", "default", "etl"), [("payments", 1)])
    assert offsets == {("payments", 1): OffsetAndMetadata(7, "m")}
    assert coordinator.transaction(KEY).state is TxnState.COMPLETE_COMMIT
    await coordinator.end(KEY, producer_id, epoch, commit=True)          # retried: still fine
    with pytest.raises(InvalidTxnState):
        await coordinator.end(KEY, producer_id, epoch, commit=False)


async def test_abort_drops_staged_offsets_and_indexes_the_aborted_data(core, coordinator) -> None:
    producer_id, epoch = await coordinator.init_producer_id(KEY, TIMEOUT_MS)
    await coordinator.add_partitions(KEY, producer_id, epoch, [("payments", 0)])
    await coordinator.add_offsets(KEY, producer_id, epoch, "etl")
    await coordinator.stage_offsets(KEY, producer_id, epoch, "etl", {("payments", 0): OffsetAndMetadata(3)})
    partition = await core.partition(TOPIC, 0)
    await partition.append(txn_batch([b"a", b"b"], producer_id=producer_id))
    await coordinator.end(KEY, producer_id, epoch, commit=False)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in partition.aborted.overlapping(0, 3)] == \
        [(producer_id, 0, 2)]
    assert await coordinator._groups.fetch_offsets(GroupKey("public", "default", "etl"), [("payments", 0)]) == \
        {("payments", 0): None}


async def test_re_init_fences_the_old_producer_and_aborts_its_transaction(core, coordinator) -> None:
    producer_id, epoch = await coordinator.init_producer_id(KEY, TIMEOUT_MS)
    await coordinator.add_partitions(KEY, producer_id, epoch, [("payments", 0)])
    partition = await core.partition(TOPIC, 0)
    await partition.append(txn_batch([b"zombie"], producer_id=producer_id))
    assert await coordinator.init_producer_id(KEY, TIMEOUT_MS) == (producer_id, 1)
    assert partition.last_stable_offset == 2 and len(partition.aborted) == 1
    with pytest.raises(ProducerFenced):
        await coordinator.add_partitions(KEY, producer_id, epoch, [("payments", 1)])
    with pytest.raises(ProducerFenced):
        await coordinator.end(KEY, producer_id, epoch, commit=True)
    with pytest.raises(InvalidProducerIdMapping):
        await coordinator.end(KEY, producer_id + 1, 1, commit=True)
    with pytest.raises(InvalidProducerEpoch):
        coordinator.check_produce(KEY, producer_id, epoch, ("payments", 0))


async def test_kip_360_bump_with_the_current_epoch(coordinator) -> None:
    producer_id, epoch = await coordinator.init_producer_id(KEY, TIMEOUT_MS)
    assert await coordinator.init_producer_id(KEY, TIMEOUT_MS, producer_id, epoch) == (producer_id, 1)
    # a retry of that bump (the answer was lost) gets the same epoch again
    assert await coordinator.init_producer_id(KEY, TIMEOUT_MS, producer_id, epoch) == (producer_id, 1)
    with pytest.raises(ProducerFenced):
        await coordinator.init_producer_id(KEY, TIMEOUT_MS, producer_id + 5, 1)


async def test_epoch_exhaustion_takes_a_new_producer_id(core, coordinator) -> None:
    await coordinator.init_producer_id(KEY, TIMEOUT_MS)
    txn = coordinator.transaction(KEY)
    txn.producer_epoch = MAX_EPOCH - 1
    assert await coordinator.init_producer_id(KEY, TIMEOUT_MS) == (1001, 0)


async def test_requests_while_completing_are_concurrent_transactions(coordinator) -> None:
    producer_id, epoch = await coordinator.init_producer_id(KEY, TIMEOUT_MS)
    await coordinator.add_partitions(KEY, producer_id, epoch, [("payments", 0)])
    coordinator.transaction(KEY).state = TxnState.PREPARE_COMMIT   # as while its markers are written
    with pytest.raises(ConcurrentTransactions):
        await coordinator.add_partitions(KEY, producer_id, epoch, [("payments", 1)])
    with pytest.raises(ConcurrentTransactions):
        await coordinator.init_producer_id(KEY, TIMEOUT_MS)


async def test_timed_out_transaction_is_aborted_by_the_cleanup_pass(core, coordinator) -> None:
    producer_id, epoch = await coordinator.init_producer_id(KEY, 5_000)
    await coordinator.add_partitions(KEY, producer_id, epoch, [("payments", 0)])
    partition = await core.partition(TOPIC, 0)
    await partition.append(txn_batch([b"a"], producer_id=producer_id))
    core.clock.advance(4_000)
    await coordinator.cleanup()
    assert coordinator.transaction(KEY).state is TxnState.ONGOING
    core.clock.advance(2_000)
    await coordinator.cleanup()
    txn = coordinator.transaction(KEY)
    assert (txn.state, txn.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)   # fenced as it aborted
    assert partition.last_stable_offset == partition.high_watermark == 2
    with pytest.raises(ProducerFenced):
        await coordinator.end(KEY, producer_id, epoch, commit=True)


async def test_stored_transactions_survive_a_restart_and_are_resolved(tmp_path) -> None:
    storage = await EmbeddedStorage.open(tmp_path, StorageConfig())
    core = Core(storage.metadata, storage.logs, FakeClock())
    await core.start()
    await core.create_topic(TOPIC, 2)
    first = coordinator_of(core)
    producer_id, epoch = await first.init_producer_id(KEY, 5_000)
    await first.add_partitions(KEY, producer_id, epoch, [("payments", 0)])
    await (await core.partition(TOPIC, 0)).append(txn_batch([b"left open"], producer_id=producer_id))
    # a second transactional id whose commit was decided but not carried out when the process died
    decided = TxnKey("public", "default", "decided")
    await TransactionStore(core.metadata).save(decided, Transaction(
        77, 0, 5_000, TxnState.PREPARE_COMMIT, 0, {("payments", 1)}, {"etl"},
        {"etl": {("payments", 1): OffsetAndMetadata(9)}}))
    first.close()
    await core.close()
    await storage.close()

    storage = await EmbeddedStorage.open(tmp_path, StorageConfig())
    core = Core(storage.metadata, storage.logs, FakeClock(start_ms=1_700_000_000_000 + 10_000))
    await core.start()
    second = coordinator_of(core)
    try:
        second.start()
        await second._ready()
        assert second.transaction(KEY).state is TxnState.ONGOING
        partition = await core.partition(TOPIC, 0)
        assert partition.last_stable_offset == 0
        await second.cleanup()
        assert second.transaction(KEY).state is TxnState.COMPLETE_ABORT
        assert partition.last_stable_offset == partition.high_watermark == 2
        assert second.transaction(decided).state is TxnState.COMPLETE_COMMIT
        assert (await core.partition(TOPIC, 1)).high_watermark == 1
        assert await second._groups.fetch_offsets(GroupKey("public", "default", "etl"), [("payments", 1)]) == \
            {("payments", 1): OffsetAndMetadata(9)}
    finally:
        second.close()
        await core.close()
        await storage.close()

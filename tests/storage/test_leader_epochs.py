"""Leader epochs of a managed log: each writer that takes the log over begins one where the log ends,
the list of epoch starts answers Kafka's OffsetForLeaderEpoch, and retention forgets epochs whose
records are gone. Two writers are two factories on one store (two brokers of a cluster)."""

from __future__ import annotations

import pytest

from storage.api import LedgerFenced, LogClosed, RetentionPolicy
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage
from storage.managed_log.factory import ManagedLogFactoryImpl
from storage.managed_log.ledger_list import EpochStart, LedgerList, LedgerRange

NAME = "t/p-0"


def listing(*epochs: tuple[int, int], start: int = 0, end: int = 100) -> LedgerList:
    return LedgerList(start, (LedgerRange(1, start, end),), tuple(EpochStart(e, s, f"w{e}") for e, s in epochs))


def test_the_answer_for_each_epoch_is_where_it_ended() -> None:
    epochs = listing((0, 0), (1, 40), (4, 70))
    assert epochs.epoch_end(0, 90) == (0, 40)
    assert epochs.epoch_end(1, 90) == (1, 70)
    assert epochs.epoch_end(2, 90) == (1, 70)    # never used: the largest epoch below it, and its end
    assert epochs.epoch_end(4, 90) == (4, 90)    # the current epoch ends at the log's end
    assert epochs.epoch_end(5, 90) == (-1, -1)   # newer than this log knows
    assert epochs.epoch_end(-1, 90) == (-1, -1)
    assert listing((3, 10), start=10).epoch_end(1, 90) == (1, 10)   # older than any kept
    assert LedgerList().epoch_end(0, 0) == (-1, -1)
    assert [epochs.epoch_at(offset) for offset in (0, 39, 40, 69, 70, 99)] == [0, 0, 1, 1, 4, 4]
    assert listing((2, 50)).epoch_at(49) == -1   # written before epochs were kept


def test_a_new_writer_begins_an_epoch_at_the_end_and_the_same_one_keeps_its_own() -> None:
    taken = listing((0, 0)).taken_over_by("other")
    assert taken.epochs[-1] == EpochStart(1, 100, "other") and taken.leader_epoch == 1
    assert taken.taken_over_by("other") is taken
    assert LedgerList().taken_over_by("first").epochs == (EpochStart(0, 0, "first"),)
    assert LedgerList.from_json(taken.to_json()) == taken
    old = b'{"log_start_offset":0,"ledgers":[]}'   # a list written before epochs were kept
    assert LedgerList.from_json(old).leader_epoch == -1


def test_retention_forgets_only_the_epochs_that_ended_before_the_log_start() -> None:
    epochs = listing((0, 0), (1, 40), (4, 70))
    assert [e.epoch for e in epochs.without_epochs_before(39).epochs] == [0, 1, 4]
    assert [e.epoch for e in epochs.without_epochs_before(40).epochs] == [1, 4]
    assert [e.epoch for e in epochs.without_epochs_before(95).epochs] == [4]


@pytest.fixture
async def storage(tmp_path):
    opened = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    yield opened
    await opened.close()


async def test_each_broker_that_takes_a_log_over_bumps_its_epoch(storage) -> None:
    first = ManagedLogFactoryImpl(storage.ledgers, storage.metadata, writer="broker-1")
    second = ManagedLogFactoryImpl(storage.ledgers, storage.metadata, writer="broker-2")
    policy = RetentionPolicy()
    log = await first.open_log(NAME, policy)
    assert log.leader_epoch == 0
    for _ in range(3):
        await log.append(b"x", 1, 0)
    await log.close()
    log = await first.open_log(NAME, policy)            # closed idle and opened again: same writer
    assert log.leader_epoch == 0
    await log.append(b"x", 1, 0)                        # left open: the next owner fences it

    taken = await second.open_log(NAME, policy)
    assert taken.leader_epoch == 1 and taken.high_watermark == 4
    with pytest.raises((LedgerFenced, LogClosed)):
        await log.append(b"zombie", 1, 0)
    await taken.append(b"y", 1, 0)
    assert taken.epoch_end(0) == (0, 4) and taken.epoch_end(1) == (1, 5)
    assert [taken.epoch_at(offset) for offset in (0, 3, 4)] == [0, 0, 1]
    await taken.close()

    back = await first.open_log(NAME, policy)           # back to the first broker: a newer epoch again
    assert back.leader_epoch == 2 and back.epoch_end(1) == (1, 5)
    await back.delete_before(4)                         # epoch 0's records are gone
    assert back.epoch_end(0) == (0, 4) and back.epoch_end(1) == (1, 5)
    await back.close()
    assert (await second.open_log(NAME, policy)).epoch_end(0) == (0, 4)   # as stored

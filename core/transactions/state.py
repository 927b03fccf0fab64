"""One transactional id's transaction: its producer, state and contents, and the rules for moving it.

Pure: no I/O and no clock (times are passed in). The coordinator (coordinator.py) persists the state
after each change and writes the markers; this module decides what is allowed, as Kafka's
transaction coordinator does:

    Empty, Complete*  ──AddPartitions / AddOffsets──►  Ongoing
    Ongoing  ──EndTxn(commit)──►  PrepareCommit  ──markers, offsets──►  CompleteCommit
    Ongoing  ──EndTxn(abort), timeout, InitProducerId──►  PrepareAbort  ──markers──►  CompleteAbort
    Empty, Complete*  ──InitProducerId──►  Empty, with the epoch bumped

While a Prepare* state's markers are being written every request gets CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from core.errors import InvalidProducerEpoch
from core.groups.values import OffsetAndMetadata
from core.transactions.errors import (ConcurrentTransactions, InvalidProducerIdMapping, InvalidTxnState,
                                      ProducerFenced)

MAX_EPOCH = 32767          # producer epochs are int16; at MAX_EPOCH - 1 a new producer id is taken
TopicPartition = tuple[str, int]


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def completing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass(slots=True)
class Transaction:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    started_ms: int = -1                                   # when the ongoing transaction began
    partitions: set[TopicPartition] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)          # added by AddOffsetsToTxn
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    # The epoch before the last bump that a producer asked for with its own epoch (KIP-360), so a
    # retry of that request gets the same answer; -1 after any other bump.
    last_epoch: int = -1

    # --- checks ---------------------------------------------------------------------------------

    def check_producer(self, producer_id: int, epoch: int) -> None:
        if producer_id != self.producer_id:
            raise InvalidProducerIdMapping(f"producer id {producer_id} is not this transactional id's "
                                           f"({self.producer_id})")
        if epoch != self.producer_epoch:
            raise ProducerFenced(f"producer epoch {epoch} is not the current {self.producer_epoch}")

    def check_produce(self, producer_id: int, epoch: int, tp: TopicPartition) -> None:
        """A transactional batch may be written only to a partition of the ongoing transaction."""
        if producer_id != self.producer_id:
            raise InvalidProducerIdMapping(f"producer id {producer_id} is not this transactional id's")
        if epoch != self.producer_epoch:
            raise InvalidProducerEpoch(f"producer epoch {epoch} is not the current {self.producer_epoch}")
        if self.state is not TxnState.ONGOING or tp not in self.partitions:
            raise InvalidTxnState(f"{tp[0]}-{tp[1]} is not part of an ongoing transaction")

    def _check_not_completing(self) -> None:
        if self.state.completing:
            raise ConcurrentTransactions(f"the previous transaction is being completed ({self.state.value})")

    # --- transitions ----------------------------------------------------------------------------

    def _begin(self, now_ms: int) -> None:
        if self.state is not TxnState.ONGOING:
            self.state = TxnState.ONGOING
            self.started_ms = now_ms
            self.partitions, self.groups, self.offsets = set(), set(), {}

    def add_partitions(self, partitions: set[TopicPartition], now_ms: int) -> bool:
        """Add partitions (starting a transaction if none is ongoing); True if anything changed."""
        self._check_not_completing()
        if self.state is TxnState.ONGOING and partitions <= self.partitions:
            return False
        self._begin(now_ms)
        self.partitions |= partitions
        return True

    def add_group(self, group_id: str, now_ms: int) -> bool:
        self._check_not_completing()
        if self.state is TxnState.ONGOING and group_id in self.groups:
            return False
        self._begin(now_ms)
        self.groups.add(group_id)
        return True

    def stage_offsets(self, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """Offsets a TxnOffsetCommit asks for: applied to the group when the transaction commits."""
        self._check_not_completing()
        if self.state is not TxnState.ONGOING or group_id not in self.groups:
            raise InvalidTxnState(f"group {group_id} was not added to an ongoing transaction")
        self.offsets.setdefault(group_id, {}).update(offsets)

    def prepare_end(self, commit: bool) -> bool:
        """Start ending the transaction; False if it already ended that way (a retried EndTxn)."""
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if self.state is wanted:
            raise ConcurrentTransactions(f"the transaction is already in {self.state.value}")
        if self.state is done:
            return False
        if self.state is not TxnState.ONGOING:
            raise InvalidTxnState(f"cannot {'commit' if commit else 'abort'} in state {self.state.value}")
        self.state = wanted
        return True

    def complete(self) -> None:
        """The markers are written (and, on commit, the offsets applied)."""
        if self.state is TxnState.PREPARE_COMMIT:
            self.state = TxnState.COMPLETE_COMMIT
        elif self.state is TxnState.PREPARE_ABORT:
            self.state = TxnState.COMPLETE_ABORT
        else:
            raise InvalidTxnState(f"nothing to complete in state {self.state.value}")
        self.started_ms = -1
        self.partitions, self.groups, self.offsets = set(), set(), {}

    def bump_epoch(self, new_producer_id: int | None = None, *, asked: bool = False) -> None:
        """Fence every producer of the current epoch. At the epoch limit `new_producer_id` (which the
        caller must supply then) replaces the producer id, from epoch 0. `asked`: the producer of the
        current epoch asked for it (KIP-360), so its retry is recognised."""
        self.last_epoch = self.producer_epoch if asked else -1
        if self.producer_epoch >= MAX_EPOCH - 1:
            if new_producer_id is None:
                raise ValueError("epoch exhausted: a new producer id is needed")
            self.producer_id, self.producer_epoch = new_producer_id, 0
        else:
            self.producer_epoch += 1

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH - 1

    def fence_for_abort(self, new_producer_id: int | None = None) -> None:
        """An ongoing transaction aborted by the coordinator (timeout, re-init): the epoch is bumped
        first so the producer that began it can write no more."""
        if self.state is not TxnState.ONGOING:
            raise InvalidTxnState(f"nothing to abort in state {self.state.value}")
        self.bump_epoch(new_producer_id)
        self.state = TxnState.PREPARE_ABORT

    def timed_out(self, now_ms: int) -> bool:
        return self.state is TxnState.ONGOING and now_ms - self.started_ms > self.timeout_ms

    # --- stored form ----------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "timeout_ms": self.timeout_ms, "state": self.state.value, "started_ms": self.started_ms,
                "partitions": sorted([t, p] for t, p in self.partitions), "groups": sorted(self.groups),
                "offsets": {group: [[t, p, o.offset, o.metadata, o.leader_epoch] for (t, p), o in sorted(offsets.items())]
                            for group, offsets in self.offsets.items()},
                "last_epoch": self.last_epoch}

    @classmethod
    def from_dict(cls, raw: dict) -> "Transaction":
        return cls(int(raw["producer_id"]), int(raw["producer_epoch"]), int(raw["timeout_ms"]),
                   TxnState(raw["state"]), int(raw.get("started_ms", -1)),
                   {(str(t), int(p)) for t, p in raw.get("partitions", ())}, set(raw.get("groups", ())),
                   {group: {(str(t), int(p)): OffsetAndMetadata(int(o), str(m), int(e[0]) if e else -1)
                           for t, p, o, m, *e in entries}
                    for group, entries in raw.get("offsets", {}).items()},
                   int(raw.get("last_epoch", -1)))

"""Idempotent producers: per partition, each producer's epoch and its last five batches' sequences.

A batch from producer P (epoch E, sequences first..last) is checked before it is stored:
  - E lower than P's epoch here: INVALID_PRODUCER_EPOCH (a zombie);
  - the same sequences as one of P's last five stored batches: a retry of a stored batch — the
    original offset is returned and nothing is stored again;
  - otherwise first must follow P's last sequence (or be 0 on a new epoch). A batch ahead of that
    means one before it has not arrived. SequenceGap says so; the partition (core/partition.py)
    answers it as Kafka does, OUT_OF_ORDER_SEQUENCE_NUMBER, unless an append was refused or failed
    there moments ago (a storage failure being repaired): then the missing batch is most likely
    that one, on its way again, and the gap stays retriable ("not stored", NOT_ENOUGH_REPLICAS),
    because librdkafka answers OUT_OF_ORDER_SEQUENCE_NUMBER for any batch but the first in flight
    by bumping its epoch and renumbering every partition's unacknowledged batches, which stores
    again those a failed request did store (confluentinc/librdkafka#4953). A batch behind it that
    is none of the last five is OUT_OF_ORDER_SEQUENCE_NUMBER;
  - a producer this partition has no state for must start at sequence 0. Kafka (since KIP-360)
    takes any sequence there, trusting replication to have kept what came before. Here an owner
    change or a storage failure can lose batches that were queued but never stored and never
    acknowledged; taking their successor would make librdkafka count them delivered (it acks the
    messages before an accepted batch implicitly). So a later sequence is refused, and how depends
    on what the partition knows (`complete`):
      - its state was learned from the whole log (nothing ever removed from it): the producer
        stored nothing here, so its earlier batches were never acknowledged and are still the
        client's to retry: a gap, as above;
      - otherwise its batches may have gone by retention (or lie before the scanned tail):
        UNKNOWN_PRODUCER_ID, which clients answer by resetting the producer's sequences
        (librdkafka when nothing is outstanding, the Java client when the log start is past its
        last ack) or by failing the producer: never by losing a record.
The state advances when the batch is queued (so pipelined batches check against each other). It is
rebuilt from the log when the partition opens (from its newest snapshot on, core/producer_snapshots.py)
and after any failed append, whose batches may be stored after all: so retries across a restart, a
failover or a storage failure stay exactly-once.

Transactions: each producer with an open transaction on the partition has the offset of its first
transactional batch since its last marker; the smallest of them bounds the last stable offset. A
marker closes the producer's transaction and, at a higher epoch, starts that epoch with no sequences
(the coordinator bumped it to fence the producer that began the transaction).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from core.errors import CoreError, InvalidProducerEpoch, OutOfOrderSequence, SequenceGap, UnknownProducerId
from core.producer_snapshots import MAX_PRODUCERS, ProducerSnapshot

MAX_BATCHES = 5          # Kafka keeps the last five batches per producer and partition
_SEQ_WRAP = 1 << 31


@dataclass(frozen=True, slots=True)
class BatchRecord:
    first_seq: int
    last_seq: int
    base_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchRecord] = field(default_factory=lambda: deque(maxlen=MAX_BATCHES))
    last_timestamp: int = -1     # the max timestamp of its last batch (what DescribeProducers shows)


@dataclass(frozen=True, slots=True)
class ProducerSummary:
    producer_id: int
    epoch: int
    last_sequence: int           # -1: none since its epoch began
    last_timestamp: int
    transaction_start: int       # first offset of its open transaction, -1: none


class ProducerStates:
    """Owned by the partition (event loop)."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}
        self._open_txns: dict[int, int] = {}   # producer id -> first offset of its open transaction
        self.complete = False    # learned from the whole log, from offset 0 (see the module docstring)

    def check(self, producer_id: int, epoch: int, first_seq: int, record_count: int) -> int | None:
        """Validate a batch; the base offset of the stored original if it is a duplicate, else None."""
        entry = self._producers.get(producer_id)
        if entry is None:
            if first_seq != 0:
                refused = SequenceGap if self.complete else UnknownProducerId
                raise refused(f"producer {producer_id}: sequence {first_seq} from a producer with no earlier "
                              "batch here")
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpoch(f"producer {producer_id} epoch {epoch} is older than {entry.epoch}")
        last_seq = (first_seq + record_count - 1) % _SEQ_WRAP
        if epoch == entry.epoch:
            for batch in entry.batches:
                if batch.first_seq == first_seq and batch.last_seq == last_seq:
                    return batch.base_offset
            if entry.batches:
                expected = (entry.batches[-1].last_seq + 1) % _SEQ_WRAP
                if first_seq != expected:
                    raise _out_of_order(producer_id, first_seq, expected)
        elif first_seq != 0:
            raise SequenceGap(f"producer {producer_id}: sequence {first_seq} before sequence 0 of its new "
                              f"epoch {epoch}")
        return None

    def record(self, producer_id: int, epoch: int, first_seq: int, record_count: int, base_offset: int,
               timestamp: int = -1) -> None:
        entry = self._producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self._producers[producer_id] = ProducerEntry(epoch)
        entry.batches.append(BatchRecord(first_seq, (first_seq + record_count - 1) % _SEQ_WRAP, base_offset))
        entry.last_timestamp = timestamp

    def cover(self, producer_id: int, epoch: int, first_seq: int, record_count: int, base_offset: int,
              timestamp: int = -1) -> None:
        """A batch whose records were partly or wholly held back (delayed delivery): its whole
        sequence range counts as one stored batch at `base_offset` (-1: nothing stored), replacing
        what the stored part recorded."""
        entry = self._producers.get(producer_id)
        if entry is not None and entry.epoch == epoch and entry.batches and entry.batches[-1].first_seq == first_seq:
            entry.batches.pop()
        self.record(producer_id, epoch, first_seq, record_count, base_offset, timestamp)

    def relearn_note(self, producer_id: int, epoch: int, first_seq: int, record_count: int, base_offset: int,
                     at: int) -> None:
        """After relearning from the log: a batch held (wholly or partly) when the log ended at `at`
        (core/producer_notes.py) counts as the producer's last batch unless it stored one after."""
        entry = self._producers.get(producer_id)
        if entry is not None and entry.batches:
            last = entry.batches[-1]
            if entry.epoch > epoch or (entry.epoch == epoch and last.base_offset >= at and last.first_seq != first_seq):
                return
        elif entry is not None and entry.epoch > epoch:
            return
        self.cover(producer_id, epoch, first_seq, record_count, base_offset)

    def summaries(self) -> list[ProducerSummary]:
        """Every producer known here, by id."""
        return [ProducerSummary(producer_id, entry.epoch, entry.batches[-1].last_seq if entry.batches else -1,
                                entry.last_timestamp, self._open_txns.get(producer_id, -1))
                for producer_id, entry in sorted(self._producers.items())]

    # --- transactions -----------------------------------------------------------------------------

    def begin_transaction(self, producer_id: int, offset: int) -> None:
        """A transactional batch at `offset`: opens the producer's transaction unless one is open."""
        self._open_txns.setdefault(producer_id, offset)

    def end_transaction(self, producer_id: int, epoch: int) -> int | None:
        """A marker of the producer at `epoch`: the first offset of the transaction it ends (None if
        none was open here)."""
        entry = self._producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            self._producers[producer_id] = ProducerEntry(epoch)
        return self._open_txns.pop(producer_id, None)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open."""
        return min(self._open_txns.values()) if self._open_txns else None

    @property
    def open_transactions(self) -> dict[int, int]:
        return dict(self._open_txns)

    # --- snapshots (core/producer_snapshots.py) ---------------------------------------------------

    def snapshot(self, offset: int) -> ProducerSnapshot | None:
        """What is known now, as of `offset` (every batch recorded lies below it); None when there
        are too many producers to keep in one metadata node."""
        if len(self._producers) > MAX_PRODUCERS:
            return None
        producers = [[producer_id, entry.epoch, entry.last_timestamp,
                      [[b.first_seq, b.last_seq, b.base_offset] for b in entry.batches]]
                     for producer_id, entry in self._producers.items()]
        return ProducerSnapshot(offset, self.complete, producers, [list(t) for t in self._open_txns.items()])

    @classmethod
    def restored(cls, snapshot: ProducerSnapshot) -> "ProducerStates":
        states = cls()
        for producer_id, epoch, last_timestamp, batches in snapshot.producers:
            entry = states._producers[producer_id] = ProducerEntry(epoch, last_timestamp=last_timestamp)
            entry.batches.extend(BatchRecord(*batch) for batch in batches)
        states._open_txns = {producer_id: first for producer_id, first in snapshot.transactions}
        states.complete = snapshot.complete
        return states

    def __len__(self) -> int:
        return len(self._producers)


def _out_of_order(producer_id: int, first_seq: int, expected: int) -> CoreError:
    """Ahead of the expected sequence (within half the sequence space, which wraps): a gap."""
    ahead = (first_seq - expected) % _SEQ_WRAP < _SEQ_WRAP // 2
    return (SequenceGap if ahead else OutOfOrderSequence)(
        f"producer {producer_id}: sequence {first_seq} where {expected} is expected")

"""The transaction coordinator: every transactional id of every tenant/namespace, as Kafka's.

It hands out producer ids and epochs (InitProducerId), records which partitions and groups a
transaction touches, stages its offsets, and ends it: the decision (PrepareCommit/PrepareAbort) is
stored first, then a marker goes to every partition of the transaction and, on commit, the staged
offsets go to their groups, then the transaction is Complete. A decision that could not be carried
out (storage unavailable) stays Prepare* and is retried by the cleanup pass, which also aborts
transactions open longer than their timeout (Kafka's
transaction.abort.timed.out.transaction.cleanup.interval.ms). At start every stored transaction is
loaded: one left Ongoing by a crash is aborted by that pass once its timeout has passed, so no
partition's last stable offset stays stuck.

Owned by the event loop. Changes to one transactional id are serialized by its lock; a request
arriving while the id's transaction is being completed gets ConcurrentTransactions, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from core.cluster.bundles import Bundle, transaction_bundle
from core.errors import CoreError, NotCoordinator, UnknownTopic
from core.groups.coordinator import GroupCoordinator
from core.groups.store import GroupKey
from core.groups.values import OffsetAndMetadata
from core.names import TopicName
from core.service import Core
from core.transactions.errors import (ConcurrentTransactions, InvalidProducerIdMapping, InvalidTransactionTimeout,
                                      ProducerFenced)
from core.transactions.markers import Marker
from core.transactions.state import TopicPartition, Transaction, TxnState
from core.transactions.store import TransactionStore, TxnKey, stored_name

log = logging.getLogger("gateway.core.transactions")


@dataclass(frozen=True, slots=True)
class TransactionSettings:
    max_timeout_ms: int = 900_000          # Kafka's transaction.max.timeout.ms
    cleanup_interval_ms: int = 10_000      # Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms


class TransactionCoordinator:
    def __init__(self, core: Core, groups: GroupCoordinator, producer_ids: Callable[[], Awaitable[int]],
                 settings: TransactionSettings | None = None) -> None:
        self.settings = settings or TransactionSettings()
        self._core = core
        self._groups = groups
        self._new_producer_id = producer_ids
        self._store = TransactionStore(core.metadata, lambda key: core.owner_metadata(self._bundle(key)))
        self._txns: dict[TxnKey, Transaction] = {}
        self._locks: dict[TxnKey, asyncio.Lock] = {}
        self._loaded: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        if core.cluster is not None:
            core.cluster.on_acquire(self._reload_bundle)

    # --- life -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Load the stored transactions and run the cleanup pass (idempotent; needs a running loop)."""
        if self._task is None:
            self._loaded = asyncio.get_running_loop().create_future()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="transaction-coordinator")

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _ready(self) -> None:
        self.start()
        await asyncio.shield(self._loaded)

    async def _run(self) -> None:
        while not self._loaded.done():
            try:
                self._txns.update(await self._store.load_all())
                self._loaded.set_result(None)
            except CoreError as exc:
                log.warning("loading transactions failed, retrying: %s", exc)
                await self._core.clock.sleep(self.settings.cleanup_interval_ms / 1000)
        log.info("%d transactional ids loaded", len(self._txns))
        while True:
            try:
                await self.cleanup()
            except Exception:   # a bug must not end the pass for good: open transactions would never end
                log.exception("the transaction cleanup pass failed")
            await self._core.clock.sleep(self.settings.cleanup_interval_ms / 1000)

    async def cleanup(self) -> None:
        """Abort transactions past their timeout; finish decisions left half-done."""
        now = self._core.clock.now_ms()
        for key, txn in list(self._txns.items()):
            if not (txn.timed_out(now) or txn.state.completing) or not self._owned(key):
                continue
            try:
                async with self._lock(key):
                    txn = self._txns[key]
                    if txn.timed_out(self._core.clock.now_ms()):
                        log.info("transaction of %s timed out after %d ms: aborting", key.transactional_id,
                                 txn.timeout_ms)
                        await self._fence_and_abort(key, txn)
                    elif txn.state.completing:
                        await self._complete(key, txn)
            except CoreError as exc:
                log.warning("completing the transaction of %s failed, will retry: %s", key.transactional_id, exc)

    # --- requests -------------------------------------------------------------------------------

    async def init_producer_id(self, key: TxnKey, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[int, int]:
        """The producer id and epoch for this transactional id: new, or the same id with a bumped epoch
        (fencing every older producer), after aborting a transaction the previous one left open.
        `producer_id`/`producer_epoch` (KIP-360) name the caller's current ones, -1 if none."""
        stored_name(key.transactional_id)
        self._check_owner(key)
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            raise InvalidTransactionTimeout(f"transaction timeout {timeout_ms} ms is outside "
                                            f"1..{self.settings.max_timeout_ms} ms")
        await self._ready()
        current = self._txns.get(key)
        if current is not None and current.state.completing:
            raise ConcurrentTransactions(f"the transaction of {key.transactional_id} is being completed")
        async with self._lock(key):
            current = self._txns.get(key)
            if current is None:
                txn = Transaction(await self._new_producer_id(), 0, timeout_ms)
                await self._save(key, txn)
                return txn.producer_id, txn.producer_epoch
            if current.state.completing:
                raise ConcurrentTransactions(f"the transaction of {key.transactional_id} is being completed")
            asked = producer_id >= 0
            if asked:
                if producer_id == current.producer_id and producer_epoch == current.last_epoch >= 0:
                    return current.producer_id, current.producer_epoch   # a retry of a bump already made
                if producer_id != current.producer_id or producer_epoch != current.producer_epoch:
                    raise ProducerFenced(f"producer {producer_id} epoch {producer_epoch} is not the current "
                                         f"{current.producer_id} epoch {current.producer_epoch}")
            txn = _copy(current)
            txn.timeout_ms = timeout_ms
            if txn.state is TxnState.ONGOING:
                await self._fence_and_abort(key, txn)
                return self._txns[key].producer_id, self._txns[key].producer_epoch
            txn.bump_epoch(await self._new_producer_id() if txn.epoch_exhausted else None, asked=asked)
            txn.state, txn.started_ms = TxnState.EMPTY, -1
            await self._save(key, txn)
            return txn.producer_id, txn.producer_epoch

    async def add_partitions(self, key: TxnKey, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]) -> None:
        wanted = set(partitions)
        await self._change(key, producer_id, producer_epoch,
                           lambda txn: txn.add_partitions(wanted, self._core.clock.now_ms()))

    async def add_offsets(self, key: TxnKey, producer_id: int, producer_epoch: int, group_id: str) -> None:
        await self._change(key, producer_id, producer_epoch,
                           lambda txn: txn.add_group(group_id, self._core.clock.now_ms()))

    async def stage_offsets(self, key: TxnKey, producer_id: int, producer_epoch: int, group_id: str,
                            offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        def stage(txn: Transaction) -> bool:
            txn.stage_offsets(group_id, offsets)
            return True
        await self._change(key, producer_id, producer_epoch, stage)

    async def end(self, key: TxnKey, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """Commit or abort; returns once the markers are written and the offsets applied."""
        self._check_owner(key)
        await self._ready()
        self._current(key, producer_id, producer_epoch)
        async with self._lock(key):
            txn = _copy(self._current(key, producer_id, producer_epoch))
            if txn.prepare_end(commit):
                await self._save(key, txn)
                await self._complete(key, txn)

    def check_produce(self, key: TxnKey, producer_id: int, producer_epoch: int, tp: TopicPartition) -> None:
        """May this producer write transactional batches to `tp` now? Raises if not."""
        txn = self._txns.get(key)
        if txn is None:
            raise InvalidProducerIdMapping(f"transactional id {key.transactional_id} has no producer")
        txn.check_produce(producer_id, producer_epoch, tp)

    def transaction(self, key: TxnKey) -> Transaction | None:
        """The transaction as it is now (for inspection)."""
        return self._txns.get(key)

    # --- internals ------------------------------------------------------------------------------

    async def _reload_bundle(self, bundle: Bundle) -> None:
        """This broker takes over a bundle: what it remembers of its transactional ids may be stale
        (another broker coordinated them meanwhile), so they are read again from the store."""
        if self._loaded is None or not self._loaded.done():
            return   # the first load reads everything anyway
        stored = await self._store.load_namespace(bundle.tenant, bundle.namespace)
        for key in [k for k in self._txns if self._bundle(k) == bundle]:
            del self._txns[key]
        self._txns.update((key, txn) for key, txn in stored.items() if self._bundle(key) == bundle)

    @staticmethod
    def _bundle(key: TxnKey) -> Bundle:
        return transaction_bundle(key.tenant, key.namespace, key.transactional_id)

    def _owned(self, key: TxnKey) -> bool:
        cluster = self._core.cluster
        return cluster is None or cluster.owns(self._bundle(key))

    def _check_owner(self, key: TxnKey) -> None:
        if not self._owned(key):
            raise NotCoordinator(f"this broker does not coordinate transactional id {key.transactional_id}")

    def _lock(self, key: TxnKey) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def _current(self, key: TxnKey, producer_id: int, producer_epoch: int) -> Transaction:
        txn = self._txns.get(key)
        if txn is None:
            raise InvalidProducerIdMapping(f"transactional id {key.transactional_id} has no producer")
        txn.check_producer(producer_id, producer_epoch)
        if txn.state.completing:
            raise ConcurrentTransactions(f"the transaction of {key.transactional_id} is being completed")
        return txn

    async def _change(self, key: TxnKey, producer_id: int, producer_epoch: int,
                      change: Callable[[Transaction], bool]) -> None:
        self._check_owner(key)
        await self._ready()
        self._current(key, producer_id, producer_epoch)
        async with self._lock(key):
            txn = _copy(self._current(key, producer_id, producer_epoch))
            if change(txn):
                await self._save(key, txn)

    async def _save(self, key: TxnKey, txn: Transaction) -> None:
        """Durable first, then current: a failed write leaves the previous state in force."""
        await self._store.save(key, txn)
        self._txns[key] = txn

    async def _fence_and_abort(self, key: TxnKey, current: Transaction) -> None:
        txn = _copy(current)
        txn.fence_for_abort(await self._new_producer_id() if txn.epoch_exhausted else None)
        await self._save(key, txn)
        await self._complete(key, txn)

    async def _complete(self, key: TxnKey, txn: Transaction) -> None:
        """Carry out a Prepare* decision: markers everywhere, then (commit) offsets, then Complete*."""
        commit = txn.state is TxnState.PREPARE_COMMIT
        marker = Marker(txn.producer_id, txn.producer_epoch, commit)
        await asyncio.gather(*(self._write_marker(key, tp, marker) for tp in sorted(txn.partitions)))
        if commit:
            for group_id, offsets in txn.offsets.items():
                results = await self._groups.commit_offsets(GroupKey(key.tenant, key.namespace, group_id), offsets,
                                                            check_membership=False)
                for tp, error in results.items():
                    if error is not None:
                        log.warning("transactional offset of group %s on %s-%d not applied: %s", group_id,
                                    tp[0], tp[1], error)
        done = _copy(txn)
        done.complete()
        await self._save(key, done)

    async def _write_marker(self, key: TxnKey, tp: TopicPartition, marker: Marker) -> None:
        try:
            partition = await self._core.partition(TopicName.of(tp[0], key.tenant, key.namespace), tp[1])
        except UnknownTopic:
            return   # deleted meanwhile: nothing left to mark
        if partition.config.delayed_delivery:    # its held records: kept (commit) or dropped (abort)
            await self._core.delayed.end_transaction(key.tenant, key.namespace, marker.producer_id, marker.commit)
        await partition.write_marker(marker)


def _copy(txn: Transaction) -> Transaction:
    return Transaction.from_dict(txn.to_dict())

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

In a cluster a transaction may touch partitions and groups other brokers own. What must be done
there goes through the owner's mailbox (core/cluster/mailbox.py), as Kafka's WriteTxnMarkers goes
to partition leaders: a marker for a partition, the committed offsets for a group; and, from a
group's coordinator, the offsets a TxnOffsetCommit stages. A partition owner that does not
coordinate the transactional id of a transactional Produce reads the id's stored record to check
it (the check this coordinator makes for its own ids), and trusts that check until it writes a
marker for that producer on that partition.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from core.cluster.bundles import Bundle, group_bundle, partition_bundle, transaction_bundle
from core.errors import CoreError, NotCoordinator, StorageUnavailable, UnknownTopic
from core.groups.coordinator import GroupCoordinator
from core.groups.store import GroupKey
from core.groups.values import OffsetAndMetadata
from core.names import TopicName, escaped_name
from core.service import Core
from core.transactions import errors
from core.transactions.errors import (ConcurrentTransactions, InvalidProducerIdMapping, InvalidTransactionTimeout,
                                      InvalidTxnState, ProducerFenced, TransactionError)
from core.transactions.markers import Marker
from core.transactions.state import TopicPartition, Transaction, TxnState
from core.transactions.store import TransactionStore, TxnKey, stored_name

log = logging.getLogger("gateway.core.transactions")

# Mailbox requests (core/cluster/mailbox.py) between the brokers of a cluster.
MARKER = "txn-marker"        # to a partition's owner: write this marker
OFFSETS = "txn-offsets"      # to a group's coordinator: commit these offsets of a committed transaction
STAGE = "txn-stage"          # to a transactional id's coordinator: stage these offsets (TxnOffsetCommit)


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
        # Producers of ids coordinated elsewhere that may write a partition here:
        # (tenant, namespace, topic, partition, producer id) -> epoch. A marker ends the permission.
        self._verified: dict[tuple[str, str, str, int, int], int] = {}
        self._markers_written = 0
        if core.cluster is not None:
            core.cluster.on_acquire(self._reload_bundle)
        if core.mailbox is not None:
            core.mailbox.handle(MARKER, self._on_marker_request)
            core.mailbox.handle(OFFSETS, self._on_offsets_request)
            core.mailbox.handle(STAGE, self._on_stage_request)

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
        if not self._owned(key):    # a group's coordinator asked (TxnOffsetCommit): the id's coordinator stages
            await self._stage_elsewhere(key, producer_id, producer_epoch, group_id, offsets)
            return

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

    async def prepare_produce(self, key: TxnKey, producer_id: int, producer_epoch: int, tp: TopicPartition) -> None:
        """Before check_produce, for an id another broker coordinates: read its stored transaction
        and, if it lets this producer write `tp`, remember so until a marker for it lands on `tp`.
        A read that a marker written here overtook is made again (it may predate the marker)."""
        entry = (key.tenant, key.namespace, tp[0], tp[1], producer_id)
        if self._owned(key) or self._verified.get(entry) == producer_epoch:
            return
        for _ in range(3):
            markers = self._markers_written
            txn = await self._store.load(key)
            if markers == self._markers_written:
                break
        else:
            raise ConcurrentTransactions("transaction markers kept landing while the producer was checked")
        if txn is None:
            raise InvalidProducerIdMapping(f"transactional id {key.transactional_id} has no producer")
        txn.check_produce(producer_id, producer_epoch, tp)
        self._verified[entry] = producer_epoch

    def check_produce(self, key: TxnKey, producer_id: int, producer_epoch: int, tp: TopicPartition) -> None:
        """May this producer write transactional batches to `tp` now? Raises if not. Call it with no
        await between it and the append: no marker can come in between."""
        if not self._owned(key):
            if self._verified.get((key.tenant, key.namespace, tp[0], tp[1], producer_id)) != producer_epoch:
                raise InvalidTxnState(f"{tp[0]}-{tp[1]} is not part of an ongoing transaction")
            return
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
        await asyncio.gather(*(self._write_marker(key, txn, tp, marker) for tp in sorted(txn.partitions)))
        if commit:
            for group_id, offsets in txn.offsets.items():
                await self._commit_offsets(key, txn, group_id, offsets)
        done = _copy(txn)
        done.complete()
        await self._save(key, done)

    # --- what other brokers do for a transaction ------------------------------------------------

    def _here(self, bundle: Bundle) -> bool:
        cluster = self._core.cluster
        return cluster is None or cluster.owns(bundle)

    async def _ask(self, to: Bundle, name: str, request: dict, as_owner_of: Bundle) -> dict:
        return await self._core.mailbox.ask(to, name, request, self._core.owner_metadata(as_owner_of))

    async def _write_marker(self, key: TxnKey, txn: Transaction, tp: TopicPartition, marker: Marker) -> None:
        bundle = partition_bundle(key.tenant, key.namespace, tp[0], tp[1])
        if self._here(bundle):
            await self._mark(key.tenant, key.namespace, tp, marker)
            return
        # Named after the transaction (its start tells it from the producer's next one) and the partition.
        name = escaped_name(f"marker.{marker.producer_id}.{marker.producer_epoch}.{txn.started_ms}.{tp[1]}.", tp[0])
        await self._ask(bundle, name, {"kind": MARKER, "topic": tp[0], "partition": tp[1],
                                            "producer_id": marker.producer_id,
                                            "producer_epoch": marker.producer_epoch, "commit": marker.commit},
                        as_owner_of=self._bundle(key))

    async def _mark(self, tenant: str, namespace: str, tp: TopicPartition, marker: Marker) -> None:
        try:
            partition = await self._core.partition(TopicName.of(tp[0], tenant, namespace), tp[1])
        except UnknownTopic:
            return   # deleted meanwhile: nothing left to mark
        if partition.config.delayed_delivery:    # its held records: kept (commit) or dropped (abort)
            await self._core.delayed.end_transaction(tenant, namespace, marker.producer_id, marker.commit)
        # No await from here to the append: a Produce checked after this is refused.
        self._verified.pop((tenant, namespace, tp[0], tp[1], marker.producer_id), None)
        self._markers_written += 1
        await partition.write_marker(marker)

    async def _on_marker_request(self, bundle: Bundle, request: dict) -> dict:
        marker = Marker(request["producer_id"], request["producer_epoch"], request["commit"])
        await self._mark(bundle.tenant, bundle.namespace, (request["topic"], request["partition"]), marker)
        return {}

    async def _commit_offsets(self, key: TxnKey, txn: Transaction, group_id: str,
                              offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        bundle = group_bundle(key.tenant, key.namespace, group_id)
        if self._here(bundle):
            await self._apply_offsets(GroupKey(key.tenant, key.namespace, group_id), offsets)
            return
        name = escaped_name(f"offsets.{txn.producer_id}.{txn.producer_epoch}.{txn.started_ms}.", group_id)
        await self._ask(bundle, name, {"kind": OFFSETS, "group": group_id, "offsets": _rows(offsets)},
                        as_owner_of=self._bundle(key))

    async def _apply_offsets(self, group: GroupKey, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        results = await self._groups.commit_offsets(group, offsets, check_membership=False)
        for tp, error in results.items():
            if error is not None:
                log.warning("transactional offset of group %s on %s-%d not applied: %s", group.group_id,
                            tp[0], tp[1], error)

    async def _on_offsets_request(self, bundle: Bundle, request: dict) -> dict:
        await self._apply_offsets(GroupKey(bundle.tenant, bundle.namespace, request["group"]),
                                  _offsets(request["offsets"]))
        return {}

    async def _stage_elsewhere(self, key: TxnKey, producer_id: int, producer_epoch: int, group_id: str,
                               offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        group = group_bundle(key.tenant, key.namespace, group_id)
        if not self._here(group):
            raise NotCoordinator(f"this broker does not coordinate group {group_id}")
        request = {"kind": STAGE, "transactional_id": key.transactional_id, "producer_id": producer_id,
                   "producer_epoch": producer_epoch, "group": group_id, "offsets": _rows(offsets)}
        reply = await self._ask(self._bundle(key), f"stage.{uuid.uuid4().hex}", request, as_owner_of=group)
        refused = reply.get("refused")
        if refused is not None:
            error = getattr(errors, refused, None)
            if not (isinstance(error, type) and issubclass(error, TransactionError)):
                raise StorageUnavailable(f"the coordinator of {key.transactional_id} refused: {reply.get('message')}")
            raise error(reply.get("message", ""))

    async def _on_stage_request(self, bundle: Bundle, request: dict) -> dict:
        key = TxnKey(bundle.tenant, bundle.namespace, request["transactional_id"])
        if not self._owned(key):
            raise NotCoordinator(f"this broker does not coordinate {key.transactional_id} (yet)")
        try:
            await self.stage_offsets(key, request["producer_id"], request["producer_epoch"], request["group"],
                                     _offsets(request["offsets"]))
        except TransactionError as exc:
            return {"refused": type(exc).__name__, "message": str(exc)}
        return {}


def _rows(offsets: dict[TopicPartition, OffsetAndMetadata]) -> list[list]:
    return [[t, p, o.offset, o.metadata, o.leader_epoch] for (t, p), o in sorted(offsets.items())]


def _offsets(rows: list[list]) -> dict[TopicPartition, OffsetAndMetadata]:
    return {(t, p): OffsetAndMetadata(offset, metadata, epoch) for t, p, offset, metadata, epoch in rows}


def _copy(txn: Transaction) -> Transaction:
    return Transaction.from_dict(txn.to_dict())

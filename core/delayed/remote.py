"""Delayed messages in a cluster: the store of a namespace that another broker serves, and the
partitions a release goes to that another broker serves.

A namespace's held messages live with the owner of its store's bundle (service.py). A broker whose
client holds a message, or whose partition ends a transaction that held some, asks that owner; a
store whose release goes to a partition (a Kafka topic's, an AMQP queue's) that another broker
serves asks that one where the partition ends and, recovering a release, which delayed.id values
reached it. Over the peer links (core/cluster/peers.py); records travel as one RecordBatch:

    delayed-hold          {target: [kind, name], txn, dues} + batch  -> {"ids": [...]} once held durably
    delayed-txn-end       {producer_id, commit}                      -> {} once the outcome is stored
    delayed-pending       {}                                         -> {"targets": {target: count}}
    delayed-cancel        {id, topic}                                -> {"cancelled": bool}
    partition-end         {topic, partition}                         -> {"high_watermark": n}
    partition-append      {topic, partition} + batch                 -> {"offset": base} once durable
    partition-delayed-ids {topic, partition, start}                  -> {"ids": [...]} from start to the end

Each names its tenant and namespace. A broker that does not serve what is asked refuses with NotOwner
(nothing was done) and the asker asks again while the bundle moves (core/cluster/owners.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from core.cluster.bundles import Bundle, partition_bundle
from core.cluster.owners import ask_owner_waiting, retrieved
from core.cluster.peer_records import pack, unpack_records
from core.cluster.peers import PeerConnection
from core.delayed.held import Target, id_of
from core.errors import RequestRefused
from core.names import TopicName
from core.partition import Partition
from core.records.batch import read_header, split_batches
from core.records.builder import Record, build_batch
from core.records.decoder import decode_batch

HOLD, TXN_END, PENDING, CANCEL = "delayed-hold", "delayed-txn-end", "delayed-pending", "delayed-cancel"
END, APPEND, IDS = "partition-end", "partition-append", "partition-delayed-ids"
MAX_IN_FLIGHT = 16384          # messages on their way to the store's owner before publishers wait
SCAN_BYTES = 4 << 20            # read at a time looking for delayed.id headers


class RemoteStore:
    """A namespace's store as a broker that does not serve it sees it: holds and transaction ends go
    to its owner. Back-pressure as on a store's intake."""

    def __init__(self, core, tenant: str, namespace: str, topic: str) -> None:
        self._core = core
        self._tenant, self._namespace, self._topic = tenant, namespace, topic    # the store's topic
        self._in_flight = 0
        self._writable = asyncio.Event()
        self._writable.set()

    @property
    def intake(self) -> RemoteStore:
        return self

    @property
    def writable(self) -> bool:
        return self._writable.is_set()

    async def wait_writable(self) -> None:
        await self._writable.wait()

    def hold(self, record: Record, due_ms: int, target: Target, txn: int | None) -> asyncio.Future:
        """Held at the owner: the future resolves to its id once durable there."""
        holding = asyncio.ensure_future(_first(self.hold_many([(record, due_ms)], target, txn)))
        holding.add_done_callback(retrieved)      # a publish without confirms need not look at it
        return holding

    def hold_many(self, items: list[tuple[Record, int]], target: Target, txn: int | None) -> asyncio.Future:
        """Held at the owner: the future resolves to their ids once all are durable there."""
        head = {"kind": HOLD, "tenant": self._tenant, "namespace": self._namespace,
                "target": [target.kind, target.name], "txn": txn, "dues": [due for _, due in items]}
        self._in_flight += len(items)
        if self._in_flight >= MAX_IN_FLIGHT:
            self._writable.clear()
        sending = asyncio.ensure_future(self._ask(head, pack([record for record, _ in items])))
        sending.add_done_callback(lambda done: self._sent(done, len(items)))
        return sending

    def _bundle(self) -> Bundle:
        return partition_bundle(self._tenant, self._namespace, self._topic, 0)

    async def _ask(self, head: dict, payload: bytes) -> list[int]:
        answer, _ = await ask_owner_waiting(self._core, self._bundle, head, payload)
        return answer["ids"]

    def _sent(self, done: asyncio.Future, count: int) -> None:
        retrieved(done)
        self._in_flight -= count
        if self._in_flight < MAX_IN_FLIGHT:
            self._writable.set()

    async def end_transaction(self, producer_id: int, commit: bool) -> None:
        await self._ask_store(TXN_END, producer_id=producer_id, commit=commit)

    async def pending(self) -> dict[str, int]:
        return (await self._ask_store(PENDING))["targets"]

    async def cancel(self, message_id: int, topic: str | None) -> bool:
        return (await self._ask_store(CANCEL, id=message_id, topic=topic))["cancelled"]

    async def _ask_store(self, kind: str, **fields) -> dict:
        answer, _ = await ask_owner_waiting(self._core, self._bundle, {
            "kind": kind, "tenant": self._tenant, "namespace": self._namespace, **fields})
        return answer


async def _first(ids: asyncio.Future) -> int:
    return (await ids)[0]


# --- the partitions a release goes to --------------------------------------------------------------


def _elsewhere(core, name: TopicName, index: int) -> bool:
    """Whether another broker serves the partition (and links to it exist)."""
    if core.cluster is None or core.peers is None:
        return False
    return not core.cluster.owns(partition_bundle(name.tenant, name.namespace, name.topic, index))


def _locate(name: TopicName, index: int) -> Callable[[], Bundle]:
    return lambda: partition_bundle(name.tenant, name.namespace, name.topic, index)


def _head(kind: str, name: TopicName, index: int, **fields) -> dict:
    return {"kind": kind, "tenant": name.tenant, "namespace": name.namespace, "topic": name.topic,
            "partition": index, **fields}


async def partition_end(core, name: TopicName, index: int) -> int:
    """The partition's high watermark, as the broker serving it knows it."""
    if not _elsewhere(core, name, index):
        return (await core.partition(name, index)).high_watermark
    answer, _ = await ask_owner_waiting(core, _locate(name, index), _head(END, name, index))
    return answer["high_watermark"]


async def append_released(core, name: TopicName, index: int, records: list[Record]) -> int:
    """Append released records to the end of the partition, wherever it is served; the base offset
    once durable."""
    if not _elsewhere(core, name, index):
        partition = await core.partition(name, index)
        return await partition.start_append(build_batch(records))
    answer, _ = await ask_owner_waiting(core, _locate(name, index), _head(APPEND, name, index), pack(records))
    return answer["offset"]


async def delayed_ids(core, name: TopicName, index: int, start: int) -> set[int]:
    """The delayed.id values of the partition's records from `start` to its end."""
    if not _elsewhere(core, name, index):
        return await delayed_ids_in(await core.partition(name, index), start)
    answer, _ = await ask_owner_waiting(core, _locate(name, index), _head(IDS, name, index, start=start))
    return set(answer["ids"])


async def delayed_ids_in(partition: Partition, start: int) -> set[int]:
    ids: set[int] = set()
    offset, end = max(start, partition.log_start_offset), partition.high_watermark
    while offset < end:
        result = await partition.read(offset, SCAN_BYTES)
        following = offset
        for batch in split_batches(result.records) if result.records else ():
            header = read_header(batch)
            following = max(following, header.base_offset + header.last_offset_delta + 1)
            if header.is_control:
                continue
            for record in decode_batch(batch)[1]:
                found = id_of(record.headers)
                if found is not None:
                    ids.add(found)
        if following == offset:
            break
        offset = following
    return ids


# --- the owner's side ------------------------------------------------------------------------------


class DelayedRequests:
    """Answers the requests above for `service` (core/delayed/service.py): a store's requests only
    while this broker serves the store (NotOwner if not, so they never bounce on)."""

    def __init__(self, core, service) -> None:
        self._core = core
        self._service = service

    def register(self, peers) -> None:
        for kind, handler in ((HOLD, self._hold), (TXN_END, self._txn_end), (PENDING, self._pending),
                              (CANCEL, self._cancel), (END, self._end), (APPEND, self._append), (IDS, self._ids)):
            peers.handle(kind, handler)

    async def _hold(self, head: dict, payload: bytes, _link: PeerConnection) -> tuple[dict, bytes]:
        store = self._service.local_store(head["tenant"], head["namespace"])
        records, dues = unpack_records(payload), head["dues"]
        if len(records) != len(dues):
            raise RequestRefused(f"{len(records)} records held with {len(dues)} due times")
        target = Target(*head["target"])
        ids = await asyncio.gather(*[store.hold(record, due, target, head["txn"]) for record, due in zip(records, dues)])
        return {"ids": list(ids)}, b""

    async def _txn_end(self, head: dict, _payload: bytes, _link: PeerConnection) -> tuple[dict, bytes]:
        self._service.check_serving(head["tenant"], head["namespace"])
        await self._service.end_transaction(head["tenant"], head["namespace"], head["producer_id"], head["commit"])
        return {}, b""

    async def _pending(self, head: dict, _payload: bytes, _link: PeerConnection) -> tuple[dict, bytes]:
        self._service.check_serving(head["tenant"], head["namespace"])
        return {"targets": await self._service.pending(head["tenant"], head["namespace"])}, b""

    async def _cancel(self, head: dict, _payload: bytes, _link: PeerConnection) -> tuple[dict, bytes]:
        self._service.check_serving(head["tenant"], head["namespace"])
        return {"cancelled": await self._service.cancel(head["tenant"], head["namespace"], head["id"],
                                                        topic=head["topic"])}, b""

    async def _partition(self, head: dict) -> Partition:
        """The partition asked about, if this broker serves it (NotOwner if not)."""
        return await self._core.partition(TopicName(head["tenant"], head["namespace"], head["topic"]), head["partition"])

    async def _end(self, head: dict, _payload: bytes, _link: PeerConnection) -> tuple[dict, bytes]:
        return {"high_watermark": (await self._partition(head)).high_watermark}, b""

    async def _append(self, head: dict, payload: bytes, _link: PeerConnection) -> tuple[dict, bytes]:
        return {"offset": await (await self._partition(head)).start_append(payload)}, b""

    async def _ids(self, head: dict, _payload: bytes, _link: PeerConnection) -> tuple[dict, bytes]:
        partition = await self._partition(head)
        return {"ids": sorted(await delayed_ids_in(partition, head["start"]))}, b""

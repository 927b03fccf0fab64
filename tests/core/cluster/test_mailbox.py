"""Requests between brokers through the metadata store (core/cluster/mailbox.py): answered by the
bundle's owner whoever posts them, kept until a broker owns the bundle, refused or retried as the
handler says, and never posted by a broker that lost the bundle it posts for."""

from __future__ import annotations

import asyncio
import json

import pytest

from core.clock import SystemClock
from core.cluster.broker_cluster import BrokerCluster
from core.cluster.bundles import Bundle
from core.cluster.guarded import GuardedMetadata
from core.cluster.mailbox import MAILBOX, Mailbox
from core.errors import NotOwner, RequestRefused, StorageUnavailable
from core.registry import Registry
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage
from tests.core.cluster.test_cluster_membership import ALL, POLL_S, broker, split_evenly, until


@pytest.fixture
async def storage(tmp_path):
    opened = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    await Registry(opened.metadata, SystemClock()).start()   # the default namespace
    yield opened
    await opened.close()


def mailbox_of(storage, cluster: BrokerCluster) -> Mailbox:
    box = Mailbox(storage.metadata, cluster,
                  lambda bundle: GuardedMetadata(storage.metadata, lambda: cluster.guard(bundle)))
    box.handle("echo", lambda bundle, request: _echo(cluster, bundle, request))
    return box


async def _echo(cluster: BrokerCluster, bundle: Bundle, request: dict) -> dict:
    return {"by": cluster.local.id, "bundle": bundle.path, "value": request["value"]}


def writer(storage, cluster: BrokerCluster) -> GuardedMetadata:
    """The poster's view: it writes as the owner of a bundle it holds."""
    own = min(cluster.held)
    return GuardedMetadata(storage.metadata, lambda: cluster.guard(own))


async def test_a_request_is_answered_by_the_owner_of_the_bundle_and_then_removed(storage) -> None:
    first, second = (BrokerCluster(storage.metadata, broker(i), poll_s=POLL_S) for i in (1, 2))
    boxes = [mailbox_of(storage, member) for member in (first, second)]
    for member in (first, second):
        await member.start()
    await until(lambda: split_evenly(first, second))
    target = min(second.held)
    reply = await boxes[0].ask(target, "req-1", {"kind": "echo", "value": 7}, writer(storage, first))
    assert reply == {"by": 2, "bundle": target.path, "value": 7}
    assert await storage.metadata.children(f"{MAILBOX}/{target.path}") == []
    for box in boxes:
        box.close()
    await first.close()
    await second.close()


async def test_a_request_waits_for_a_broker_to_take_its_bundle(storage) -> None:
    """Posted while nobody owned the bundle (its poster gone since), answered once one takes it."""
    target = min(ALL)
    path = f"{MAILBOX}/{target.path}/left-behind"
    await storage.metadata.create(path, json.dumps({"kind": "echo", "value": "late"}).encode())
    owner = BrokerCluster(storage.metadata, broker(3), poll_s=POLL_S)
    box = mailbox_of(storage, owner)
    await owner.start()

    async def answered() -> bool:
        return "reply" in json.loads((await storage.metadata.get(path)).value)
    for _ in range(500):
        if await answered():
            break
        await asyncio.sleep(0.02)
    assert json.loads((await storage.metadata.get(path)).value)["reply"]["by"] == 3
    box.close()
    await owner.close()


async def test_a_refusal_reaches_the_poster_and_a_retriable_error_is_tried_again(storage) -> None:
    owner = BrokerCluster(storage.metadata, broker(1), poll_s=POLL_S)
    box = mailbox_of(storage, owner)
    calls: list[str] = []

    async def refuse(bundle: Bundle, request: dict) -> dict:
        raise RequestRefused("not that")

    async def busy_once(bundle: Bundle, request: dict) -> dict:
        calls.append(request["kind"])
        if len(calls) == 1:
            raise NotOwner("still opening")
        return {"tries": len(calls)}
    box.handle("refuse", refuse)
    box.handle("busy", busy_once)
    await owner.start()
    await until(lambda: owner.held == ALL)
    with pytest.raises(RequestRefused, match="not that"):
        await box.ask(max(ALL), "r", {"kind": "refuse"}, writer(storage, owner))
    assert await box.ask(max(ALL), "b", {"kind": "busy"}, writer(storage, owner)) == {"tries": 2}
    with pytest.raises(RequestRefused, match="no handler"):
        await box.ask(max(ALL), "u", {"kind": "unknown"}, writer(storage, owner))
    box.close()
    await owner.close()


async def test_a_broker_without_the_bundle_it_posts_for_posts_nothing(storage) -> None:
    owner = BrokerCluster(storage.metadata, broker(1), poll_s=POLL_S)
    box = mailbox_of(storage, owner)
    await owner.start()
    await until(lambda: owner.held == ALL)
    lost = min(ALL)
    await storage.metadata.delete(owner.guard(lost).path)     # its term ended, as with an expired session
    with pytest.raises(StorageUnavailable):
        await box.ask(max(ALL), "x", {"kind": "echo", "value": 1},
                      GuardedMetadata(storage.metadata, lambda: owner.guard(lost)))
    assert await storage.metadata.children(f"{MAILBOX}/{max(ALL).path}") == []
    box.close()
    await owner.close()


@pytest.fixture
async def splitting(storage):
    """Two brokers with mailboxes whose handler answers a request naming a hash only from the
    bundle holding it (as a real one names a partition or group), and not from `parent` (as while a
    partition opens); `parent`, a bundle of the first, is to be split with its upper half placed on
    the second: (first, second, boxes, parent, low, high)."""
    first, second = (BrokerCluster(storage.metadata, broker(i), poll_s=POLL_S) for i in (1, 2))
    boxes = [mailbox_of(storage, member) for member in (first, second)]
    for member in (first, second):
        await member.start()
    await until(lambda: split_evenly(first, second))
    parent = min(first.held)
    low, high = parent.halves((parent.lower + parent.upper) // 2)

    async def echo_if_held(box: Mailbox, bundle: Bundle, request: dict) -> dict:
        if bundle == parent or not bundle.lower <= request["hash"] < bundle.upper:
            raise NotOwner(f"hash {request['hash']:#x} cannot be answered by {bundle} now")
        return await _echo(box._cluster, bundle, request)

    for box in boxes:
        box.handle("echo", lambda bundle, request, box=box: echo_if_held(box, bundle, request))
    await first.place({high: 2})
    yield first, second, boxes, parent, low, high
    for box in boxes:
        box.close()
    await first.close()
    await second.close()


async def test_a_request_to_a_bundle_split_since_is_answered_by_the_owner_of_its_half(storage, splitting) -> None:
    """Posted to a bundle whose owner cannot answer it yet, which then splits the bundle: the owner
    of the half holding the request's key answers it; the lower half's owner refuses it."""
    first, second, boxes, parent, low, high = splitting
    asking = asyncio.ensure_future(boxes[1].ask(parent, "across-the-split", {
        "kind": "echo", "value": "split", "hash": high.lower}, writer(storage, second)))
    async with asyncio.timeout(10):
        while not await storage.metadata.children(f"{MAILBOX}/{parent.path}"):
            await asyncio.sleep(0.01)
    await first.split(parent, low.upper)
    async with asyncio.timeout(10):
        assert await asking == {"by": 2, "bundle": high.path, "value": "split"}


async def test_a_request_posted_to_a_bundle_after_its_split_is_answered_by_the_owner_of_its_half(storage, splitting) -> None:
    """A poster that has not read the new layout yet asks the parent: its half's owner answers."""
    first, second, boxes, parent, low, high = splitting
    await first.split(parent, low.upper)
    await until(lambda: second.owns(high) and first.owns(low))
    async with asyncio.timeout(10):
        reply = await boxes[1].ask(parent, "after-the-split", {"kind": "echo", "value": "late", "hash": high.lower},
                                   writer(storage, second))
    assert reply == {"by": 2, "bundle": high.path, "value": "late"}

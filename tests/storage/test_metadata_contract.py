"""The MetadataStore contract, run against both stores: SQLite (embedded) and ZooKeeper (a cluster,
a private server for this module). Versions, compare-and-set, children, durable counters, watches,
ephemeral nodes, and two stores on one location at once, as two processes of a cluster have."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gateway.cluster.zookeeper import ZooKeeperServer
from storage.api import BadVersion, Fenced, Guard, MetadataStore, NodeExists, NoNode, StorageError, Versioned
from storage.metadata.open import open_metadata_store

StoreOpener = Callable[[], Awaitable[MetadataStore]]
_roots = itertools.count()


@pytest.fixture(params=["sqlite", "zookeeper"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty location: a SQLite file, or a root of its own on this module's ZooKeeper."""
    if request.param == "sqlite":
        return str(tmp_path / "metadata.db")
    server: ZooKeeperServer = request.getfixturevalue("zookeeper")
    return f"zk://{server.address}/contract{next(_roots)}"


@pytest.fixture
async def open_store(location: str) -> AsyncIterator[StoreOpener]:
    """Opens stores on the test's location (each one a separate session); closes what is left open."""
    opened: list[MetadataStore] = []

    async def open_one() -> MetadataStore:
        opened.append(await open_metadata_store(location))
        return opened[-1]
    yield open_one
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_store: StoreOpener) -> MetadataStore:
    return await open_store()


# --- create / get ---------------------------------------------------------------------------------


async def test_create_stores_the_value_at_version_zero(store: MetadataStore) -> None:
    assert await store.get("/a") is None
    assert await store.create("/a", b"hello") == 0
    assert await store.get("/a") == Versioned(b"hello", 0)


async def test_create_of_an_existing_path_raises_node_exists_and_keeps_the_value(store: MetadataStore) -> None:
    await store.create("/a", b"first")
    with pytest.raises(NodeExists, match="/a"):
        await store.create("/a", b"second")
    assert await store.get("/a") == Versioned(b"first", 0)


@pytest.mark.parametrize("path", ["a", "/a/", "/a//b", ""])
async def test_malformed_paths_are_rejected(store: MetadataStore, path: str) -> None:
    with pytest.raises(ValueError, match="bad metadata path"):
        await store.create(path, b"x")


# --- put ------------------------------------------------------------------------------------------


async def test_unconditional_put_creates_then_bumps_the_version(store: MetadataStore) -> None:
    assert await store.put("/n", b"v0") == 0
    assert await store.put("/n", b"v1") == 1
    assert await store.put("/n", b"v2") == 2
    assert await store.get("/n") == Versioned(b"v2", 2)


async def test_put_with_the_expected_version_succeeds(store: MetadataStore) -> None:
    await store.create("/n", b"v0")
    assert await store.put("/n", b"v1", expected_version=0) == 1
    assert await store.put("/n", b"v2", expected_version=1) == 2
    assert await store.get("/n") == Versioned(b"v2", 2)


async def test_put_with_a_stale_version_raises_bad_version_and_changes_nothing(store: MetadataStore) -> None:
    await store.create("/n", b"v0")
    await store.put("/n", b"v1", expected_version=0)
    with pytest.raises(BadVersion, match="/n: version 1, expected 0"):
        await store.put("/n", b"lost", expected_version=0)
    assert await store.get("/n") == Versioned(b"v1", 1)


async def test_put_with_an_expected_version_on_a_missing_node_raises_no_node(store: MetadataStore) -> None:
    with pytest.raises(NoNode, match="/missing"):
        await store.put("/missing", b"x", expected_version=0)
    assert await store.get("/missing") is None


async def test_values_are_stored_as_exact_bytes(store: MetadataStore) -> None:
    value = bytes(range(256)) * 4
    await store.put("/bin", value)
    assert (await store.get("/bin")).value == value
    await store.put("/empty", b"")
    assert await store.get("/empty") == Versioned(b"", 0)


# --- delete ---------------------------------------------------------------------------------------


async def test_delete_removes_the_node(store: MetadataStore) -> None:
    await store.create("/d", b"x")
    await store.delete("/d")
    assert await store.get("/d") is None
    assert await store.create("/d", b"again") == 0  # versions restart after a delete


async def test_delete_of_a_missing_node_raises_no_node(store: MetadataStore) -> None:
    with pytest.raises(NoNode, match="/nothing"):
        await store.delete("/nothing")


async def test_delete_with_a_stale_version_raises_bad_version_and_keeps_the_node(store: MetadataStore) -> None:
    await store.create("/d", b"x")
    await store.put("/d", b"y")
    with pytest.raises(BadVersion, match="/d: version 1, expected 0"):
        await store.delete("/d", expected_version=0)
    assert await store.get("/d") == Versioned(b"y", 1)
    await store.delete("/d", expected_version=1)
    assert await store.get("/d") is None


# --- guarded writes -------------------------------------------------------------------------------


async def test_writes_behind_a_guard_that_holds_apply(store: MetadataStore) -> None:
    await store.create("/term", b"")
    await store.put("/term", b"")
    guard = Guard("/term", 1)
    assert await store.create("/a", b"1", guard=guard) == 0
    assert await store.put("/a", b"2", guard=guard) == 1
    assert await store.put("/a", b"3", expected_version=1, guard=guard) == 2
    assert await store.put("/deep/new/b", b"x", guard=guard) == 0   # create-or-overwrite, parents made
    await store.delete("/a", guard=guard)
    assert await store.get("/a") is None
    assert await store.get("/deep/new/b") == Versioned(b"x", 0)


@pytest.mark.parametrize("guard", [Guard("/term", 0), Guard("/absent", 0)], ids=["moved", "absent"])
async def test_writes_behind_a_guard_that_moved_or_went_are_fenced_and_change_nothing(
        store: MetadataStore, guard: Guard) -> None:
    await store.create("/term", b"")
    await store.put("/term", b"")            # version 1: a guard at 0 is stale
    await store.create("/a", b"kept")
    with pytest.raises(Fenced, match=guard.path):
        await store.put("/a", b"late", guard=guard)
    with pytest.raises(Fenced):
        await store.put("/a", b"late", expected_version=7, guard=guard)   # Fenced before BadVersion
    with pytest.raises(Fenced):
        await store.create("/b", b"late", guard=guard)
    with pytest.raises(Fenced):
        await store.put("/c", b"late", guard=guard)
    with pytest.raises(Fenced):
        await store.delete("/a", guard=guard)
    assert await store.get("/a") == Versioned(b"kept", 0)
    assert await store.get("/b") is None and await store.get("/c") is None


async def test_a_guarded_write_keeps_its_own_errors_when_the_guard_holds(store: MetadataStore) -> None:
    await store.create("/term", b"")
    guard = Guard("/term")
    await store.create("/a", b"1")
    with pytest.raises(NodeExists):
        await store.create("/a", b"2", guard=guard)
    with pytest.raises(BadVersion):
        await store.put("/a", b"2", expected_version=5, guard=guard)
    with pytest.raises(NoNode):
        await store.delete("/missing", guard=guard)


async def test_an_ephemeral_guard_fences_its_holder_once_its_session_ends(open_store: StoreOpener) -> None:
    """The use: a write made in the name of a lease lands only while the lease's session lives."""
    writer, holder = await open_store(), await open_store()  # opening SQLite again ends earlier sessions
    await holder.create("/terms/t1", b"", ephemeral=True)
    guard = Guard("/terms/t1")
    assert await writer.put("/cursor", b"10", guard=guard) == 0
    await holder.close()
    with pytest.raises(Fenced):
        await writer.put("/cursor", b"5", guard=guard)
    assert await writer.get("/cursor") == Versioned(b"10", 0)


# --- children -------------------------------------------------------------------------------------


async def test_children_are_sorted_direct_children_only(store: MetadataStore) -> None:
    for path in ["/t/b", "/t/a", "/t/c", "/t/b/deep", "/t/b/deep/deeper", "/tx", "/tx/y", "/other/a", "/t/a0"]:
        await store.put(path, b"")
    assert await store.children("/t") == ["a", "a0", "b", "c"]
    assert await store.children("/t/") == ["a", "a0", "b", "c"]
    assert await store.children("/t/b") == ["deep"]
    assert await store.children("/nothing") == []


async def test_children_of_the_root_are_the_top_level_nodes(store: MetadataStore) -> None:
    for path in ["/b", "/a", "/a/x"]:
        await store.put(path, b"")
    assert await store.children("/") == ["a", "b"]


async def test_children_do_not_list_deleted_nodes(store: MetadataStore) -> None:
    for name in "abc":
        await store.put(f"/p/{name}", b"")
    await store.delete("/p/b")
    assert await store.children("/p") == ["a", "c"]


# --- counters -------------------------------------------------------------------------------------


async def test_next_id_is_strictly_increasing_and_counters_are_independent(store: MetadataStore) -> None:
    ids = [await store.next_id("ledger") for _ in range(5)]
    assert ids == sorted(set(ids)) and len(ids) == 5
    other = [await store.next_id("other") for _ in range(2)]
    assert other[0] < other[1]
    assert await store.next_id("ledger") > ids[-1]


async def test_concurrent_next_ids_are_all_distinct(store: MetadataStore) -> None:
    ids = await asyncio.gather(*(store.next_id("c") for _ in range(200)))
    assert len(set(ids)) == 200


async def test_next_id_never_reuses_a_value_after_reopen(open_store: StoreOpener) -> None:
    first = await open_store()
    try:
        before = [await first.next_id("ledger") for _ in range(3)]
    finally:
        await first.close()
    second = await open_store()
    try:
        after = await second.next_id("ledger")
        assert after > max(before)
    finally:
        await second.close()


async def test_writes_are_durable_across_reopen(open_store: StoreOpener) -> None:
    first = await open_store()
    try:
        await first.create("/k", b"v")
        await first.put("/k", b"w", expected_version=0)
    finally:
        await first.close()
    second = await open_store()
    try:
        assert await second.get("/k") == Versioned(b"w", 1)
    finally:
        await second.close()


# --- watches --------------------------------------------------------------------------------------


async def test_watch_fires_after_create_put_and_delete_and_stops_after_cancel(store: MetadataStore) -> None:
    seen: list[str] = []
    cancel = store.watch("/w", seen.append)
    await store.create("/w", b"0")
    assert seen == ["/w"]
    await store.put("/w", b"1")
    assert seen == ["/w", "/w"]
    await store.delete("/w")
    assert seen == ["/w", "/w", "/w"]
    cancel()
    await store.put("/w", b"2")
    await store.delete("/w")
    assert seen == ["/w", "/w", "/w"]
    cancel()  # cancelling twice is harmless


async def test_watch_fires_only_after_the_write_is_committed(store: MetadataStore) -> None:
    observed: list[asyncio.Task] = []

    def on_change(path: str) -> None:
        observed.append(asyncio.ensure_future(store.get(path)))

    store.watch("/c", on_change)
    await store.put("/c", b"committed")
    assert len(observed) == 1
    assert await observed[0] == Versioned(b"committed", 0)


async def test_watch_does_not_fire_for_reads_failed_writes_or_other_paths(store: MetadataStore) -> None:
    seen: list[str] = []
    store.watch("/w", seen.append)
    await store.create("/w", b"0")
    seen.clear()
    await store.get("/w")
    await store.children("/w")
    with pytest.raises(BadVersion):
        await store.put("/w", b"x", expected_version=7)
    with pytest.raises(NodeExists):
        await store.create("/w", b"x")
    await store.put("/w/child", b"x")
    await store.put("/other", b"x")
    assert seen == []


async def test_a_failing_watch_callback_does_not_break_the_write_or_other_watches(store: MetadataStore) -> None:
    seen: list[str] = []

    def broken(path: str) -> None:
        raise RuntimeError("watcher bug")

    store.watch("/w", broken)
    store.watch("/w", seen.append)
    assert await store.put("/w", b"x") == 0
    assert seen == ["/w"]


async def test_cancelling_one_watch_keeps_the_others(store: MetadataStore) -> None:
    first: list[str] = []
    second: list[str] = []
    cancel_first = store.watch("/w", first.append)
    store.watch("/w", second.append)
    cancel_first()
    await store.put("/w", b"x")
    assert (first, second) == ([], ["/w"])


# --- group commit ---------------------------------------------------------------------------------


async def test_many_concurrent_puts_all_complete(store: MetadataStore) -> None:
    versions = await asyncio.gather(*(store.put(f"/many/{i:04d}", str(i).encode()) for i in range(500)))
    assert versions == [0] * 500
    assert await store.children("/many") == [f"{i:04d}" for i in range(500)]
    assert await store.get("/many/0321") == Versioned(b"321", 0)


async def test_operations_after_close_raise_storage_error(open_store: StoreOpener) -> None:
    store = await open_store()
    await store.close()
    with pytest.raises(StorageError, match="closed"):
        await store.get("/a")
    await store.close()  # closing twice is harmless


# --- two stores on one location -------------------------------------------------------------------


async def test_concurrent_compare_and_sets_from_two_stores_have_exactly_one_winner(open_store: StoreOpener) -> None:
    first, second = await open_store(), await open_store()
    await first.create("/race", b"v0")
    for round_ in range(20):
        outcomes = await asyncio.gather(first.put("/race", b"first", expected_version=round_),
                                        second.put("/race", b"second", expected_version=round_),
                                        return_exceptions=True)
        winners = [o for o in outcomes if not isinstance(o, BaseException)]
        assert winners == [round_ + 1], outcomes
        assert all(isinstance(o, BadVersion) for o in outcomes if isinstance(o, BaseException))
    assert (await second.get("/race")).version == 20


async def test_next_ids_from_two_stores_never_repeat(open_store: StoreOpener) -> None:
    first, second = await open_store(), await open_store()
    ids = await asyncio.gather(*(store.next_id("ledger") for _ in range(100) for store in (first, second)))
    assert len(set(ids)) == 200
    await first.close()
    third = await open_store()
    assert await third.next_id("ledger") > max(ids)


async def test_a_write_of_one_store_is_read_by_another(open_store: StoreOpener) -> None:
    first, second = await open_store(), await open_store()
    await first.put("/shared", b"x")
    assert await second.get("/shared") == Versioned(b"x", 0)
    await first.put("/shared", b"y")
    assert await second.get("/shared", latest=True) == Versioned(b"y", 1)
    assert await second.get("/missing", latest=True) is None


# --- ephemeral nodes ------------------------------------------------------------------------------


async def test_an_ephemeral_node_is_a_node_until_its_store_closes(open_store: StoreOpener) -> None:
    other, owner = await open_store(), await open_store()  # opening SQLite again ends earlier sessions
    assert await owner.create("/bookies/b1", b"rack-a", ephemeral=True) == 0
    assert await other.get("/bookies/b1") == Versioned(b"rack-a", 0)
    assert await other.children("/bookies") == ["b1"]
    with pytest.raises(NodeExists):
        await other.create("/bookies/b1", b"rack-b", ephemeral=True)
    assert await owner.put("/bookies/b1", b"rack-c", expected_version=0) == 1  # a put keeps it ephemeral
    await owner.close()
    assert await other.get("/bookies/b1") is None
    assert await other.children("/bookies") == []


async def test_ephemeral_nodes_are_gone_for_the_next_store_and_never_recreated(open_store: StoreOpener) -> None:
    owner = await open_store()
    await owner.create("/owner", b"me", ephemeral=True)
    await owner.create("/kept", b"persistent")
    await owner.close()
    reopened = await open_store()
    assert await reopened.get("/owner") is None
    assert await reopened.get("/kept") == Versioned(b"persistent", 0)


async def test_a_deleted_ephemeral_path_can_hold_a_persistent_node(open_store: StoreOpener) -> None:
    owner = await open_store()
    await owner.create("/p", b"ephemeral", ephemeral=True)
    await owner.delete("/p")
    await owner.create("/p", b"persistent")
    await owner.close()
    assert await (await open_store()).get("/p") == Versioned(b"persistent", 0)


async def test_an_ephemeral_node_fires_watches_like_any_other(store: MetadataStore) -> None:
    seen: list[str] = []
    store.watch("/e", seen.append)
    await store.create("/e", b"x", ephemeral=True)
    await store.delete("/e")
    assert seen == ["/e", "/e"]


async def test_session_callbacks_can_be_registered_and_cancelled(store: MetadataStore) -> None:
    cancel = store.on_session_event(lambda state: None)
    cancel()
    cancel()

"""SqliteMetadataStore: versioned nodes, compare-and-set, children, durable counters, watches and
group commit with per-operation savepoints."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.api import BadVersion, NodeExists, NoNode, StorageError, Versioned
from storage.metadata.sqlite import SqliteMetadataStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteMetadataStore]:
    s = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    try:
        yield s
    finally:
        await s.close()


# --- create / get ---------------------------------------------------------------------------------


async def test_create_stores_the_value_at_version_zero(store: SqliteMetadataStore) -> None:
    assert await store.get("/a") is None
    assert await store.create("/a", b"hello") == 0
    assert await store.get("/a") == Versioned(b"hello", 0)


async def test_create_of_an_existing_path_raises_node_exists_and_keeps_the_value(store: SqliteMetadataStore) -> None:
    await store.create("/a", b"first")
    with pytest.raises(NodeExists, match="/a"):
        await store.create("/a", b"second")
    assert await store.get("/a") == Versioned(b"first", 0)


@pytest.mark.parametrize("path", ["a", "/a/", "/a//b", ""])
async def test_malformed_paths_are_rejected(store: SqliteMetadataStore, path: str) -> None:
    with pytest.raises(ValueError, match="bad metadata path"):
        await store.create(path, b"x")


# --- put ------------------------------------------------------------------------------------------


async def test_unconditional_put_creates_then_bumps_the_version(store: SqliteMetadataStore) -> None:
    assert await store.put("/n", b"v0") == 0
    assert await store.put("/n", b"v1") == 1
    assert await store.put("/n", b"v2") == 2
    assert await store.get("/n") == Versioned(b"v2", 2)


async def test_put_with_the_expected_version_succeeds(store: SqliteMetadataStore) -> None:
    await store.create("/n", b"v0")
    assert await store.put("/n", b"v1", expected_version=0) == 1
    assert await store.put("/n", b"v2", expected_version=1) == 2
    assert await store.get("/n") == Versioned(b"v2", 2)


async def test_put_with_a_stale_version_raises_bad_version_and_changes_nothing(store: SqliteMetadataStore) -> None:
    await store.create("/n", b"v0")
    await store.put("/n", b"v1", expected_version=0)
    with pytest.raises(BadVersion, match="/n: version 1, expected 0"):
        await store.put("/n", b"lost", expected_version=0)
    assert await store.get("/n") == Versioned(b"v1", 1)


async def test_put_with_an_expected_version_on_a_missing_node_raises_no_node(store: SqliteMetadataStore) -> None:
    with pytest.raises(NoNode, match="/missing"):
        await store.put("/missing", b"x", expected_version=0)
    assert await store.get("/missing") is None


async def test_values_are_stored_as_exact_bytes(store: SqliteMetadataStore) -> None:
    value = bytes(range(256)) * 4
    await store.put("/bin", value)
    assert (await store.get("/bin")).value == value
    await store.put("/empty", b"")
    assert await store.get("/empty") == Versioned(b"", 0)


# --- delete ---------------------------------------------------------------------------------------


async def test_delete_removes_the_node(store: SqliteMetadataStore) -> None:
    await store.create("/d", b"x")
    await store.delete("/d")
    assert await store.get("/d") is None
    assert await store.create("/d", b"again") == 0  # versions restart after a delete


async def test_delete_of_a_missing_node_raises_no_node(store: SqliteMetadataStore) -> None:
    with pytest.raises(NoNode, match="/nothing"):
        await store.delete("/nothing")


async def test_delete_with_a_stale_version_raises_bad_version_and_keeps_the_node(store: SqliteMetadataStore) -> None:
    await store.create("/d", b"x")
    await store.put("/d", b"y")
    with pytest.raises(BadVersion, match="/d: version 1, expected 0"):
        await store.delete("/d", expected_version=0)
    assert await store.get("/d") == Versioned(b"y", 1)
    await store.delete("/d", expected_version=1)
    assert await store.get("/d") is None


# --- children -------------------------------------------------------------------------------------


async def test_children_are_sorted_direct_children_only(store: SqliteMetadataStore) -> None:
    for path in ["/t/b", "/t/a", "/t/c", "/t/b/deep", "/t/b/deep/deeper", "/tx", "/tx/y", "/other/a", "/t/a0"]:
        await store.put(path, b"")
    assert await store.children("/t") == ["a", "a0", "b", "c"]
    assert await store.children("/t/") == ["a", "a0", "b", "c"]
    assert await store.children("/t/b") == ["deep"]
    assert await store.children("/nothing") == []


async def test_children_of_the_root_are_the_top_level_nodes(store: SqliteMetadataStore) -> None:
    for path in ["/b", "/a", "/a/x"]:
        await store.put(path, b"")
    assert await store.children("/") == ["a", "b"]


async def test_children_do_not_list_deleted_nodes(store: SqliteMetadataStore) -> None:
    for name in "abc":
        await store.put(f"/p/{name}", b"")
    await store.delete("/p/b")
    assert await store.children("/p") == ["a", "c"]


# --- counters -------------------------------------------------------------------------------------


async def test_next_id_is_strictly_increasing_and_counters_are_independent(store: SqliteMetadataStore) -> None:
    ids = [await store.next_id("ledger") for _ in range(5)]
    assert ids == sorted(set(ids)) and len(ids) == 5
    other = [await store.next_id("other") for _ in range(2)]
    assert other[0] < other[1]
    assert await store.next_id("ledger") > ids[-1]


async def test_concurrent_next_ids_are_all_distinct(store: SqliteMetadataStore) -> None:
    ids = await asyncio.gather(*(store.next_id("c") for _ in range(200)))
    assert len(set(ids)) == 200


async def test_next_id_never_reuses_a_value_after_reopen(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    first = await SqliteMetadataStore.open(path)
    try:
        before = [await first.next_id("ledger") for _ in range(3)]
    finally:
        await first.close()
    second = await SqliteMetadataStore.open(path)
    try:
        after = await second.next_id("ledger")
        assert after > max(before)
    finally:
        await second.close()


async def test_writes_are_durable_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    first = await SqliteMetadataStore.open(path)
    try:
        await first.create("/k", b"v")
        await first.put("/k", b"w", expected_version=0)
    finally:
        await first.close()
    second = await SqliteMetadataStore.open(path)
    try:
        assert await second.get("/k") == Versioned(b"w", 1)
    finally:
        await second.close()


async def test_open_of_an_unusable_path_raises_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot open metadata store"):
        await SqliteMetadataStore.open(tmp_path / "no such dir" / "metadata.db")


async def test_operations_after_close_raise_storage_error(tmp_path: Path) -> None:
    store = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    await store.close()
    with pytest.raises(StorageError, match="closed"):
        await store.get("/a")


# --- watches --------------------------------------------------------------------------------------


async def test_watch_fires_after_create_put_and_delete_and_stops_after_cancel(store: SqliteMetadataStore) -> None:
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


async def test_watch_fires_only_after_the_write_is_committed(store: SqliteMetadataStore) -> None:
    observed: list[asyncio.Task] = []

    def on_change(path: str) -> None:
        observed.append(asyncio.ensure_future(store.get(path)))

    store.watch("/c", on_change)
    await store.put("/c", b"committed")
    assert len(observed) == 1
    assert await observed[0] == Versioned(b"committed", 0)


async def test_watch_does_not_fire_for_reads_failed_writes_or_other_paths(store: SqliteMetadataStore) -> None:
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


async def test_a_failing_watch_callback_does_not_break_the_write_or_other_watches(store: SqliteMetadataStore) -> None:
    seen: list[str] = []

    def broken(path: str) -> None:
        raise RuntimeError("watcher bug")

    store.watch("/w", broken)
    store.watch("/w", seen.append)
    assert await store.put("/w", b"x") == 0
    assert seen == ["/w"]


async def test_cancelling_one_watch_keeps_the_others(store: SqliteMetadataStore) -> None:
    first: list[str] = []
    second: list[str] = []
    cancel_first = store.watch("/w", first.append)
    store.watch("/w", second.append)
    cancel_first()
    await store.put("/w", b"x")
    assert (first, second) == ([], ["/w"])


# --- group commit ---------------------------------------------------------------------------------


async def test_many_concurrent_puts_all_complete(store: SqliteMetadataStore) -> None:
    versions = await asyncio.gather(*(store.put(f"/many/{i:04d}", str(i).encode()) for i in range(500)))
    assert versions == [0] * 500
    assert await store.children("/many") == [f"{i:04d}" for i in range(500)]
    assert await store.get("/many/0321") == Versioned(b"321", 0)


async def test_a_failing_cas_in_a_batch_does_not_undo_the_other_writes_of_that_batch(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    store = await SqliteMetadataStore.open(path)
    try:
        await store.create("/cas", b"v0")
        await store.put("/cas", b"v1")
        # Hold SQLite's write lock from another connection so that everything submitted below queues
        # up behind the store thread: it is executed in at most two batches, and the failing
        # compare-and-set sits between puts in whichever batch it lands in.
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            puts_before = [asyncio.ensure_future(store.put(f"/batch/a{i:03d}", b"a")) for i in range(100)]
            lost_cas = asyncio.ensure_future(store.put("/cas", b"lost", expected_version=0))
            missing = asyncio.ensure_future(store.put("/absent", b"x", expected_version=0))
            puts_after = [asyncio.ensure_future(store.put(f"/batch/b{i:03d}", b"b")) for i in range(100)]
            won_cas = asyncio.ensure_future(store.put("/cas", b"v2", expected_version=1))
            await asyncio.sleep(0)  # let every task submit its operation
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert await asyncio.gather(*puts_before, *puts_after) == [0] * 200
        with pytest.raises(BadVersion, match="/cas: version 1, expected 0"):
            await lost_cas
        with pytest.raises(NoNode, match="/absent"):
            await missing
        assert await won_cas == 2
    finally:
        await store.close()
    reopened = await SqliteMetadataStore.open(path)
    try:
        children = await reopened.children("/batch")
        assert children == [f"a{i:03d}" for i in range(100)] + [f"b{i:03d}" for i in range(100)]
        assert await reopened.get("/cas") == Versioned(b"v2", 2)
        assert await reopened.get("/absent") is None
    finally:
        await reopened.close()

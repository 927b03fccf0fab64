"""What only SqliteMetadataStore does: opening a file, group commit with per-operation savepoints,
ephemeral nodes of a killed process deleted at the next open. The MetadataStore contract itself is
tested against both stores in test_metadata_contract.py."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from storage.api import BadVersion, NoNode, StorageError, Versioned
from storage.metadata.sqlite import SqliteMetadataStore

OWNER_CHILD = Path(__file__).with_name("metadata_owner_child.py")
ROOT = Path(__file__).resolve().parents[2]


async def test_open_of_an_unusable_path_raises_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot open metadata store"):
        await SqliteMetadataStore.open(tmp_path / "no such dir" / "metadata.db")


async def test_the_ephemeral_nodes_of_a_killed_process_are_deleted_at_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    owner = subprocess.Popen([sys.executable, str(OWNER_CHILD), str(path), "/owner"], stdout=subprocess.PIPE,
                             env=env, text=True)
    try:
        assert owner.stdout.readline() == "owner None\n"
        # Read the file directly: opening a second store would start a new session, ending the first.
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT path FROM ephemerals").fetchall() == [("/owner",)]
    finally:
        owner.kill()
        owner.wait()
    assert await _read_once(path, "/owner") is None


async def _read_once(path: Path, node: str) -> Versioned | None:
    store = await SqliteMetadataStore.open(path)
    try:
        assert store.session_id is None
        return await store.get(node)
    finally:
        await store.close()


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

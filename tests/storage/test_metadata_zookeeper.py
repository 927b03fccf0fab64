"""What only the ZooKeeper metadata store does, against a real private ZooKeeper (one for this module):
sessions (a client closed, a process killed, a session expired, a server stopped and restarted),
ZooKeeper's request-size limit, its stricter paths, and the server process itself."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from gateway.cluster.ports import free_port
from gateway.cluster.zookeeper import ZooKeeperServer
from storage.api import SessionState, StorageError, Versioned
from storage.metadata.open import open_metadata_store
from storage.metadata.zookeeper import MAX_VALUE_BYTES, ZooKeeperMetadataStore, parse_url

OWNER_CHILD = Path(__file__).with_name("metadata_owner_child.py")
ROOT = Path(__file__).resolve().parents[2]
_roots = itertools.count()

StoreOpener = Callable[..., Awaitable[ZooKeeperMetadataStore]]


async def until(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def until_read(store: ZooKeeperMetadataStore, path: str, expected: Versioned | None,
                     timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (found := await store.get(path)) != expected:
        assert time.monotonic() < deadline, f"{path} is {found}, expected {expected}"
        await asyncio.sleep(0.05)


@pytest.fixture
def url(zookeeper: ZooKeeperServer) -> str:
    return f"zk://{zookeeper.address}/zk{next(_roots)}"


@pytest.fixture
async def open_store(url: str) -> AsyncIterator[StoreOpener]:
    opened: list[ZooKeeperMetadataStore] = []

    async def open_one(**options: float) -> ZooKeeperMetadataStore:
        opened.append(await ZooKeeperMetadataStore.open(url, **options))
        return opened[-1]
    yield open_one
    for store in opened:
        await store.close()


def _expire(store: ZooKeeperMetadataStore, address: str) -> None:
    """Expire the store's session the way ZooKeeper allows from outside: a second client attaches to
    the same session (id and password), then closes it."""
    session_id, password = store._client.client_id
    intruder = KazooClient(hosts=address, client_id=(session_id, password))
    intruder.start(timeout=15)
    intruder.stop()
    intruder.close()


# --- URLs and paths -------------------------------------------------------------------------------


def test_urls_name_the_servers_and_the_root() -> None:
    assert parse_url("zk://a:2181,b:2182/gateway/prod") == ("a:2181,b:2182", "/gateway/prod")
    assert parse_url("zk://a:2181/gw/") == ("a:2181", "/gw")
    assert parse_url("zk://a:2181") == ("a:2181", "")
    for bad in ["a:2181/gw", "http://a:2181/gw", "zk:///gw", "zk://a:2181/gw//x", "zk://a:2181/gw?x=1"]:
        with pytest.raises(ValueError, match="bad"):
            parse_url(bad)


@pytest.mark.parametrize("path", ["/a/./b", "/a/..", "/a\x00b", "/tab\there", "/\ufff5"])
async def test_paths_zookeeper_cannot_store_are_refused(open_store: StoreOpener, path: str) -> None:
    store = await open_store()
    for operation in (store.create(path, b""), store.put(path, b""), store.get(path), store.delete(path)):
        with pytest.raises(ValueError, match="bad metadata path"):
            await operation
    with pytest.raises(ValueError, match="bad metadata path"):
        store.watch(path, print)


async def test_the_root_of_the_url_separates_two_stores(zookeeper: ZooKeeperServer, open_store: StoreOpener) -> None:
    store = await open_store()
    other = await open_metadata_store(f"zk://{zookeeper.address}/elsewhere{next(_roots)}")
    try:
        await store.put("/k", b"mine")
        assert await other.get("/k") is None
        assert await other.children("/") == []
        assert await other.next_id("ledger") == 0
    finally:
        await other.close()


async def test_open_without_a_reachable_server_raises_storage_error() -> None:
    started = time.monotonic()
    with pytest.raises(StorageError, match="cannot open metadata store"):
        await ZooKeeperMetadataStore.open(f"zk://127.0.0.1:{free_port()}/gw", connect_timeout_s=1.0)
    assert time.monotonic() - started < 10


# --- ZooKeeper's own rules ------------------------------------------------------------------------


async def test_values_up_to_the_limit_are_stored_and_larger_ones_refused_before_sending(open_store: StoreOpener) -> None:
    store = await open_store()
    path = "/big/" + "p" * 200
    largest = bytes(range(256)) * (MAX_VALUE_BYTES // 256) + b"x" * (MAX_VALUE_BYTES % 256)
    assert await store.put(path, largest) == 0
    assert await store.get(path) == Versioned(largest, 0)
    for write in (store.put(path, largest + b"!"), store.put(path, largest + b"!", expected_version=0),
                  store.create("/big/other", largest + b"!")):
        with pytest.raises(StorageError, match=f"exceeds the metadata store's limit of {MAX_VALUE_BYTES} bytes"):
            await write
    assert await store.get(path) == Versioned(largest, 0)
    assert await store.get("/big/other") is None


async def test_parents_are_created_with_their_children(open_store: StoreOpener) -> None:
    store = await open_store()
    assert await store.create("/a/b/c", b"leaf") == 0
    assert await store.children("/a") == ["b"]
    assert await store.get("/a/b") == Versioned(b"", 0)


async def test_a_node_with_children_is_not_deleted(open_store: StoreOpener) -> None:
    store = await open_store()
    await store.put("/parent", b"p")
    await store.put("/parent/child", b"c")
    with pytest.raises(StorageError, match="has children"):
        await store.delete("/parent")
    assert await store.get("/parent") == Versioned(b"p", 0)


async def test_an_ephemeral_node_cannot_have_children(open_store: StoreOpener) -> None:
    store = await open_store()
    await store.create("/owner", b"", ephemeral=True)
    with pytest.raises(StorageError, match="ephemeral"):
        await store.create("/owner/child", b"")


# --- sessions -------------------------------------------------------------------------------------


async def test_a_watch_sees_the_ephemeral_node_of_another_store_vanish_when_it_closes(open_store: StoreOpener) -> None:
    watcher, owner = await open_store(), await open_store()
    assert watcher.session_id != owner.session_id
    seen: list[str] = []
    watcher.watch("/bookies/b1", seen.append)
    await owner.create("/bookies/b1", b"rack-a", ephemeral=True)
    await until(lambda: seen == ["/bookies/b1"])
    await owner.close()
    # (a reconnection on a loaded machine fires every watch once more: count at least, not exactly)
    await until(lambda: len(seen) >= 2)
    assert set(seen) == {"/bookies/b1"}
    assert await watcher.get("/bookies/b1") is None


async def test_the_ephemeral_node_of_a_killed_process_vanishes_after_its_session_timeout(
        url: str, open_store: StoreOpener) -> None:
    watcher = await open_store()
    seen: list[str] = []
    watcher.watch("/owner", seen.append)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    owner = subprocess.Popen([sys.executable, str(OWNER_CHILD), url, "/owner"], stdout=subprocess.PIPE, env=env,
                             text=True)
    try:
        line = owner.stdout.readline()
        assert line.startswith("owner ") and line.strip() != "owner None"
        await until(lambda: seen == ["/owner"])
        assert await watcher.get("/owner") == Versioned(b"owner", 0)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    # The child's session timeout is 2 s: ZooKeeper expires it and deletes the node by itself.
    await until(lambda: seen == ["/owner"] * 2)
    assert await watcher.get("/owner") is None


async def test_the_next_run_of_a_killed_process_ends_its_session_and_its_ephemeral_nodes_at_once(
        url: str, open_store: StoreOpener, tmp_path: Path) -> None:
    """A process restarted after kill -9 on the same session file closes the session its previous run
    left open: the ephemeral node goes at once, not a session timeout (30 s here) later. A clean
    close removes the file."""
    session_file = tmp_path / "zookeeper-session"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    owner = subprocess.Popen([sys.executable, str(OWNER_CHILD), url, "/owner", str(session_file), "30"],
                             stdout=subprocess.PIPE, env=env, text=True)
    try:
        killed_session = int(owner.stdout.readline().split()[1])
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert json.loads(session_file.read_text())["session"] == killed_session
    assert session_file.stat().st_mode & 0o077 == 0      # its password closes the session: owner only
    watcher = await open_store()
    assert await watcher.get("/owner") == Versioned(b"owner", 0)    # the killed run's session lives on

    restarted = await ZooKeeperMetadataStore.open(url, session_timeout_s=30.0, session_file=session_file)
    assert await watcher.get("/owner", latest=True) is None
    assert json.loads(session_file.read_text())["session"] == restarted.session_id != killed_session
    await restarted.close()
    assert not session_file.exists()


async def test_an_expired_session_reports_lost_then_connected_and_every_watch_fires(
        zookeeper: ZooKeeperServer, open_store: StoreOpener) -> None:
    store, other = await open_store(), await open_store()
    states: list[SessionState] = []
    sessions: list[int | None] = []
    store.on_session_event(lambda state: (states.append(state), sessions.append(store.session_id)))
    seen: list[str] = []
    store.watch("/config", seen.append)
    await store.create("/config", b"v0")
    await store.create("/owner", b"me", ephemeral=True)
    seen.clear()
    old_session = store.session_id

    await asyncio.to_thread(_expire, store, zookeeper.address)
    await until(lambda: SessionState.LOST in states and states[-1] is SessionState.CONNECTED)
    assert states.index(SessionState.LOST) < len(states) - 1
    assert set(states) <= {SessionState.SUSPENDED, SessionState.LOST, SessionState.CONNECTED}
    assert store.session_id not in (None, old_session)
    assert sessions[states.index(SessionState.LOST)] is None  # no session between LOST and CONNECTED
    # The watch fired once for the new session, so the watcher re-reads what it may have missed.
    assert seen == ["/config"]
    # The ephemeral node went with the old session and was not recreated behind its owner's back.
    await until_read(other, "/owner", None)
    assert await store.get("/owner") is None
    assert await store.get("/config") == Versioned(b"v0", 0)
    # The watch is armed again in the new session: a change by another store is seen.
    await other.put("/config", b"v1")
    await until(lambda: seen == ["/config", "/config"])


async def test_a_stopped_server_suspends_the_session_and_a_restart_resumes_it(
        zookeeper: ZooKeeperServer, open_store: StoreOpener) -> None:
    """ZooKeeper keeps sessions across its restart, so the same session resumes, its ephemeral node
    included. A JVM that takes longer than the session timeout to serve again (a loaded machine)
    expires it instead; the store must then report LOST and go on in a new session without the
    node. Either way: nothing written while the server is down is reported as done, durable data
    and counters go on."""
    store = await open_store(session_timeout_s=50.0, request_timeout_s=1.0)
    await store.put("/durable", b"kept")
    await store.create("/owner", b"me", ephemeral=True)
    session = store.session_id
    ids_before = [await store.next_id("ledger") for _ in range(3)]
    states: list[SessionState] = []
    store.on_session_event(states.append)
    seen: list[str] = []
    store.watch("/durable", seen.append)

    await asyncio.to_thread(zookeeper.stop)
    try:
        await until(lambda: states == [SessionState.SUSPENDED])
        with pytest.raises(StorageError):  # refused or timed out, never a silent success
            await store.put("/durable", b"while down")
    finally:
        await asyncio.to_thread(zookeeper.start)
    await until(lambda: states[-1:] == [SessionState.CONNECTED], timeout_s=60.0)
    if states == [SessionState.SUSPENDED, SessionState.CONNECTED]:
        assert store.session_id == session
        assert await store.get("/owner") == Versioned(b"me", 0)
    else:
        print(f"the restart outlasted the session: {[state.value for state in states]}")
        assert states == [SessionState.SUSPENDED, SessionState.LOST, SessionState.CONNECTED]
        assert store.session_id not in (None, session)
        assert await store.get("/owner") is None
    assert seen in (["/durable"], ["/durable", "/durable"])   # once for the reconnection (+ the late put)
    assert await store.get("/durable") in (Versioned(b"kept", 0), Versioned(b"while down", 1))
    assert await store.next_id("ledger") > max(ids_before)


async def test_a_cancelled_session_callback_is_not_called(zookeeper: ZooKeeperServer, open_store: StoreOpener) -> None:
    store = await open_store()
    kept: list[SessionState] = []
    cancelled: list[SessionState] = []
    store.on_session_event(kept.append)
    store.on_session_event(cancelled.append)()
    await asyncio.to_thread(_expire, store, zookeeper.address)
    await until(lambda: kept[-1:] == [SessionState.CONNECTED] and SessionState.LOST in kept)
    assert cancelled == []


# --- the server process ---------------------------------------------------------------------------


def test_the_server_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    script = ("import sys, time\n"
              "from pathlib import Path\n"
              "from gateway.cluster.zookeeper import ZooKeeperServer\n"
              "server = ZooKeeperServer(Path(sys.argv[1]))\n"
              "server.start()\n"
              "print(server.pid, flush=True)\n"
              "time.sleep(600)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, env=env, text=True)
    try:
        server_pid = int(parent.stdout.readline())
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 30
    while _alive(server_pid):
        assert time.monotonic() < deadline, "ZooKeeper outlived the process that started it"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie waiting for init has died


def test_the_server_outlives_the_thread_that_started_it(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path)
    starter = threading.Thread(target=server.start)
    starter.start()
    starter.join()
    try:
        assert server.pid is not None and server.serving()
    finally:
        server.stop()
    assert not server.serving()

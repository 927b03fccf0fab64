"""The lazy filesystem keeps exactly what was fsynced: file data, and directory entries once their
directory is fsynced. A write that survives a kill -9 of its writer is still lost at power off."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.faults.harness.lazyfs import LazyFsMount, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"lazy filesystem: {unavailable_reason()}")


@pytest.fixture
def lazy(tmp_path) -> Iterator[LazyFsMount]:
    with LazyFsMount(tmp_path / "backing", tmp_path / "mnt") as mount:
        yield mount


def write(path: Path, data: bytes, *, sync: bool, offset: int | None = None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if offset is None else 0), 0o644)
    try:
        if offset is None:
            os.write(fd, data)
        else:
            os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_unsynced_append_is_lost_and_synced_one_survives(lazy) -> None:
    log = lazy.mountpoint / "journal.log"
    write(log, b"synced|", sync=True)
    sync_dir(lazy.mountpoint)
    write(log, b"not synced", sync=False)
    assert log.read_bytes() == b"synced|not synced"  # visible while the power is on
    assert lazy.status() == {"dirty_files": 1, "unsynced_entries": 0}

    report = lazy.power_off()
    assert (lazy.backing / "journal.log").read_bytes() == b"synced|"
    assert report == {"files_reverted": 1, "unsynced_bytes": len(b"not synced"), "entries_undone": 0}


def test_unsynced_overwrite_inside_the_file_is_undone(lazy) -> None:
    data = lazy.mountpoint / "data"
    write(data, b"A" * 10_000, sync=True)
    sync_dir(lazy.mountpoint)
    write(data, b"B" * 100, sync=False, offset=5000)
    os.truncate(data, 6000)
    lazy.power_off()
    assert (lazy.backing / "data").read_bytes() == b"A" * 10_000


def test_preallocated_space_keeps_what_was_synced_into_it_and_loses_the_rest(lazy) -> None:
    segment = lazy.mountpoint / "segment"
    fd = os.open(segment, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, 3 * 4096)     # reserved and fsynced: durable zeros
        os.fsync(fd)
        sync_dir(lazy.mountpoint)
        os.pwrite(fd, b"synced", 0)
        os.fsync(fd)
        os.pwrite(fd, b"lost", 4096)             # into reserved space, never fsynced
        os.posix_fallocate(fd, 3 * 4096, 4096)   # an extension, never fsynced
    finally:
        os.close(fd)
    assert segment.stat().st_size == 4 * 4096
    lazy.power_off()
    kept = (lazy.backing / "segment").read_bytes()
    assert kept == b"synced" + bytes(3 * 4096 - len(b"synced"))


def test_new_file_needs_its_directory_fsynced(lazy) -> None:
    (lazy.mountpoint / "sub").mkdir()
    sync_dir(lazy.mountpoint)
    write(lazy.mountpoint / "sub" / "kept", b"k", sync=True)
    sync_dir(lazy.mountpoint / "sub")
    write(lazy.mountpoint / "sub" / "orphan", b"o", sync=True)  # data synced, entry not
    (lazy.mountpoint / "newdir").mkdir()
    write(lazy.mountpoint / "newdir" / "inside", b"i", sync=True)
    sync_dir(lazy.mountpoint / "newdir")                       # but newdir itself never was
    lazy.power_off()
    assert sorted(os.listdir(lazy.backing)) == ["sub"]
    assert os.listdir(lazy.backing / "sub") == ["kept"]


def test_unsynced_rename_and_unlink_are_undone(lazy) -> None:
    for name, content in (("old", b"old"), ("target", b"target"), ("doomed", b"doomed")):
        write(lazy.mountpoint / name, content, sync=True)
    sync_dir(lazy.mountpoint)
    os.replace(lazy.mountpoint / "old", lazy.mountpoint / "target")
    os.unlink(lazy.mountpoint / "doomed")
    assert sorted(os.listdir(lazy.mountpoint)) == ["target"]
    assert lazy.power_off()["entries_undone"] == 2
    assert {name: (lazy.backing / name).read_bytes() for name in os.listdir(lazy.backing)} == {
        "old": b"old", "target": b"target", "doomed": b"doomed"}


def test_synced_rename_replaces_for_good(lazy) -> None:
    write(lazy.mountpoint / "COOKIE.tmp", b"new", sync=True)
    write(lazy.mountpoint / "COOKIE", b"old", sync=True)
    sync_dir(lazy.mountpoint)
    os.replace(lazy.mountpoint / "COOKIE.tmp", lazy.mountpoint / "COOKIE")
    sync_dir(lazy.mountpoint)
    lazy.power_off()
    assert os.listdir(lazy.backing) == ["COOKIE"]
    assert (lazy.backing / "COOKIE").read_bytes() == b"new"


def test_kill9_keeps_an_unsynced_write_that_power_off_loses(lazy) -> None:
    # A writer that "acknowledges" before fsync: kill -9 cannot tell, the power loss can.
    path = lazy.mountpoint / "acked"
    write(path, b"", sync=True)
    sync_dir(lazy.mountpoint)
    writer = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        f"fd = os.open({str(path)!r}, os.O_WRONLY | os.O_APPEND)\n"
        "os.write(fd, b'acknowledged without fsync')\n"
        "print('acked', flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline() == "acked\n"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert path.read_bytes() == b"acknowledged without fsync"  # survived the crash
    lazy.power_off()
    assert (lazy.backing / "acked").read_bytes() == b""          # not the power loss
    writer.stdout.close()


def test_operations_fail_after_power_off(tmp_path) -> None:
    mount = LazyFsMount(tmp_path / "backing", tmp_path / "mnt").start()
    fd = os.open(mount.mountpoint / "open-file", os.O_WRONLY | os.O_CREAT)
    try:
        mount.power_off()
        with pytest.raises(OSError):
            os.write(fd, b"x")
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    assert not os.path.ismount(mount.mountpoint)
    assert os.listdir(mount.backing) == []  # its creation was never made durable


def test_torn_power_off_keeps_a_prefix_of_unsynced_appends_and_some_old_pages(lazy) -> None:
    log, pages = lazy.mountpoint / "log", lazy.mountpoint / "pages"
    write(log, b"durable|", sync=True)
    write(pages, b"o" * (8 * 4096), sync=True)
    sync_dir(lazy.mountpoint)
    write(log, bytes(range(256)) * 40, sync=False)
    for page in range(8):
        write(pages, b"n" * 4096, sync=False, offset=page * 4096)
    lazy.power_off(torn_seed=7)
    kept = (lazy.backing / "log").read_bytes()
    assert kept.startswith(b"durable|") and (bytes(range(256)) * 40).startswith(kept[len(b"durable|"):])
    content = (lazy.backing / "pages").read_bytes()
    assert len(content) == 8 * 4096
    old_pages = [content[i * 4096:(i + 1) * 4096] == b"o" * 4096 for i in range(8)]
    assert all(content[i * 4096:(i + 1) * 4096] == (b"o" if old else b"n") * 4096 for i, old in enumerate(old_pages))
    assert 0 < sum(old_pages) < 8  # seed 7: some pages written back, some not

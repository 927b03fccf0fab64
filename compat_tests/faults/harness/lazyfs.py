"""A FUSE filesystem that loses what was not fsynced when "the power goes" (after LazyFS).

`kill -9` cannot catch a missing fsync: the kernel still writes the page cache out. This layer can.
It passes every operation through to a backing directory, and remembers in memory how to undo what
is not durable yet:
- file data: the size the file had when it was last fsynced, and the old content of every page
  overwritten since (appends need nothing: truncating undoes them);
- directory entries (create, mkdir, unlink, rmdir, rename): durable only once their directory is
  fsynced, as POSIX promises (a file fsynced in a directory that never was is lost with it). An
  unlinked or overwritten file is kept as a hard link in a stash directory until then.
`fsync`/`fdatasync` of a file makes its data durable; `fsync` of a directory its entries.

"Power off" (`LazyFsMount.power_off()`): every later operation fails with EIO, the backing directory
is put back to its durable state, and the filesystem unmounts. `power_off(torn_seed=N)` keeps a
random part of the unsynced data instead (a prefix of each file's appends, half its overwritten
pages), as a disk that wrote back part of its cache (LazyFS's "torn" faults). A process can then start again on the
backing directory, as on a disk after a power loss. Kill the programs using the mount first.

A slow disk (`LazyFsMount.slow_fsync(ms)`): every later fsync takes that much longer, without
holding up the other operations; `slow_fsync(0)` makes it fast again.

Runs as its own process (`python -m compat_tests.faults.harness.lazyfs BACKING MOUNT CONTROL`;
signals do not reach Python while libfuse's loop runs), controlled over a Unix socket. Needs
/dev/fuse, `fusermount3` (Debian fuse3) and `mfusepy`.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PAGE = 4096
START_DEADLINE_S = 20.0


def unavailable_reason() -> str | None:
    """Why a lazy filesystem cannot be mounted here, or None if it can."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy unusable: {exc}"
    return None


# --- the filesystem (runs in the child process) --------------------------------------------------


@dataclass
class _FileUndo:
    fd: int             # the inode, whatever it is renamed or unlinked to meanwhile
    durable_size: int
    pages: dict[int, bytes] = field(default_factory=dict)  # page index -> content when last fsynced


@dataclass
class _EntryUndo:
    kind: str                   # create, mkdir, unlink, rmdir, rename
    path: str                   # backing path (rename: the new one)
    dirs: set[str]              # directories whose fsync makes it durable
    old_path: str | None = None  # rename: where it came from
    stash: str | None = None     # unlink / rename over a file: the displaced file, kept here


def _operations_class():
    from mfusepy import FuseOSError, Operations

    class LazyOperations(Operations):
        use_ns = True

        def __init__(self, backing: str, stash: str) -> None:
            self.backing = backing
            self.stash = stash
            self._mutex = threading.RLock()  # not "lock": that name is a FUSE operation
            self.powered_off = False
            self.files: dict[int, _FileUndo] = {}    # inode -> how to undo its unsynced data
            self.entries: list[_EntryUndo] = []      # unsynced directory operations, oldest first
            self._stash_ids = iter(range(1 << 62))
            self.fsync_delay_s = 0.0                 # a slow disk: every fsync takes at least this long

        def _real(self, path: str) -> str:
            return self.backing + path

        def _guard(self) -> None:
            if self.powered_off:
                raise FuseOSError(errno.EIO)

        # --- undo bookkeeping ---

        def _before_data_change(self, fd: int, start: int, end: int) -> None:
            """Remember the durable content of [start, end) before it changes."""
            ino = os.fstat(fd).st_ino
            undo = self.files.get(ino)
            if undo is None:
                undo = self.files[ino] = _FileUndo(os.dup(fd), os.fstat(fd).st_size)
            stop = min(end, undo.durable_size)  # past the durable size, truncating undoes it
            for page in range(start // PAGE, -(-stop // PAGE) if start < stop else 0):
                if page not in undo.pages:
                    undo.pages[page] = os.pread(undo.fd, PAGE, page * PAGE)

        def _stash(self, real: str) -> str:
            stashed = os.path.join(self.stash, str(next(self._stash_ids)))
            os.link(real, stashed)
            return stashed

        def power_off(self, torn_seed: int | None = None) -> dict[str, int]:
            """Put the backing directory back to what is durable. With `torn_seed`, as a disk that
            wrote back part of its cache before the power went: each unsynced file keeps a random
            prefix of what was appended and a random half of its overwritten pages."""
            torn = random.Random(torn_seed) if torn_seed is not None else None
            with self._mutex:
                self.powered_off = True
                dropped = 0
                for undo in self.files.values():
                    size = os.fstat(undo.fd).st_size
                    keep = torn.randint(0, max(0, size - undo.durable_size)) if torn else 0
                    dropped += max(0, size - undo.durable_size) - keep + len(undo.pages) * PAGE
                    os.ftruncate(undo.fd, undo.durable_size + keep)
                    for page, content in undo.pages.items():
                        if torn is None or torn.random() < 0.5:
                            os.pwrite(undo.fd, content, page * PAGE)
                    os.close(undo.fd)
                for entry in reversed(self.entries):
                    _undo_entry(entry)
                report = {"files_reverted": len(self.files), "unsynced_bytes": dropped,
                          "entries_undone": len(self.entries)}
                self.files.clear()
                self.entries.clear()
                return report

        def status(self) -> dict[str, int]:
            with self._mutex:
                return {"dirty_files": len(self.files), "unsynced_entries": len(self.entries)}

        # --- files ---

        def getattr(self, path, fh=None):
            with self._mutex:
                self._guard()
                st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
                return {key: getattr(st, key) for key in (
                    "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns", "st_mtime_ns",
                    "st_ctime_ns", "st_ino")} | {"st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns,
                                                 "st_ctime": st.st_ctime_ns}

        def open(self, path, flags):
            with self._mutex:
                self._guard()
                real = self._real(path)
                if flags & os.O_TRUNC:
                    fd = os.open(real, os.O_RDWR)
                    self._before_data_change(fd, 0, os.fstat(fd).st_size)
                    os.close(fd)
                # Read access too for writers: the undo records read what a write replaces.
                access = os.O_RDONLY if flags & os.O_ACCMODE == os.O_RDONLY else os.O_RDWR
                return os.open(real, access)

        def create(self, path, mode, fi=None):
            with self._mutex:
                self._guard()
                real = self._real(path)
                existed = os.path.lexists(real)
                fd = os.open(real, os.O_RDWR | os.O_CREAT, mode)
                if not existed:
                    self.entries.append(_EntryUndo("create", real, {os.path.dirname(real)}))
                return fd

        def read(self, path, size, offset, fh):
            with self._mutex:
                self._guard()
                return os.pread(fh, size, offset)

        def write(self, path, data, offset, fh):
            with self._mutex:
                self._guard()
                self._before_data_change(fh, offset, offset + len(data))
                return os.pwrite(fh, data, offset)

        def truncate(self, path, length, fh=None):
            with self._mutex:
                self._guard()
                fd = fh if fh is not None else os.open(self._real(path), os.O_RDWR)
                try:
                    self._before_data_change(fd, length, max(length, os.fstat(fd).st_size))
                    os.ftruncate(fd, length)
                finally:
                    if fh is None:
                        os.close(fd)
                return 0

        def fallocate(self, path, mode, offset, length, fh):
            """Mode 0 only (blocks reserved, the file extended over them), as the journal asks: an
            extension not yet fsynced is cut off at power off like an unsynced append, and writes
            into reserved space fsynced before are overwrites, undone page by page."""
            with self._mutex:
                self._guard()
                if mode != 0:
                    raise FuseOSError(errno.EOPNOTSUPP)
                self._before_data_change(fh, offset, offset + length)
                os.posix_fallocate(fh, offset, length)
                return 0

        def fsync(self, path, datasync, fh):
            if self.fsync_delay_s:
                time.sleep(self.fsync_delay_s)   # outside the mutex: other operations go on meanwhile
            with self._mutex:
                self._guard()
                undo = self.files.pop(os.fstat(fh).st_ino, None)
                if undo is not None:
                    os.close(undo.fd)
                return 0

        def flush(self, path, fh):
            return 0

        def release(self, path, fh):
            os.close(fh)
            return 0

        # --- directories ---

        def opendir(self, path):
            with self._mutex:
                self._guard()
                return 0

        def readdir(self, path, fh):
            with self._mutex:
                self._guard()
                return [".", "..", *os.listdir(self._real(path))]

        def fsyncdir(self, path, datasync, fh):
            with self._mutex:
                self._guard()
                real = self._real(path).rstrip("/") or "/"
                kept = []
                for entry in self.entries:
                    entry.dirs.discard(real)
                    if entry.dirs:
                        kept.append(entry)
                    elif entry.stash is not None:
                        os.unlink(entry.stash)  # the displaced file is gone for good now
                self.entries = kept
                return 0

        def mkdir(self, path, mode):
            with self._mutex:
                self._guard()
                real = self._real(path)
                os.mkdir(real, mode)
                self.entries.append(_EntryUndo("mkdir", real, {os.path.dirname(real)}))
                return 0

        def rmdir(self, path):
            with self._mutex:
                self._guard()
                real = self._real(path)
                os.rmdir(real)
                self.entries.append(_EntryUndo("rmdir", real, {os.path.dirname(real)}))
                return 0

        def unlink(self, path):
            with self._mutex:
                self._guard()
                real = self._real(path)
                stashed = self._stash(real)
                os.unlink(real)
                self.entries.append(_EntryUndo("unlink", real, {os.path.dirname(real)}, stash=stashed))
                return 0

        def rename(self, old, new):
            with self._mutex:
                self._guard()
                real_old, real_new = self._real(old), self._real(new)
                stashed = self._stash(real_new) if os.path.isfile(real_new) else None
                os.rename(real_old, real_new)
                self.entries.append(_EntryUndo("rename", real_new, {os.path.dirname(real_old),
                                                                     os.path.dirname(real_new)},
                                               old_path=real_old, stash=stashed))
                return 0

        # --- pass-through metadata (not modelled: the programs under test do not depend on it) ---

        def statfs(self, path):
            st = os.statvfs(self._real(path))
            return {key: getattr(st, key) for key in (
                "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                "f_frsize", "f_namemax")}

        def chmod(self, path, mode):
            with self._mutex:
                self._guard()
                os.chmod(self._real(path), mode)
                return 0

        def utimens(self, path, times=None):
            with self._mutex:
                self._guard()
                os.utime(self._real(path), ns=times)
                return 0

        def access(self, path, amode):
            with self._mutex:
                self._guard()
                if not os.access(self._real(path), amode):
                    raise FuseOSError(errno.EACCES)
                return 0

    return LazyOperations


def _undo_entry(entry: _EntryUndo) -> None:
    """Put one directory operation back; best effort, newest first, after file data was reverted."""
    try:
        if entry.kind == "create":
            os.unlink(entry.path)
        elif entry.kind == "mkdir":
            shutil.rmtree(entry.path)
        elif entry.kind == "rmdir":
            os.mkdir(entry.path)
        elif entry.kind == "unlink":
            os.rename(entry.stash, entry.path)
        elif entry.kind == "rename":
            os.rename(entry.path, entry.old_path)
            if entry.stash is not None:
                os.rename(entry.stash, entry.path)
    except FileNotFoundError:
        pass  # already undone along with an enclosing directory


def _serve_control(operations, control: str, mountpoint: str) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(control)
    server.listen()
    while True:
        connection, _ = server.accept()
        with connection:
            command = connection.makefile().readline().strip()
            if command == "status":
                connection.sendall(json.dumps(operations.status()).encode() + b"\n")
            elif command.startswith("slow-fsync "):   # "slow-fsync <ms>"; 0 makes it fast again
                operations.fsync_delay_s = int(command.split()[1]) / 1000
                connection.sendall(json.dumps({"fsync_delay_ms": int(command.split()[1])}).encode() + b"\n")
            elif command.startswith("power-off"):  # "power-off" or "power-off torn <seed>"
                words = command.split()
                report = operations.power_off(int(words[2]) if len(words) == 3 else None)
                connection.sendall(json.dumps(report).encode() + b"\n")
                subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False)
                os._exit(0)  # files still open on the mount must not keep the filesystem alive


def main(backing: str, mountpoint: str, control: str) -> None:
    from mfusepy import FUSE

    backing = os.path.realpath(backing)
    stash = backing.rstrip("/") + ".unsynced"
    os.makedirs(stash, exist_ok=True)
    operations = _operations_class()(backing, stash)
    threading.Thread(target=_serve_control, args=(operations, control, mountpoint), daemon=True).start()
    FUSE(operations, mountpoint, foreground=True, nothreads=False, default_permissions=True)


# --- the test side --------------------------------------------------------------------------------


class LazyFsMount:
    """Mount `backing` at `mountpoint` through the lazy layer (a child process)."""

    def __init__(self, backing: Path, mountpoint: Path) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.control = str(mountpoint.parent / f".{mountpoint.name}.control")
        self.process: subprocess.Popen | None = None
        self.log_path = mountpoint.parent / f"{mountpoint.name}.lazyfs.log"

    def start(self) -> "LazyFsMount":
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "compat_tests.faults.harness.lazyfs", str(self.backing), str(self.mountpoint),
                 self.control], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_DEADLINE_S
        while not (os.path.ismount(self.mountpoint) and os.path.exists(self.control)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"lazy filesystem did not mount: {self.log_path.read_text()}")
            time.sleep(0.05)
        return self

    def _command(self, command: str) -> dict[str, int]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(60)
            sock.connect(self.control)
            sock.sendall(command.encode() + b"\n")
            return json.loads(sock.makefile().readline())

    def status(self) -> dict[str, int]:
        return self._command("status")

    def slow_fsync(self, delay_ms: int) -> None:
        """Make every later fsync take `delay_ms` more (a slow disk); 0 makes it fast again."""
        self._command(f"slow-fsync {delay_ms}")

    def power_off(self, torn_seed: int | None = None) -> dict[str, int]:
        """Drop everything not fsynced and unmount; returns what was dropped. With `torn_seed`,
        part of the unsynced data survives, chosen at random (a torn write-back)."""
        report = self._command("power-off" if torn_seed is None else f"power-off torn {torn_seed}")
        self._wait_unmounted()
        return report

    def close(self) -> None:
        """Unmount without dropping anything (teardown)."""
        if self.process is not None and self.process.poll() is None:
            subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self._wait_unmounted()

    def _wait_unmounted(self) -> None:
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if os.path.ismount(self.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], check=False)
        if os.path.exists(self.control):
            os.unlink(self.control)

    def __enter__(self) -> "LazyFsMount":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])

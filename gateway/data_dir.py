"""One process per data directory.

A second `gateway serve` or `gateway bookie` started on a directory in use (another port, a
restart while the old process is still stopping) would write the same journal, SQLite file and
ZooKeeper session file as the first, and corrupt them. As Kafka does with the `.lock` file of each
log directory, the process holds an exclusive flock on `<data dir>/.lock` for its whole life. The
kernel drops it when the process ends, however it ends, so a crash leaves nothing to clean up. The
file holds the holder's pid, for the error message only.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from pathlib import Path

log = logging.getLogger("gateway")

LOCK_FILE = ".lock"
SESSION_FILE = "zookeeper-session"    # a cluster process's session, for its next run to end (storage/metadata/session_file.py)


class DataDirInUse(Exception):
    pass


def lock_data_dir(directory: Path) -> int | None:
    """Lock `directory` (created if missing) for this process; the open descriptor holds the lock
    (None where the file system has no locks: then nothing is checked). Raises DataDirInUse."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise DataDirInUse(f"data directory {directory} is in use by another process"
                           + (f" (pid {holder})" if holder.isdigit() else "")) from None
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        log.warning("cannot lock data directory %s (%s): nothing stops a second process using it",
                    directory, exc.strerror)
        return None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd

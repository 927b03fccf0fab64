"""A full disk: a small tmpfs as a process's data directory, filled up and freed from the test.

tmpfs ignores fsync, so use it for ENOSPC only (power loss is lazyfs.py's). Needs root (mount).
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

_FILLER = ".filler"


def unavailable_reason(probe_dir: Path) -> str | None:
    """Why a tmpfs cannot be mounted here, or None if it can (tries one)."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    disk = SmallDisk(probe_dir, size_mib=1)
    try:
        disk.mount()
    except subprocess.CalledProcessError as exc:
        return f"mount -t tmpfs failed: {exc.stderr.strip()}"
    disk.close()
    return None


class SmallDisk:
    def __init__(self, path: Path, size_mib: int) -> None:
        self.path = path
        self.size_mib = size_mib

    def mount(self) -> "SmallDisk":
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mib}m", "tmpfs", str(self.path)],
                       check=True, capture_output=True, text=True)
        return self

    def free_bytes(self) -> int:
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize

    def fill(self, leave_bytes: int = 0) -> int:
        """Take all free space but `leave_bytes` with a filler file; returns its size."""
        filler = self.path / _FILLER
        chunk = b"\0" * (1 << 20)
        with filler.open("ab", buffering=0) as out:
            try:
                while (free := self.free_bytes() - leave_bytes) > 0:
                    out.write(chunk[:min(len(chunk), free)])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
        return filler.stat().st_size

    def free(self) -> None:
        (self.path / _FILLER).unlink(missing_ok=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)

    def __enter__(self) -> "SmallDisk":
        return self.mount()

    def __exit__(self, *exc_info) -> None:
        self.close()

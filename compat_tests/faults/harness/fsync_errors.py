"""Failed fsyncs, switched on and off in a running process with libfiu (Debian fiu-utils).

The process must run under `fiu-run -x` (`PREFIX` before its command; fiu-run execs it, so the pid
is the program's own). `FsyncErrors(pid).enable()` makes every later fsync and fdatasync of that
process fail with EIO until `disable()`; the write itself has succeeded, as when a disk fails.
"""

from __future__ import annotations

import errno
import shutil
import subprocess

PREFIX = ("fiu-run", "-x")
_POINTS = ("posix/io/sync/fsync", "posix/io/sync/fdatasync")


def unavailable_reason() -> str | None:
    if shutil.which("fiu-run") is None or shutil.which("fiu-ctrl") is None:
        return "no fiu-run/fiu-ctrl (apt-get install fiu-utils)"
    return None


class FsyncErrors:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def _control(self, *commands: str) -> None:
        arguments = [argument for command in commands for argument in ("-c", command)]
        subprocess.run(["fiu-ctrl", *arguments, str(self.pid)], check=True, capture_output=True, text=True,
                       timeout=30)

    def enable(self) -> None:
        self._control(*(f"enable name={point},failinfo={errno.EIO}" for point in _POINTS))

    def disable(self) -> None:
        self._control(*(f"disable name={point}" for point in _POINTS))

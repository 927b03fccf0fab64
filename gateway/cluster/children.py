"""Child processes tied to this one: they get SIGKILL when it dies, even by SIGKILL (Linux's
parent-death signal), so a crashed launcher or test run leaves nothing behind.

The signal follows the thread that forked, so every child is forked by one thread that lives as long
as the process, whichever thread asks for it.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor

_PR_SET_PDEATHSIG = 1
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="child-spawner")


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(command: list[str], **popen_kwargs) -> subprocess.Popen:
    return _SPAWNER.submit(subprocess.Popen, command, preexec_fn=_die_with_parent, **popen_kwargs).result()

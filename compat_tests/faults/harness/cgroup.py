"""Cut one process of a cluster off from some ports, leaving every other process's traffic alone.

The process runs in a cgroup v2 group of the test's own; iptables' `cgroup --path` match drops the
packets its sockets send to the ports cut. The kernel tags a socket with the group of the process
that made it (an accepted socket with its listener's), so a process must start inside the group
(`wrap` its command) for its connections to be covered. Only outgoing packets are dropped: the peer
never receives a request or an acknowledgement, so both sides see a silent partition. Needs root
and cgroup v2 (mounted at /sys/fs/cgroup or /sys/fs/cgroup/unified).

    group = Cgroup().create()
    process.command = group.wrap(process.command)   # then start it
    group.cut([port, ...])
    group.heal()
    group.delete()                                  # once its processes are gone
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from pathlib import Path

_names = itertools.count()


def _cgroup2_root() -> Path | None:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def unavailable_reason() -> str | None:
    """Why a process cannot be cut off here, or None if it can (makes and removes a rule to know)."""
    if shutil.which("iptables") is None:
        return "no iptables (apt-get install iptables)"
    if _cgroup2_root() is None:
        return "no cgroup v2 hierarchy mounted"
    group = Cgroup()
    try:
        group.create()
        group.cut([9])
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"cannot make a cgroup with an iptables rule: {getattr(exc, 'stderr', None) or exc}"
    finally:
        group.delete()
    return None


class Cgroup:
    def __init__(self) -> None:
        self.name = f"gwfault-{os.getpid()}-{next(_names)}"
        root = _cgroup2_root()
        self.path = (root or Path("/sys/fs/cgroup")) / self.name
        self._rules: list[list[str]] = []

    def create(self) -> "Cgroup":
        self.path.mkdir(exist_ok=True)
        return self

    def wrap(self, command: list[str]) -> list[str]:
        """`command` run inside the group (the shell moves itself in, then execs it: same pid)."""
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.path), *command]

    def cut(self, ports: list[int]) -> None:
        """Drop every TCP packet the group's sockets send to these ports."""
        rule = ["OUTPUT", "-m", "cgroup", "--path", self.name, "-p", "tcp", "-m", "multiport",
                "--dports", ",".join(map(str, ports)), "-j", "DROP"]
        subprocess.run(["iptables", "-I", *rule], check=True, capture_output=True, text=True, timeout=30)
        self._rules.append(rule)

    def heal(self) -> None:
        while self._rules:
            rule = self._rules.pop()
            subprocess.run(["iptables", "-D", *rule], check=False, capture_output=True, timeout=30)

    def delete(self) -> None:
        self.heal()
        try:
            self.path.rmdir()
        except FileNotFoundError:
            pass

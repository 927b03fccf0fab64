"""Network partitions with iptables inside a network namespace of the test's own.

The host's rules are never touched: the namespace has its own loopback (127.0.0.0/8, so processes
can each take an address such as 127.0.0.11) and its own iptables tables, and `delete()` removes it
all. Processes start inside it with `prefix` before their command (`ip netns exec` execs it, so the
pid is the program's own); threads of the test enter it with `enter()` (a network namespace is
per thread, and threads they start, librdkafka's included, inherit it).

    ns = NetNamespace().create()
    ns.cut(port)      # drop every packet to and from a port (both directions of each connection)
    ns.heal()         # remove every rule
    ns.delete()

`tc netem` is not available on this kernel: delays and half-open links are the TCP proxy's.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
_names = itertools.count()
T = TypeVar("T")


def unavailable_reason() -> str | None:
    """Why a namespace with iptables cannot be made here, or None if it can (makes one)."""
    for tool, package in (("ip", "iproute2"), ("iptables", "iptables")):
        if shutil.which(tool) is None:
            return f"no {tool} (apt-get install {package})"
    namespace = NetNamespace()
    try:
        namespace.create()
        namespace.iptables("-L", "INPUT")
    except subprocess.CalledProcessError as exc:
        return f"{' '.join(exc.cmd)} failed: {(exc.stderr or '').strip()}"
    finally:
        namespace.delete()
    return None


class NetNamespace:
    def __init__(self) -> None:
        self.name = f"gwfault-{os.getpid()}-{next(_names)}"

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def _run(self, *command: str) -> None:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=30)

    def create(self) -> "NetNamespace":
        self._run("ip", "netns", "add", self.name)
        self._run("ip", "-n", self.name, "link", "set", "lo", "up")
        return self

    def delete(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)

    def iptables(self, *arguments: str) -> None:
        self._run(*self.prefix, "iptables", *arguments)

    def cut(self, port: int) -> None:
        for match in ("--dport", "--sport"):
            self.iptables("-I", "INPUT", "-p", "tcp", match, str(port), "-j", "DROP")

    def heal(self) -> None:
        self.iptables("-F", "INPUT")

    def enter(self) -> None:
        """Move the calling thread into the namespace."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                error = ctypes.get_errno()
                raise OSError(error, f"setns({self.name}): {os.strerror(error)}")
        finally:
            os.close(fd)

    def call(self, function: Callable[[], T]) -> T:
        """Run `function` in a thread inside the namespace and return its result."""
        outcome: dict[str, object] = {}

        def inside() -> None:
            try:
                self.enter()
                outcome["result"] = function()
            except BaseException as exc:  # handed to the caller
                outcome["error"] = exc

        thread = threading.Thread(target=inside, name=f"in-{self.name}")
        thread.start()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]

    def __enter__(self) -> "NetNamespace":
        return self.create()

    def __exit__(self, *exc_info) -> None:
        self.delete()

"""A ZooKeeper session left open by a killed process, ended by the process's next run.

After kill -9 a process's session lives on until ZooKeeper expires it, a session timeout later, and
with it the ephemeral nodes that say what the process owned: a broker's bundle leases, a bookie's
registration. Nobody can take those over until then, and the process itself, restarted at once,
waits for its own old registration to go. So each process started on a data directory (one
process per directory: gateway/data_dir.py) writes the id and password of every session it starts
to a file there, readable by its owner only (the password lets whoever has it close the session).
The next run attaches to the session the file names, if it still lives, and closes it: ZooKeeper
then deletes its ephemeral nodes at once, and the new run finds the old leases gone. A clean stop
closes its session itself and removes the file.

    {"session": <id>, "password": "<hex>"}
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from kazoo.client import KazooClient

log = logging.getLogger("gateway.storage.metadata")


def remember(path: Path, session_id: int, password: bytes) -> None:
    """Write the file for the session just started (atomically: a crash leaves the old or the new)."""
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps({"session": session_id, "password": password.hex()}).encode())
    finally:
        os.close(fd)
    os.replace(partial, path)


def forget(path: Path) -> None:
    path.unlink(missing_ok=True)


def end_previous(hosts: str, path: Path, session_timeout_s: float, connect_timeout_s: float) -> None:
    """Close the session a previous run left in `path`, if there is one and it still lives."""
    try:
        saved = json.loads(path.read_text())
        session_id, password = int(saved["session"]), bytes.fromhex(saved["password"])
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring the unreadable session file %s: %s", path, exc)
        return
    # An expired session is answered as such and kazoo then starts a new one: closed all the same.
    client = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=session_timeout_s)
    try:
        client.start(timeout=connect_timeout_s)
        log.info("closed the metadata session %#x a previous run left open: its ephemeral nodes go now",
                 session_id)
    except Exception as exc:    # unreachable now: the session expires by itself as before
        log.warning("could not close the metadata session %#x a previous run left open: %s", session_id, exc)
    finally:
        client.stop()
        client.close()

"""The instance cookie: proof that a bookie's directory is the one the cluster knows.

File `COOKIE` in the bookie directory, JSON: {"format": 1, "bookie_id": str, "instance_id": uuid4 hex}.
The same document is stored at /bookies/<bookie_id>/cookie in the metadata store. A bookie starts
only when both agree, or when neither exists and the directory holds no journal yet. A wiped
directory (metadata knows a cookie, the file is gone) or a swapped one (they differ) is refused:
answering "no such entry" after losing acknowledged entries would let recovery truncate a ledger.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path

from storage.api import CookieMismatch, MetadataStore

FILE_NAME = "COOKIE"


async def verify_or_create(directory: Path, bookie_id: str, metadata: MetadataStore, has_data: bool) -> str:
    """Return the instance id, creating the cookie on a fresh directory; raise CookieMismatch."""
    path = directory / FILE_NAME
    local = await asyncio.to_thread(_read_if_present, path)
    stored = await metadata.get(f"/bookies/{bookie_id}/cookie")
    if local is None and stored is None:
        if has_data:
            raise CookieMismatch(f"{directory} holds journal data but no cookie")
        cookie = json.dumps({"format": 1, "bookie_id": bookie_id, "instance_id": uuid.uuid4().hex}).encode()
        await asyncio.to_thread(_write_durably, path, cookie)
        await metadata.put(f"/bookies/{bookie_id}/cookie", cookie)
        return json.loads(cookie)["instance_id"]
    if local is None:
        raise CookieMismatch(f"{directory} has no cookie but bookie {bookie_id} is registered: directory wiped?")
    if stored is None:
        raise CookieMismatch(f"{directory} has a cookie that the metadata store does not know")
    if local != stored.value:
        raise CookieMismatch(f"{directory} belongs to another instance than bookie {bookie_id}")
    return json.loads(local)["instance_id"]


def _read_if_present(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""Child process for the kill -9 tests of ephemeral nodes: opens the metadata store at LOCATION
(a SQLite file or a zk:// URL), creates the ephemeral node PATH, prints its session id, then waits
to be killed. Run as a script: python metadata_owner_child.py LOCATION PATH [SESSION_FILE TIMEOUT_S]
(a session file as storage/metadata/session_file.py keeps one; the session timeout, 2 s by default)."""

import asyncio
import sys
from pathlib import Path

from storage.metadata.open import open_metadata_store


async def main(location: str, path: str, session_file: str | None, timeout_s: float) -> None:
    store = await open_metadata_store(location, session_timeout_s=timeout_s,
                                      session_file=Path(session_file) if session_file else None)
    await store.create(path, b"owner", ephemeral=True)
    print(f"owner {store.session_id}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None,
                     float(sys.argv[4]) if len(sys.argv) > 4 else 2.0))

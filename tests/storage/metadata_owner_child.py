"""Child process for the kill -9 tests of ephemeral nodes: opens the metadata store at LOCATION
(a SQLite file or a zk:// URL), creates the ephemeral node PATH, prints its session id, then waits
to be killed. Run as a script: python metadata_owner_child.py LOCATION PATH."""

import asyncio
import sys

from storage.metadata.open import open_metadata_store


async def main(location: str, path: str) -> None:
    store = await open_metadata_store(location, session_timeout_s=2.0)
    await store.create(path, b"owner", ephemeral=True)
    print(f"owner {store.session_id}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

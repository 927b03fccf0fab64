"""Notes of bookies that may lack some entries of a ledger whose metadata still names them.

    /missing-copies/<ledger id>   JSON {"bookies": [bookie id, ...]}

A writer notes a bookie when an add to it failed: the entry was acknowledged by the others (or sent
on to a replacement), but the fragments up to the ensemble change, or written while the writer went
on without that bookie, still name it. Once the ledger is closed the auditor copies that bookie's
share back to it from the other replicas (adds are idempotent, so what it has is harmless to send
again) and deletes the note; a bookie that is lost instead is replaced as any lost bookie is.
"""

from __future__ import annotations

import json

from storage.api import BadVersion, MetadataStore, NodeExists, NoNode

MISSING_DIR = "/missing-copies"


def _path(ledger_id: int) -> str:
    return f"{MISSING_DIR}/{ledger_id}"


async def note(metadata: MetadataStore, ledger_id: int, bookie_id: str) -> None:
    while True:
        node = await metadata.get(_path(ledger_id))
        try:
            if node is None:
                await metadata.create(_path(ledger_id), json.dumps({"bookies": [bookie_id]}).encode())
                return
            bookies = set(json.loads(node.value)["bookies"])
            if bookie_id in bookies:
                return
            await metadata.put(_path(ledger_id), json.dumps({"bookies": sorted(bookies | {bookie_id})}).encode(),
                               node.version)
            return
        except (NodeExists, BadVersion, NoNode):
            continue   # another note (or its removal) got there first: read it again


async def noted(metadata: MetadataStore) -> dict[int, tuple[frozenset[str], int]]:
    """Every note: ledger id -> (bookies, version of the note)."""
    found = {}
    for name in await metadata.children(MISSING_DIR):
        node = await metadata.get(_path(int(name)))
        if node is not None:
            found[int(name)] = (frozenset(json.loads(node.value)["bookies"]), node.version)
    return found


async def clear(metadata: MetadataStore, ledger_id: int, version: int) -> None:
    """Delete the note unless it changed since it was read (a later note is handled next time)."""
    try:
        await metadata.delete(_path(ledger_id), version)
    except (NoNode, BadVersion):
        pass

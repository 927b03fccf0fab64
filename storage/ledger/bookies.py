"""The bookies a ledger client knows: how to reach one by id, and which are there to place entries on.

`StaticBookies` is a fixed set (the embedded default's one in-process bookie, and tests);
storage/ledger/registered.py follows the bookies registered in the metadata store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from storage.api import EntryStore, NotEnoughBookies
from storage.ledger.placement import DEFAULT_RACK, BookieInfo


class BookieDirectory(Protocol):
    def entry_store(self, bookie_id: str) -> EntryStore:
        """The bookie's EntryStore; NotEnoughBookies if it is not known at all."""

    def candidates(self) -> list[BookieInfo]:
        """Bookies that are up now, with their rack and whether they accept writes."""

    def rack_of(self, bookie_id: str) -> str: ...


class StaticBookies:
    def __init__(self, stores: Mapping[str, EntryStore], racks: Mapping[str, str] | None = None) -> None:
        self._stores = dict(stores)
        self._racks = dict(racks or {})
        self.down: set[str] = set()   # tests mark bookies as gone from the candidates

    def entry_store(self, bookie_id: str) -> EntryStore:
        try:
            return self._stores[bookie_id]
        except KeyError:
            raise NotEnoughBookies(f"bookie {bookie_id} is not available") from None

    def candidates(self) -> list[BookieInfo]:
        return [BookieInfo(bookie_id, self.rack_of(bookie_id), not getattr(store, "is_read_only", False))
                for bookie_id, store in sorted(self._stores.items()) if bookie_id not in self.down]

    def rack_of(self, bookie_id: str) -> str:
        return self._racks.get(bookie_id, DEFAULT_RACK)

"""Finding the entry that holds an offset: the search interpolates between known entries, always
finds the right one, and costs few reads once the ledger's entries are known."""

from __future__ import annotations

import asyncio
import bisect
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.managed_log.positions import EntryPositions, EntrySearch, search_entries


def ledger(sizes: list[int], first: int = 0) -> list[int]:
    """The base offset of each entry of records counted by `sizes`, from `first`."""
    return list(itertools.accumulate([first, *sizes]))[:-1]


async def find(bases: list[int], end: int, offset: int, positions: EntryPositions) -> tuple[int, int]:
    probes = 0

    async def base_and_next(entry_id: int) -> tuple[int, int]:
        nonlocal probes
        probes += 1
        positions.learn(1, entry_id, bases[entry_id])
        following = bases[entry_id + 1] if entry_id + 1 < len(bases) else end
        return bases[entry_id], following
    below, above = positions.around(1, offset)
    lo, lo_base = below if below is not None else (0, bases[0])
    hi, hi_base = above if above is not None else (len(bases), end)
    return await search_entries(EntrySearch(offset, lo, lo_base, hi, hi_base), base_and_next), probes


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=300), data=st.data())
def test_the_search_finds_the_entry_holding_any_offset(sizes, data) -> None:
    bases = ledger(sizes, first=1000)
    end = bases[-1] + sizes[-1]
    positions = EntryPositions(max_per_ledger=16)      # small: thinning happens too
    offsets = data.draw(st.lists(st.integers(1000, end - 1), min_size=1, max_size=20))

    async def lookups() -> list[int]:
        return [(await find(bases, end, offset, positions))[0] for offset in offsets]
    assert asyncio.run(lookups()) == [bisect.bisect_right(bases, offset) - 1 for offset in offsets]


def test_lookups_in_a_ledger_of_even_entries_take_a_read_or_two_then_about_one() -> None:
    bases = ledger([16] * 100_000)
    end = 1_600_000
    positions = EntryPositions()
    offsets = [(n * 7919 * 16) % end for n in range(1, 2001)]     # out of order, as due messages come

    async def lookups() -> list[int]:
        return [(await find(bases, end, offset, positions))[1] for offset in offsets]
    costs = asyncio.run(lookups())
    assert max(costs[:10]) == 1                 # interpolation lands on it (a bisect would take 17)
    assert sum(costs) / len(costs) <= 1.5


def test_known_positions_are_bounded_and_stay_spread_over_the_ledger() -> None:
    positions = EntryPositions(max_per_ledger=100)
    for entry_id in sorted(range(1000), key=lambda n: (n * 7919) % 1000):    # learned in no order
        positions.learn(7, entry_id, entry_id * 10)
    below, above = positions.around(7, 5_005)
    assert below is not None and above is not None and above[0] - below[0] <= 32
    positions.forget(7)
    assert positions.around(7, 5_005) == (None, None)

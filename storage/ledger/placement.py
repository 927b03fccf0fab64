"""Where a ledger's entries go: choosing an ensemble, and a replacement when a bookie fails.

Entry e is stored on the write set of Qw consecutive ensemble positions starting at e mod E, so every
window of Qw consecutive positions (wrapping around) is some entry's write set. The rules:

- never two positions on one bookie, and only bookies that accept writes (not read-only);
- racks interleaved round-robin, so a write set spans at least two racks whenever two exist;
- with `min_racks_per_write_quorum` = N > 1 every write set must span min(N, racks available) racks,
  or the placement fails with NotEnoughBookies (and acks must span them too: see the writer).

Within those rules the choice is random, so ledgers spread their load over every bookie.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from storage.api import NotEnoughBookies

DEFAULT_RACK = "/default-rack"


@dataclass(frozen=True, slots=True)
class BookieInfo:
    bookie_id: str
    rack: str = DEFAULT_RACK
    writable: bool = True


def write_sets(ensemble: Sequence[str], write_quorum: int) -> Iterable[tuple[str, ...]]:
    size = len(ensemble)
    for start in range(size):
        yield tuple(ensemble[(start + i) % size] for i in range(write_quorum))


def racks_needed(min_racks: int, candidates: Sequence[BookieInfo], write_quorum: int) -> int:
    return min(min_racks, len({b.rack for b in candidates}), write_quorum)


def spans_enough_racks(ensemble: Sequence[str], write_quorum: int, rack_of: dict[str, str], needed: int) -> bool:
    return all(len({rack_of[b] for b in ws}) >= needed for ws in write_sets(ensemble, write_quorum))


def choose_ensemble(ensemble_size: int, write_quorum: int, candidates: Sequence[BookieInfo], *,
                    min_racks: int = 1, rng: random.Random | None = None) -> tuple[str, ...]:
    rng = rng or random
    writable = [b for b in candidates if b.writable]
    if len(writable) < ensemble_size:
        raise NotEnoughBookies(f"need {ensemble_size} writable bookies, have {len(writable)}")
    by_rack: dict[str, list[str]] = defaultdict(list)
    for bookie in writable:
        by_rack[bookie.rack].append(bookie.bookie_id)
    for members in by_rack.values():
        rng.shuffle(members)
    racks = list(by_rack)
    rng.shuffle(racks)
    ensemble: list[str] = []
    while len(ensemble) < ensemble_size:       # round-robin over racks: neighbours differ in rack
        for rack in racks:
            if by_rack[rack] and len(ensemble) < ensemble_size:
                ensemble.append(by_rack[rack].pop())
    rack_of = {b.bookie_id: b.rack for b in writable}
    needed = racks_needed(min_racks, writable, write_quorum)
    if min_racks > 1 and not spans_enough_racks(ensemble, write_quorum, rack_of, needed):
        raise NotEnoughBookies(f"cannot place {ensemble_size} bookies so every write set of {write_quorum} "
                               f"spans {needed} racks")
    return tuple(ensemble)


def replace_bookies(ensemble: Sequence[str], failed: set[str], write_quorum: int,
                    candidates: Sequence[BookieInfo], *, min_racks: int = 1,
                    rng: random.Random | None = None) -> tuple[str, ...]:
    """The ensemble with every failed bookie swapped for a writable one not already in it."""
    rng = rng or random
    rack_of = {b.bookie_id: b.rack for b in candidates}
    spare = [b for b in candidates if b.writable and b.bookie_id not in ensemble and b.bookie_id not in failed]
    rng.shuffle(spare)
    new = list(ensemble)
    size = len(new)
    for index, bookie_id in enumerate(ensemble):
        if bookie_id not in failed:
            continue
        if not spare:
            raise NotEnoughBookies(f"no writable bookie left to replace {bookie_id}")
        # Prefer a rack that none of the neighbours sharing a write set with this position has.
        neighbours = {rack_of.get(new[(index + d) % size]) for d in range(1 - write_quorum, write_quorum) if d}
        spare.sort(key=lambda b: b.rack in neighbours)
        new[index] = spare.pop(0).bookie_id
    rack_of.update({b: rack_of.get(b, DEFAULT_RACK) for b in new})
    needed = racks_needed(min_racks, [b for b in candidates if b.writable], write_quorum)
    if min_racks > 1 and not spans_enough_racks(new, write_quorum, rack_of, needed):
        raise NotEnoughBookies(f"no replacement keeps every write set across {needed} racks")
    return tuple(new)

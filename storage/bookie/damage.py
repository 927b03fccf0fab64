"""Damaged sealed journal segments: what the bookie found corrupt in data it had acknowledged.

A sealed segment is never written again, so a record in it that fails its checks (a flipped bit, a
torn or zeroed page) is media damage, not a crash's unfinished tail. The bookie leaves such a
segment as it is (cutting it would throw away every good record after the damage) and writes a
marker beside it, so the damage is remembered across restarts even once the index no longer
replays that segment:

    journal/<segment id:016x>.damaged     one line of UTF-8 text: "<offset> <reason>\n"
                                          (offset of the first bad byte in the segment)

While any marker exists the bookie answers an entry it cannot find with CorruptEntry ("unknown"),
never NoSuchEntry: the entry may have been in the unreadable part, and a "no such entry" would let a
ledger's recovery conclude that an acknowledged entry was never written. The marker goes when an
operator removes it (after the bookie's ledgers were re-replicated, or the bookie replaced).
"""

from __future__ import annotations

import os
from pathlib import Path

SUFFIX = ".damaged"


def marker_path(journal_dir: Path, segment_id: int) -> Path:
    return journal_dir / f"{segment_id:016x}{SUFFIX}"


def mark(journal_dir: Path, segment_id: int, offset: int, reason: str) -> None:
    """Record (durably) that `segment_id` is damaged from `offset` on."""
    path = marker_path(journal_dir, segment_id)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{offset} {reason}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    dir_fd = os.open(journal_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load(journal_dir: Path) -> dict[int, tuple[int, str]]:
    """Every marked segment: segment id -> (offset, reason)."""
    found: dict[int, tuple[int, str]] = {}
    for name in os.listdir(journal_dir):
        stem, _, ext = name.partition(".")
        if "." + ext != SUFFIX or len(stem) != 16:
            continue
        try:
            segment_id = int(stem, 16)
            offset, _, reason = (journal_dir / name).read_text(errors="replace").strip().partition(" ")
            found[segment_id] = (int(offset), reason)
        except (ValueError, OSError):
            found.setdefault(segment_id, (0, "unreadable damage marker"))
    return found

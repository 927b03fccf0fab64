"""How the gateway's processes (`gateway serve`, `gateway bookie`) run Python: on uvloop when it is
installed, with the garbage collector tuned for a server.

A server keeps many long-lived objects (partitions, cursors, pending messages, futures) and makes
many short-lived ones per message. With the collector's default thresholds a young collection runs
every 700 allocations and the older generations, which hold the long-lived objects, are walked
often enough to cost a large share of the CPU under load (bench/delayed.py: releases at 10,000/s
ran 3x later). Objects made while starting are frozen out of collection, and young collections
run every GEN0_THRESHOLD allocations; cycles still go, a little later.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

GEN0_THRESHOLD = 50_000


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None  # asyncio's default loop; slower but equivalent
    return uvloop.new_event_loop


def tune_gc() -> None:
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)

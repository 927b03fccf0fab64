"""The one way the unit tests wait for something the event loop brings about: poll a condition
(plain or awaitable) until it holds, and fail with what was awaited when it does not in time."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

POLL_S = 0.005


async def eventually(condition: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0,
                     what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached in {timeout} s")
        await asyncio.sleep(POLL_S)

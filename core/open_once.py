"""Opening a thing once however many ask for it at the same moment."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

T = TypeVar("T")


class OpenOnce:
    """Per key, the first caller runs the opener and the others wait for its outcome, value or
    error (shielded: a waiter that is cancelled does not cancel the open)."""

    def __init__(self) -> None:
        self._opening: dict[Hashable, asyncio.Future] = {}

    async def __call__(self, key: Hashable, opener: Callable[[], Awaitable[T]]) -> T:
        opening = self._opening.get(key)
        if opening is not None:
            return await asyncio.shield(opening)
        future = asyncio.get_running_loop().create_future()
        self._opening[key] = future
        try:
            value = await opener()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: the waiters re-raise it
            raise
        finally:
            del self._opening[key]
        future.set_result(value)
        return value

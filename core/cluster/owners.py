"""Asking the broker that owns a bundle, over the peer links (core/cluster/peers.py).

While a bundle moves it has no owner for a moment, or its new owner does not serve it yet, or the
link to it cannot be made: in each case nothing was done, so such a request is asked again, for up
to OWNER_WAIT_S, as a RabbitMQ channel holds its publishes while a queue elects a leader.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from core.cluster.bundles import Bundle
from core.errors import NotOwner, NotSent

OWNER_WAIT_S = 30.0               # how long a request waits for a bundle's owner (failover) before failing
RETRY_FIRST_S, RETRY_MAX_S = 0.05, 1.0


def retrieved(future: asyncio.Future) -> None:
    """A done callback for futures nobody may look at: their exception is not logged as lost."""
    if not future.cancelled():
        future.exception()


def owner_of(core, bundle: Bundle) -> Any:
    owner = core.cluster.owner(bundle)
    if owner is None or owner.id == core.cluster.local.id:
        raise NotOwner(f"bundle {bundle} has no other live owner now (it is moving)")
    return owner


async def ask_owner_waiting(core, locate: Callable[[], Bundle], head: dict, payload: bytes = b"") -> tuple[dict, bytes]:
    """Ask the owner of the bundle `locate()` names, again while it refuses with NotOwner or cannot
    be reached (nothing was done); NotOwner at once if the bundle comes to this broker meanwhile.
    Located again at each try: a split may have put the key in a new bundle."""
    deadline, pause = time.monotonic() + OWNER_WAIT_S, RETRY_FIRST_S
    while True:
        bundle = locate()
        try:
            return await core.peers.ask(owner_of(core, bundle), head, payload)
        except (NotOwner, NotSent):
            if time.monotonic() + pause > deadline:
                raise
        if core.cluster.owns(bundle):
            raise NotOwner(f"bundle {bundle} came to this broker with requests on their way to its previous owner")
        await asyncio.sleep(pause)
        pause = min(pause * 2, RETRY_MAX_S)

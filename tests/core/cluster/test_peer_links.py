"""Peer links between two PeerServices in one process (core/cluster/peers.py): a request answered,
and a broker closing with a link open from another one ending it quietly."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest

from core.cluster.peers import PeerService
from core.errors import NotSent
from tests.core.cluster.conftest import SECRET, listening
from tests.core.cluster.test_cluster_membership import broker


async def test_closing_with_a_link_open_answers_what_came_and_logs_no_error(caplog) -> None:
    served, asking = PeerService(SECRET), PeerService(SECRET)
    sock = listening()
    await served.start(sock)

    async def echo(head: dict, payload: bytes, _link) -> tuple[dict, bytes]:
        return {"echo": head["text"]}, payload[::-1]

    served.handle("echo", echo)
    there = replace(broker(1), peer=f"127.0.0.1:{sock.getsockname()[1]}")
    try:
        assert await asking.ask(there, {"kind": "echo", "text": "hi"}, b"abc") == ({"echo": "hi"}, b"cba")
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            await served.close()
            for _ in range(10):          # let the closed connection's callbacks run
                await asyncio.sleep(0)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    finally:
        await asking.close()


async def test_a_request_on_a_link_whose_connection_just_went_is_not_sent_and_the_next_one_redials() -> None:
    """The connection closed and its reader has not run yet: the request is refused as NotSent
    (nothing left this broker, so whoever asked may ask again), not an error from the transport."""
    served, asking = PeerService(SECRET), PeerService(SECRET)
    sock = listening()
    await served.start(sock)

    async def echo(head: dict, payload: bytes, _link) -> tuple[dict, bytes]:
        return {"echo": head["text"]}, payload

    served.handle("echo", echo)
    there = replace(broker(1), peer=f"127.0.0.1:{sock.getsockname()[1]}")
    try:
        assert await asking.ask(there, {"kind": "echo", "text": "one"}) == ({"echo": "one"}, b"")
        asking._links[there.peer]._writer.transport.abort()      # as a reset seen by the transport first
        with pytest.raises(NotSent):
            await asking.ask(there, {"kind": "echo", "text": "two"})
        assert await asking.ask(there, {"kind": "echo", "text": "three"}) == ({"echo": "three"}, b"")
    finally:
        await asking.close()
        await served.close()

"""TurnWriter: what one event-loop turn writes to a connection goes to its transport in one call."""

from __future__ import annotations

import asyncio

from storage.bookie.turn_writer import FLUSH_BYTES, TurnWriter


class RecordingTransport:
    def __init__(self) -> None:
        self.calls: list[list] = []
        self.closing = False

    def writelines(self, parts) -> None:
        self.calls.append(list(parts))

    def is_closing(self) -> bool:
        return self.closing


async def next_turn() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_the_frames_of_one_turn_go_out_in_order_in_one_call():
    transport = RecordingTransport()
    writer = TurnWriter(asyncio.get_running_loop(), transport)
    writer.write([b"a1", b"a2"])
    writer.write([b"b"])
    assert transport.calls == []
    await next_turn()
    assert transport.calls == [[b"a1", b"a2", b"b"]]
    writer.write([b"c"])
    await next_turn()
    assert transport.calls == [[b"a1", b"a2", b"b"], [b"c"]]


async def test_a_large_frame_is_not_held_back():
    transport = RecordingTransport()
    writer = TurnWriter(asyncio.get_running_loop(), transport)
    writer.write([b"small"])
    writer.write([b"x" * FLUSH_BYTES])
    assert transport.calls == [[b"small", b"x" * FLUSH_BYTES]]
    await next_turn()
    assert len(transport.calls) == 1


async def test_nothing_is_written_to_a_closing_or_dropped_connection():
    transport = RecordingTransport()
    writer = TurnWriter(asyncio.get_running_loop(), transport)
    writer.write([b"lost"])
    writer.drop()
    await next_turn()
    writer.write([b"late"])
    transport.closing = True
    await next_turn()
    assert transport.calls == []

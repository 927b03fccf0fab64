"""The peer links' frames: round trip, and every malformed frame is a FrameError (the link closes),
never another exception or an allocation sized by the frame's own claims."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.cluster import peer_frames as frames


def test_a_frame_round_trips() -> None:
    encoded = b"".join(frames.encode(7, {"kind": "queue-publish", "queue": "q"}, b"\x00payload"))
    length = frames.frame_length(encoded[:4])
    assert length == len(encoded) - 4
    assert frames.decode(encoded[4:]) == (7, {"kind": "queue-publish", "queue": "q"}, b"\x00payload")


@pytest.mark.parametrize("length", [0, 11, frames.MAX_FRAME_BYTES + 1, 2**32 - 1])
def test_a_length_out_of_bounds_is_refused_before_anything_is_read(length: int) -> None:
    with pytest.raises(frames.FrameError):
        frames.frame_length(struct.pack(">I", length))


def test_before_the_handshake_only_small_frames_are_read() -> None:
    big_enough_after = struct.pack(">I", frames.HANDSHAKE_FRAME_BYTES + 1)
    assert frames.frame_length(big_enough_after) == frames.HANDSHAKE_FRAME_BYTES + 1
    with pytest.raises(frames.FrameError):
        frames.frame_length(big_enough_after, frames.HANDSHAKE_FRAME_BYTES)


@pytest.mark.parametrize("body", [
    struct.pack(">QI", 1, 100) + b"{}",            # the head claims more than there is
    struct.pack(">QI", 1, 3) + b"{x}",             # not JSON
    struct.pack(">QI", 1, 2) + b"[]",              # not an object
    struct.pack(">QI", 1, 2) + b"\xff\xfe",        # not text
])
def test_a_malformed_head_is_a_frame_error(body: bytes) -> None:
    with pytest.raises(frames.FrameError):
        frames.decode(body)


def test_a_frame_over_the_limit_is_not_sent() -> None:
    with pytest.raises(frames.FrameError):
        frames.encode(1, {}, b"x" * frames.MAX_FRAME_BYTES)


@given(st.binary(min_size=12, max_size=300))
def test_any_body_decodes_or_is_a_frame_error(body: bytes) -> None:
    try:
        request_id, head, payload = frames.decode(body)
    except frames.FrameError:
        return
    assert isinstance(head, dict) and len(payload) <= len(body)


def test_proofs_depend_on_the_secret_and_the_order_of_the_nonces() -> None:
    a, b = b"a" * frames.NONCE_BYTES, b"b" * frames.NONCE_BYTES
    proof = frames.proof(b"secret", a, b)
    assert frames.proof_matches(b"secret", a, b, proof)
    assert not frames.proof_matches(b"other", a, b, proof)
    assert not frames.proof_matches(b"secret", b, a, proof)
    assert not frames.proof_matches(b"secret", a, b, None)

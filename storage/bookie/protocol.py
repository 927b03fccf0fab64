"""The bookie wire protocol: how ledger clients talk to `gateway bookie` servers over TCP.

Pure codec: bytes in, tuples out, and back. No sockets, no asyncio.

Every frame, in both directions (big-endian):

    offset  size  field
    0       4     length       bytes after this field, 10 <= length <= max_frame_bytes
    4       1     version      PROTOCOL_VERSION; another version closes the connection
    5       1     op           Op
    6       8     request id   chosen by the client; a response carries its request's id
    14      ...   body         the op's request or response fields, in the order MESSAGES declares

Field types: "u8", "u32", "i64" (fixed width), "blob" (u32 length, then the bytes) and "blobs" (u32
count, then that many blobs). Every response body starts with a status byte (Status); after a status
other than OK the remaining fields are absent. Lengths and counts are checked against the bytes left
before anything is allocated, and a body must be consumed exactly.

Connection start (shared-secret authentication, the secret never crosses the wire):

    bookie -> client  HELLO     server nonce, bookie id, instance id     (request id 0)
    client -> bookie  AUTH      client nonce, proof = HMAC-SHA256(secret, "client" + server nonce + client nonce)
    bookie -> client  AUTH      status, proof = HMAC-SHA256(secret, "bookie" + client nonce + server nonce)

Only AUTH is accepted before it succeeds. Requests are pipelined: a client sends many without waiting,
and the bookie answers each when it is done, not necessarily in order.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from storage.api import BookieReadOnly, CorruptEntry, LedgerFenced, NoSuchEntry, NoSuchLedger, StorageError

PROTOCOL_VERSION = 1
FRAME_HEADER = struct.Struct(">IBBQ")       # length, version, op, request id
HEADER_AFTER_LENGTH = FRAME_HEADER.size - 4
DEFAULT_MAX_FRAME_BYTES = (64 << 20) + 4096  # the journal's largest entry plus room for the fields
NONCE_BYTES = 32


class Op(enum.IntEnum):
    HELLO = 0
    AUTH = 1
    ADD = 2
    READ = 3
    READ_RANGE = 4
    FENCE = 5
    READ_LAC = 6
    DELETE_LEDGER = 7
    WRITE_LAC = 8      # the writer's LastAddConfirmed, sent on its own once it goes idle


class Status(enum.IntEnum):
    OK = 0
    NO_SUCH_LEDGER = 1
    NO_SUCH_ENTRY = 2
    FENCED = 3
    READ_ONLY = 4
    CORRUPT_ENTRY = 5
    BAD_REQUEST = 6
    UNAUTHORIZED = 7
    INTERNAL_ERROR = 8


class AddFlag(enum.IntFlag):
    RECOVERY = 1     # a recovering reader rewriting the tail: accepted by a fenced ledger


class ReadFlag(enum.IntFlag):
    FENCE = 1        # fence the ledger before reading (recovery reads are themselves fencing)


Fields = tuple[tuple[str, str], ...]

# op -> (request fields, response fields after the status byte)
MESSAGES: dict[Op, tuple[Fields, Fields]] = {
    Op.HELLO: ((("nonce", "blob"), ("bookie_id", "blob"), ("instance_id", "blob")), ()),
    Op.AUTH: ((("nonce", "blob"), ("proof", "blob")), (("proof", "blob"),)),
    Op.ADD: ((("ledger_id", "i64"), ("entry_id", "i64"), ("lac", "i64"), ("flags", "u8"), ("payload", "blob")),
             ()),
    Op.READ: ((("ledger_id", "i64"), ("entry_id", "i64"), ("flags", "u8")),
              (("lac", "i64"), ("payload", "blob"))),
    Op.READ_RANGE: ((("ledger_id", "i64"), ("first_entry_id", "i64"), ("last_entry_id", "i64"),
                     ("max_bytes", "u32")),
                    (("entries", "blobs"),)),
    Op.FENCE: ((("ledger_id", "i64"),), (("last_entry_id", "i64"), ("lac", "i64"))),
    Op.READ_LAC: ((("ledger_id", "i64"), ("after", "i64"), ("timeout_ms", "u32")), (("lac", "i64"),)),
    Op.DELETE_LEDGER: ((("ledger_id", "i64"),), ()),
    Op.WRITE_LAC: ((("ledger_id", "i64"), ("lac", "i64")), ()),
}

_FIXED_CODES = {"u8": "B", "u32": "I", "i64": "q"}
_U32 = struct.Struct(">I")
_STATUS = struct.Struct(">B")


class ProtocolError(Exception):
    """A frame that breaks the protocol: the connection is closed after one log line."""


@dataclass(frozen=True, slots=True)
class _Layout:
    """One message's fields compiled: a struct for the fixed-width prefix, then variable fields."""

    names: tuple[str, ...]
    fixed: struct.Struct
    variable: tuple[str, ...]   # "blob" / "blobs", after the fixed prefix

    @classmethod
    def of(cls, fields: Fields, *, status: bool) -> "_Layout":
        codes = ["B"] if status else []
        variable: list[str] = []
        for name, kind in fields:
            if kind in _FIXED_CODES:
                if variable:
                    raise ValueError(f"fixed field {name} after a variable one")
                codes.append(_FIXED_CODES[kind])
            elif kind in ("blob", "blobs"):
                variable.append(kind)
            else:
                raise ValueError(f"unknown field type {kind}")
        names = (("status",) if status else ()) + tuple(name for name, _ in fields)
        return cls(names, struct.Struct(">" + "".join(codes)), tuple(variable))


_REQUESTS = {op: _Layout.of(req, status=False) for op, (req, _) in MESSAGES.items()}
_RESPONSES = {op: _Layout.of(resp, status=True) for op, (_, resp) in MESSAGES.items()}
_ERROR_RESPONSE = struct.Struct(">B")


def _encode(layout: _Layout, op: Op, request_id: int, values: Sequence) -> list[bytes | memoryview]:
    fixed_count = len(layout.names) - len(layout.variable)
    parts: list[bytes | memoryview] = [b"", layout.fixed.pack(*values[:fixed_count])]
    length = HEADER_AFTER_LENGTH + len(parts[1])
    for kind, value in zip(layout.variable, values[fixed_count:]):
        blobs = (value,) if kind == "blob" else value
        if kind == "blobs":
            parts.append(_U32.pack(len(blobs)))
            length += 4
        for blob in blobs:
            # A blob may be given as a tuple of parts: sent back to back, never joined in memory.
            pieces = blob if isinstance(blob, tuple) else (blob,)
            size = sum(map(len, pieces))
            parts.append(_U32.pack(size))
            parts.extend(pieces)
            length += 4 + size
    parts[0] = FRAME_HEADER.pack(length, PROTOCOL_VERSION, op, request_id)
    return parts


def encode_request(op: Op, request_id: int, *values) -> list[bytes | memoryview]:
    """The frame of a request, as parts to write back to back."""
    return _encode(_REQUESTS[op], op, request_id, values)


def encode_response(op: Op, request_id: int, status: Status, *values) -> list[bytes | memoryview]:
    """The frame of a response; with a status other than OK no other field is sent."""
    if status is not Status.OK:
        return [FRAME_HEADER.pack(HEADER_AFTER_LENGTH + 1, PROTOCOL_VERSION, op, request_id),
                _ERROR_RESPONSE.pack(status)]
    return _encode(_RESPONSES[op], op, request_id, (status, *values))


def _decode(layout: _Layout, body: memoryview) -> tuple:
    fixed_size = layout.fixed.size
    if len(body) < fixed_size:
        raise ProtocolError(f"body of {len(body)} bytes is shorter than its {fixed_size} fixed bytes")
    values = list(layout.fixed.unpack_from(body))
    pos = fixed_size
    end = len(body)
    for kind in layout.variable:
        if kind == "blob":
            blob, pos = _blob(body, pos, end)
            values.append(blob)
            continue
        if pos + 4 > end:
            raise ProtocolError("truncated count")
        (count,), pos = _U32.unpack_from(body, pos), pos + 4
        if count * 4 > end - pos:
            raise ProtocolError(f"count {count} exceeds the bytes left")
        blobs = []
        for _ in range(count):
            blob, pos = _blob(body, pos, end)
            blobs.append(blob)
        values.append(blobs)
    if pos != end:
        raise ProtocolError(f"{end - pos} trailing bytes")
    return tuple(values)


def _blob(body: memoryview, pos: int, end: int) -> tuple[memoryview, int]:
    if pos + 4 > end:
        raise ProtocolError("truncated length")
    (size,) = _U32.unpack_from(body, pos)
    pos += 4
    if size > end - pos:
        raise ProtocolError(f"length {size} exceeds the bytes left")
    return body[pos:pos + size], pos + size


def decode_request(op: Op, body: memoryview) -> tuple:
    return _decode(_REQUESTS[op], body)


def decode_response(op: Op, body: memoryview) -> tuple:
    """(status, *fields); just (status,) when the status is not OK."""
    if not body:
        raise ProtocolError("empty response")
    try:
        status = Status(body[0])
    except ValueError:
        raise ProtocolError(f"unknown status {body[0]}") from None
    if status is not Status.OK:
        if len(body) != 1:
            raise ProtocolError("an error response carries fields")
        return (status,)
    return (status, *_decode(_RESPONSES[op], body)[1:])


@dataclass(slots=True)   # not frozen: a frozen one costs ~2 µs more to build, once per frame
class Frame:
    op: Op
    request_id: int
    body: memoryview


class FrameReader:
    """Splits a byte stream into frames, refusing a bad header before buffering its body. Each body
    is copied once, into a buffer of its own size, and handed out as a view of that buffer."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._max = max_frame_bytes
        self._header = bytearray()
        self._body: bytearray | None = None
        self._filled = 0
        self._op = Op.HELLO
        self._request_id = 0

    def feed(self, data: bytes) -> list[Frame]:
        """Frames completed by `data`; raises ProtocolError on a frame that breaks the protocol."""
        frames: list[Frame] = []
        view = memoryview(data)
        pos, end = 0, len(view)
        header_size = FRAME_HEADER.size
        while pos < end:
            body = self._body
            if body is None:
                missing = header_size - len(self._header)
                if not self._header and end - pos >= header_size:
                    header = view[pos:pos + header_size]
                else:
                    self._header += view[pos:pos + missing]
                    if len(self._header) < header_size:
                        break
                    header = self._header
                pos += header_size if header is not self._header else missing
                body = self._start(*FRAME_HEADER.unpack(header))
                self._header = bytearray()
            take = min(len(body) - self._filled, end - pos)
            body[self._filled:self._filled + take] = view[pos:pos + take]
            self._filled += take
            pos += take
            if self._filled == len(body):
                frames.append(Frame(self._op, self._request_id, memoryview(body)))
                self._body = None
        return frames

    def _start(self, length: int, version: int, op: int, request_id: int) -> bytearray:
        if version != PROTOCOL_VERSION:
            raise ProtocolError(f"protocol version {version}, expected {PROTOCOL_VERSION}")
        if not HEADER_AFTER_LENGTH <= length <= self._max:
            raise ProtocolError(f"frame length {length} outside [{HEADER_AFTER_LENGTH}, {self._max}]")
        try:
            self._op = Op(op)
        except ValueError:
            raise ProtocolError(f"unknown op {op}") from None
        self._request_id = request_id
        self._filled = 0
        self._body = bytearray(length - HEADER_AFTER_LENGTH)
        return self._body


# --- authentication -------------------------------------------------------------------------------


def client_proof(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return hmac.new(secret, b"client" + server_nonce + client_nonce, hashlib.sha256).digest()


def bookie_proof(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return hmac.new(secret, b"bookie" + client_nonce + server_nonce, hashlib.sha256).digest()


def proofs_equal(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(bytes(a), bytes(b))


# --- statuses and storage errors ------------------------------------------------------------------

_STATUS_OF_ERROR: tuple[tuple[type[StorageError], Status], ...] = (
    (NoSuchLedger, Status.NO_SUCH_LEDGER),
    (NoSuchEntry, Status.NO_SUCH_ENTRY),
    (LedgerFenced, Status.FENCED),
    (BookieReadOnly, Status.READ_ONLY),
    (CorruptEntry, Status.CORRUPT_ENTRY),
)
_ERROR_OF_STATUS: dict[Status, type[StorageError]] = {status: error for error, status in _STATUS_OF_ERROR}


def status_of(error: BaseException) -> Status:
    """The status a bookie answers for a failure of its local store."""
    for error_type, status in _STATUS_OF_ERROR:
        if isinstance(error, error_type):
            return status
    return Status.INTERNAL_ERROR


def error_of(status: Status, what: str) -> StorageError:
    """The storage error a client raises for a bookie's answer."""
    return _ERROR_OF_STATUS.get(status, StorageError)(f"{what}: {status.name}")

"""Messages for a queue another broker of the cluster owns: dead-lettered into it, or released into
it by the delayed store. They go to the owner through its mailbox (core/cluster/mailbox.py), which
appends them as a publish of its own would be (length limits, consumers) and answers once they are
durable there; only then does the sender count them as delivered.

A request carries up to MAX_REQUEST_BYTES of records (base64 in JSON, under the metadata store's
value limit); a single record larger than that cannot be forwarded, and its sender keeps retrying
(logged) until the queue's bundle comes to its broker. A request is named after its content, so a
sender asking again after a failure finds the first one, answered or not.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator

from core.cluster.bundles import Bundle
from core.records.builder import Record

PUBLISH = "queue-publish"
MAX_REQUEST_BYTES = 512 << 10


def _text(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def encode_records(records: list[Record]) -> list[list]:
    return [[r.timestamp_ms, _text(r.key), _text(r.value), [[name, _text(value)] for name, value in r.headers]]
            for r in records]


def decode_records(rows: list[list]) -> list[Record]:
    return [Record(timestamp, _bytes(key), _bytes(value), tuple((name, _bytes(v)) for name, v in headers))
            for timestamp, key, value, headers in rows]


def _requests(queue: str, records: list[Record]) -> Iterator[tuple[str, dict]]:
    """(name, request) for `records`, split so that each request stays under MAX_REQUEST_BYTES."""
    rows: list[list] = []
    size = 0
    for row in encode_records(records):
        row_size = len(json.dumps(row))
        if rows and size + row_size > MAX_REQUEST_BYTES:
            yield _request(queue, rows)
            rows, size = [], 0
        rows.append(row)
        size += row_size
    if rows:
        yield _request(queue, rows)


def _request(queue: str, rows: list[list]) -> tuple[str, dict]:
    body = {"kind": PUBLISH, "queue": queue, "records": rows}
    digest = hashlib.sha256(json.dumps(body, separators=(",", ":")).encode()).hexdigest()[:40]
    return f"publish.{digest}", body


async def forward(core, queue: str, to: Bundle, records: list[Record], sender: Bundle) -> None:
    """Append `records` to `queue`, owned by the owner of `to`; this broker writes as the owner of
    `sender` (the queue or delayed store the messages come from). Durable there when it returns."""
    for name, request in _requests(queue, records):
        await core.mailbox.ask(to, name, request, core.owner_metadata(sender))

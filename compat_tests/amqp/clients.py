"""What the AMQP compat tests share: names no other test uses, and a pika connection as guest."""

from __future__ import annotations

import uuid

import pika


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def connect(address: tuple[str, int], **options) -> pika.BlockingConnection:
    """A blocking pika connection as guest (one attempt: a refused connection fails the test at once)."""
    host, port = address
    return pika.BlockingConnection(pika.ConnectionParameters(
        host, port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1, **options))

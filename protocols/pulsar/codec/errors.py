"""The one exception every Pulsar decode failure raises."""

from __future__ import annotations


class DecodeError(Exception):
    """Bytes that are not a valid Pulsar frame, command or message payload. `checksum` marks a
    payload whose CRC-32C did not match: Pulsar answers that one message with ChecksumError and
    keeps the connection; anything else broken closes it."""

    def __init__(self, message: str, *, checksum: bool = False) -> None:
        super().__init__(message)
        self.checksum = checksum

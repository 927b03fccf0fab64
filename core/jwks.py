"""The public keys tokens are signed with: a JSON Web Key Set (RFC 7517) read from a URL or a file.

The set is read on first use and kept. It is read again when a token names a key id the set lacks
(an issuer rotating its keys), and the login waits for that read; and in the background, the login
going on with the keys held, once the set is older than `max_age_s` (Kafka's
sasl.oauthbearer.jwks.endpoint.refresh.ms, an hour). Never more often than every `min_interval_s`: a
flood of tokens with made-up key ids costs one read per interval, not one per login. Concurrent
callers share one read.

Reading is blocking I/O (urllib, open): it runs in a thread, never on the event loop. A failed read
keeps the keys read before, and is retried no sooner than the interval either.

Only signature keys of asymmetric algorithms are kept (RSA, EC, OKP); symmetric ("oct") keys and
keys whose "use" is not "sig" are dropped, so a public key can never be taken for an HMAC secret.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from collections.abc import Callable
from typing import Any

log = logging.getLogger("gateway.core.tokens")

MAX_AGE_S = 3600.0
MIN_INTERVAL_S = 10.0
READ_TIMEOUT_S = 10.0
MAX_BYTES = 1024 * 1024       # a key set is a few KiB; more is a wrong URL
ASYMMETRIC_KEY_TYPES = ("RSA", "EC", "OKP")


class KeySetUnavailable(Exception):
    """The key set could not be read or parsed (the message says why)."""


def read_url(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=READ_TIMEOUT_S) as response:
        data = response.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise KeySetUnavailable(f"{url}: the key set is larger than {MAX_BYTES} bytes")
    return data


def read_file(path: str) -> bytes:
    with open(path, "rb") as file:
        data = file.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise KeySetUnavailable(f"{path}: the key set is larger than {MAX_BYTES} bytes")
    return data


def parse_key_set(data: bytes) -> list[dict[str, Any]]:
    """The usable signature keys of a JWKS document."""
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise KeySetUnavailable(f"not JSON: {exc}") from None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise KeySetUnavailable('no "keys" list')
    return [key for key in keys if isinstance(key, dict) and key.get("kty") in ASYMMETRIC_KEY_TYPES
            and key.get("use", "sig") == "sig"]


class KeySet:
    """Owned by the event loop; `read` runs in a worker thread."""

    def __init__(self, source: str, read: Callable[[], bytes], *, max_age_s: float = MAX_AGE_S,
                 min_interval_s: float = MIN_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source      # the URL or path, for log lines
        self._read = read
        self._max_age_s = max_age_s
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._keys: list[dict[str, Any]] | None = None
        self._read_at: float | None = None       # when the last read (successful or not) started
        self._loaded_at: float | None = None     # when the keys we hold were read
        self._reading: asyncio.Future[None] | None = None
        self._background: asyncio.Task[None] | None = None
        self.reads = 0                            # how many reads were made (tests, metrics)

    @classmethod
    def from_url(cls, url: str, **kwargs) -> "KeySet":
        return cls(url, lambda: read_url(url), **kwargs)

    @classmethod
    def from_file(cls, path: str, **kwargs) -> "KeySet":
        return cls(path, lambda: read_file(path), **kwargs)

    async def keys(self, key_id: str | None) -> list[dict[str, Any]]:
        """The keys a token naming `key_id` may be signed with (None: every key); reads the set
        again first if it is stale or lacks that id, within the bounds above."""
        if self._keys is None or (key_id is not None and not self._matching(key_id)):
            await self._refresh()
        elif self._stale() and self._reading is None and (self._background is None or self._background.done()):
            self._background = asyncio.get_running_loop().create_task(self._refresh(), name="jwks-refresh")
        if self._keys is None:
            raise KeySetUnavailable(f"no keys could be read from {self.source}")
        return self._matching(key_id)

    def _matching(self, key_id: str | None) -> list[dict[str, Any]]:
        keys = self._keys or []
        return keys if key_id is None else [key for key in keys if key.get("kid") == key_id]

    def _stale(self) -> bool:
        return self._loaded_at is None or self._clock() - self._loaded_at >= self._max_age_s

    async def _refresh(self) -> None:
        if self._reading is not None:
            await asyncio.shield(self._reading)
            return
        if self._read_at is not None and self._clock() - self._read_at < self._min_interval_s:
            return   # read lately: what we hold (or lack) stands until the interval has passed
        self._read_at = self._clock()
        self._reading = asyncio.get_running_loop().create_future()
        try:
            self.reads += 1
            data = await asyncio.to_thread(self._read)
            keys = parse_key_set(data)
            self._keys, self._loaded_at = keys, self._clock()
            log.info("read %d signature key(s) from %s", len(keys), self.source)
        except Exception as exc:   # unreachable, unreadable, not a key set: keep what we had
            log.warning("reading the token keys from %s failed: %s", self.source, exc)
        finally:
            self._reading.set_result(None)
            self._reading = None

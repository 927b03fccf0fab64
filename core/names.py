"""Names of the data model: tenant / namespace / topic, partitions 0..N-1."""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.errors import InvalidName

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"

# Kafka's legal topic characters; tenants and namespaces follow the same rule so every name is
# also a safe metadata path component.
_LEGAL = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def check_name(kind: str, name: str) -> str:
    if not _LEGAL.match(name) or name in (".", ".."):
        raise InvalidName(f"illegal {kind} name {name!r}: use 1-249 of [A-Za-z0-9._-]")
    return name


@dataclass(frozen=True, slots=True, order=True)
class TopicName:
    tenant: str
    namespace: str
    topic: str

    @classmethod
    def of(cls, topic: str, tenant: str = DEFAULT_TENANT, namespace: str = DEFAULT_NAMESPACE) -> "TopicName":
        return cls(check_name("tenant", tenant), check_name("namespace", namespace), check_name("topic", topic))

    @property
    def path(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.topic}"

    def partition_log(self, partition: int) -> str:
        return f"{self.path}/{partition}"

    def __str__(self) -> str:
        return self.path


_PLAIN_CHAR = re.compile(r"[A-Za-z0-9_-]")
MAX_NAME = 249                      # the longest legal name


def escaped_name(prefix: str, text: str) -> str:
    """`prefix` + `text` with every character outside [A-Za-z0-9_-] written as ".xx" per UTF-8 byte:
    a legal name for any text (if short enough: callers check MAX_NAME), which maps back to it."""
    parts = [prefix]
    for char in text:
        parts.append(char if _PLAIN_CHAR.fullmatch(char)
                     else "".join(f".{b:02x}" for b in char.encode("utf-8", "surrogatepass")))
    return "".join(parts)


def unescaped_name(prefix: str, name: str) -> str | None:
    """The text that escaped_name(prefix, text) stored as `name`; None if `name` is not one."""
    if not name.startswith(prefix):
        return None
    encoded, out, i = name[len(prefix):], bytearray(), 0
    try:
        while i < len(encoded):
            if encoded[i] == ".":
                digits = encoded[i + 1:i + 3]
                if len(digits) != 2:
                    return None
                out.append(int(digits, 16))
                i += 3
            else:
                out += encoded[i].encode()
                i += 1
        return out.decode("utf-8", "surrogatepass")
    except (ValueError, UnicodeDecodeError):
        return None

"""Compile the declarations of schema/ into one codec per (API, version, direction), at import.

Decoded messages are `Msg` dicts with attribute access; every field of the declaration is present,
with its default when the version does not carry it, so handlers never test versions to read.
Responses are written from plain dicts (or Msg): a missing field takes its default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocols.kafka.codec import types as t
from protocols.kafka.codec.declare import MISSING, Api, Array, Field
from protocols.kafka.codec.errors import DecodeError


class Msg(dict):
    """A decoded message: a dict whose keys are also attributes."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


_FIXED = {"int8": t.INT8, "int16": t.INT16, "int32": t.INT32, "int64": t.INT64, "uint16": t.UINT16,
          "uint32": t.UINT32, "float64": t.FLOAT64, "bool": t.BOOLEAN, "uuid": t.UUID_CODEC}


class StructCodec(t.Codec):
    def __init__(self, fields: list[tuple[str, t.Codec]], tagged: dict[int, tuple[str, t.Codec]],
                 absent: dict[str, Any], flexible: bool) -> None:
        self.fields = fields
        self.tagged = tagged
        self.absent = absent
        self.flexible = flexible
        self.min_bytes = sum(codec.min_bytes for _, codec in fields) + (1 if flexible else 0)
        self.defaults = {name: codec.default for name, codec in fields}

    def read(self, r: t.Reader) -> Msg:
        msg = Msg(self.absent)
        for name, codec in self.fields:
            msg[name] = codec.read(r)
        if self.flexible:
            for _ in range(r.uvarint()):
                tag = r.uvarint()
                size = r.uvarint()
                data = r.take(size)
                known = self.tagged.get(tag)
                if known is not None:
                    sub = t.Reader(data)
                    msg[known[0]] = known[1].read(sub)
            for tag, (name, codec) in self.tagged.items():
                msg.setdefault(name, codec.default)
        return msg

    def write(self, out: bytearray, value: Mapping[str, Any]) -> None:
        get = value.get
        for name, codec in self.fields:
            item = get(name, MISSING)
            codec.write(out, self.defaults[name] if item is MISSING else item)
        if self.flexible:
            present = [(tag, name, codec) for tag, (name, codec) in sorted(self.tagged.items())
                       if get(name, None) not in (None, codec.default)]
            t.write_uvarint(out, len(present))
            for tag, name, codec in present:
                data = bytearray()
                codec.write(data, value[name])
                t.write_uvarint(out, tag)
                t.write_uvarint(out, len(data))
                out += data


class _NullableStruct(t.Codec):
    """A struct that may be null: an int8 marker (-1: null, 1: a struct follows), as Kafka writes it."""

    default = None
    min_bytes = 1

    def __init__(self, inner: StructCodec) -> None:
        self.inner = inner

    def read(self, r: t.Reader) -> Msg | None:
        return None if t.INT8.read(r) < 0 else self.inner.read(r)

    def write(self, out: bytearray, value: Mapping[str, Any] | None) -> None:
        t.INT8.write(out, -1 if value is None else 1)
        if value is not None:
            self.inner.write(out, value)


def _codec(type_: Any, version: int, flexible: bool, nullable: bool) -> t.Codec:
    if isinstance(type_, tuple):
        struct = compile_struct(type_, version, flexible)
        return _NullableStruct(struct) if nullable else struct
    if isinstance(type_, Array):
        return t.Array(_codec(type_.item, version, flexible, False), flexible, nullable)
    if type_ == "string":
        return t.String(flexible, nullable)
    if type_ in ("bytes", "records"):
        return t.Bytes(flexible, nullable or type_ == "records")
    return _FIXED[type_]


def _default(field: Field, version: int, flexible: bool) -> Any:
    if field.default is not MISSING:
        return field.default
    if isinstance(field.type, Array):
        return None if version in field.nullable else []
    if isinstance(field.type, tuple):
        return None
    return _codec(field.type, version, flexible, version in field.nullable).default


def compile_struct(fields: tuple[Field, ...], version: int, flexible: bool) -> StructCodec:
    plain: list[tuple[str, t.Codec]] = []
    tagged: dict[int, tuple[str, t.Codec]] = {}
    absent: dict[str, Any] = {}
    for field in fields:
        if version not in field.versions:
            absent[field.name] = _default(field, version, flexible)
            continue
        codec = _codec(field.type, version, flexible, version in field.nullable)
        if field.default is not MISSING:
            codec = _WithDefault(codec, field.default)
        if field.tag is not None and flexible and version in field.tagged:
            tagged[field.tag] = (field.name, codec)
        else:
            plain.append((field.name, codec))
    return StructCodec(plain, tagged, absent, flexible)


class _WithDefault(t.Codec):
    """A codec whose default (for writing a missing field) is the declaration's."""

    def __init__(self, inner: t.Codec, default: Any) -> None:
        self.inner = inner
        self.default = default
        self.min_bytes = inner.min_bytes
        self.read = inner.read
        self.write = inner.write


_REQUESTS: dict[tuple[int, int], StructCodec] = {}
_RESPONSES: dict[tuple[int, int], StructCodec] = {}


def request_codec(api: Api, version: int) -> StructCodec:
    codec = _REQUESTS.get((api.key, version))
    if codec is None:
        codec = _REQUESTS[api.key, version] = compile_struct(api.request, version, api.is_flexible(version))
    return codec


def response_codec(api: Api, version: int) -> StructCodec:
    codec = _RESPONSES.get((api.key, version))
    if codec is None:
        codec = _RESPONSES[api.key, version] = compile_struct(api.response, version, api.is_flexible(version))
    return codec


def compile_all(api: Api) -> None:
    """Compile every served version now (at import), so no request pays for it."""
    for version in range(api.versions[0], api.versions[1] + 1):
        request_codec(api, version)
        response_codec(api, version)


def decode_request(api: Api, version: int, body: memoryview) -> Msg:
    reader = t.Reader(body)
    try:
        msg = request_codec(api, version).read(reader)
    except DecodeError:
        raise
    except (ValueError, IndexError, KeyError) as exc:
        raise DecodeError(f"{api.name} v{version}: {exc}") from None
    # Bytes after the last field are ignored, as Kafka's own parser ignores them: librdkafka 2.16
    # sends three extra bytes in some Metadata v11 requests, which Kafka answers normally.
    return msg


def encode_response(api: Api, version: int, body: Mapping[str, Any], out: bytearray) -> None:
    response_codec(api, version).write(out, body)

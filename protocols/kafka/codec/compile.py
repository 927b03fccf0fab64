"""Compile the declarations of schema/ into one codec per (API, version, direction), at import.

Each struct's read and write are generated as Python source for its fields and compiled once: a run
of consecutive fixed-width fields (most of a partition's entry) is one bounded struct call, other
fields call their type's codec (types.py), nested structs their own generated functions.

Decoded messages are `Msg` dicts with attribute access; every field of the declaration is present,
with its default when the version does not carry it, so handlers never test versions to read. Each
struct gets its own Msg subclass whose fields are properties over the dict's items: reading a field
as an attribute then costs a dict lookup, not a failed attribute search and a caught exception.
Responses are written from plain dicts (or Msg): a missing field takes its default.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from operator import itemgetter
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


def _message_type(names: list[str]) -> type[Msg]:
    """A Msg subclass with a property per field (names that are dict methods stay items only)."""
    fields = {name: property(itemgetter(name)) for name in names if not hasattr(dict, name)}
    return type("Msg", (Msg,), {"__slots__": (), **fields})


_FIXED = {"int8": t.INT8, "int16": t.INT16, "int32": t.INT32, "int64": t.INT64, "uint16": t.UINT16,
          "uint32": t.UINT32, "float64": t.FLOAT64, "bool": t.BOOLEAN, "uuid": t.UUID_CODEC}


def _runs(fields: list[tuple[str, t.Codec]]) -> list[tuple[str, t.Codec] | list[tuple[str, t.Fixed]]]:
    """The fields in order, each run of consecutive fixed-width ones gathered in a list."""
    steps: list = []
    for name, codec in fields:
        if isinstance(codec, t.Fixed):
            if steps and isinstance(steps[-1], list):
                steps[-1].append((name, codec))
            else:
                steps.append([(name, codec)])
        else:
            steps.append((name, codec))
    return steps


def _generate(fields: list[tuple[str, t.Codec]], flexible: bool) -> tuple[str, dict[str, Any]]:
    """Python source of read(r) and write(out, value) for one struct, and the constants they use.

    A run of fixed-width fields (most of a partition's entry) is one struct call; other fields call
    their codec. Reading bounds the run by the bytes left first, as Reader.unpack does."""
    constants: dict[str, Any] = {"DecodeError": DecodeError, "struct": struct}
    steps = _runs(fields)
    read = ["def read(r):", "    msg = new(absent)"]
    if any(isinstance(step, list) for step in steps):
        read.append("    buf = r.buf")
    write = ["def write(out, value):", "    get = value.get", "    try:"]
    local = False   # whether the position is in the local `pos` (runs) rather than in r.pos (codecs)
    for index, step in enumerate(steps):
        if isinstance(step, list):
            fmt = struct.Struct(">" + "".join(codec.fmt.format.lstrip(">") for _, codec in step))
            constants[f"unpack{index}"], constants[f"pack{index}"] = fmt.unpack_from, fmt.pack
            targets = "".join(f"msg[{name!r}], " for name, _ in step)
            if not local:
                read.append("    pos = r.pos")
                local = True
            read += [f"    if pos + {fmt.size} > r.end:", '        raise DecodeError(f"truncated at {pos}")',
                     f"    {targets}= unpack{index}(buf, pos)", f"    pos += {fmt.size}"]
            for name, codec in step:
                constants[f"default_{name}"] = codec.default
            values = ", ".join(f"get({name!r}, default_{name})" for name, _ in step)
            write.append(f"        out += pack{index}({values})")
        else:
            name, codec = step
            constants[f"read_{name}"], constants[f"write_{name}"] = codec.read, codec.write
            constants[f"default_{name}"] = codec.default
            if local:
                read.append("    r.pos = pos")
                local = False
            read.append(f"    msg[{name!r}] = read_{name}(r)")
            write.append(f"        write_{name}(out, get({name!r}, default_{name}))")
    if local:
        read.append("    r.pos = pos")
    if flexible:
        read.append("    read_tagged(msg, r)")
        write.append("        write_tagged(out, value)")
    read.append("    return msg")
    if write[-1] == "    try:":   # no field at all
        write.append("        pass")
    write += ["    except struct.error as exc:", "        raise ValueError(str(exc)) from exc"]
    return "\n".join(read + write) + "\n", constants


class StructCodec(t.Codec):
    """A struct's codec: read and write are generated for its fields when it is built."""

    def __init__(self, fields: list[tuple[str, t.Codec]], tagged: dict[int, tuple[str, t.Codec]],
                 absent: dict[str, Any], flexible: bool) -> None:
        self.fields = fields
        self.tagged = tagged
        self._tags_in_order = [(tag, name, codec) for tag, (name, codec) in sorted(tagged.items())]
        self.absent = absent
        self.flexible = flexible
        self.min_bytes = sum(codec.min_bytes for _, codec in fields) + (1 if flexible else 0)
        message_type = _message_type([*absent, *(name for name, _ in fields), *(name for name, _ in tagged.values())])
        source, namespace = _generate(fields, flexible)
        namespace.update(new=message_type, absent=absent, read_tagged=self._read_tagged,
                         write_tagged=self._write_tagged)
        where = f"<{type(self).__name__} of {', '.join(name for name, _ in fields) or 'no fields'}>"
        exec(compile(source, where, "exec"), namespace)
        self.read = namespace["read"]
        self.write = namespace["write"]

    def _read_tagged(self, msg: Msg, r: t.Reader) -> None:
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

    def _write_tagged(self, out: bytearray, value: Mapping[str, Any]) -> None:
        get = value.get
        present = [(tag, name, codec) for tag, name, codec in self._tags_in_order
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
            fixed = isinstance(codec, t.Fixed)
            codec = t.Fixed(codec.fmt, field.default) if fixed else _WithDefault(codec, field.default)
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

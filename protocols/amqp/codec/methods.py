"""Method frame payloads: class id, method id, arguments; compiled from spec.METHODS at import.

Arguments are dicts keyed by the field's Python name ("routing_key"). Consecutive bit fields share
octets (eight to an octet, lowest bit first); every length is bounded by the bytes left in the
payload; a decode must consume the payload exactly. Short strings of methods without content must
be UTF-8 (RabbitMQ checks them, with FRAME_ERROR); those of content-bearing methods are not checked
(RabbitMQ skips the check for speed) and decode losslessly with surrogateescape.

Three ways to read arguments, fastest first: methods whose fields are all fixed-width take one
struct call; methods of fixed-width fields and short strings (basic.publish, basic.deliver...) get
straight-line source generated at import, which reads a well-formed payload with no call per field;
every other payload, and any payload those two refuse, is read field by field by `Reader`, which
names what is wrong.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from protocols.amqp.codec.errors import frame_error
from protocols.amqp.codec.field_table import decode_table, put_table
from protocols.amqp.codec.primitives import U8, U16, U32, U64, Reader, put, put_longstr, put_shortstr
from protocols.amqp.spec import METHODS, METHODS_BY_ID, METHODS_BY_NAME, NO_DEFAULT, Domain, Field, Method

Decoder = Callable[[Reader, dict[str, Any]], None]
Encoder = Callable[[bytearray, Mapping[str, Any]], None]


@dataclass(frozen=True, slots=True)
class _Codec:
    method: Method
    prefix: bytes                 # class id and method id, packed
    decoders: tuple[Decoder, ...]
    encoders: tuple[Encoder, ...]
    defaults: Mapping[str, Any]
    names: frozenset[str]
    fixed: "_FixedLayout | None"   # every field fixed-width (basic.ack, basic.qos...): one struct call
    straight: "Callable[[bytes, int], dict | None] | None"   # fixed-width and short strings: generated


_FIXED_FORMATS = {Domain.OCTET: "B", Domain.SHORT: "H", Domain.LONG: "I", Domain.LONGLONG: "Q",
                  Domain.TIMESTAMP: "Q", Domain.BIT: "B"}


@dataclass(frozen=True, slots=True)
class _FixedLayout:
    """Arguments that are all fixed-width (numbers and bit octets), read with one struct call."""
    fmt: struct.Struct
    slots: tuple[str | tuple[str, ...], ...]     # a field's name, or the names of one bit octet

    @classmethod
    def of(cls, groups: list[list[Field]]) -> "_FixedLayout | None":
        if not all(group[0].domain in _FIXED_FORMATS for group in groups):
            return None
        fmt = struct.Struct(">" + "".join(_FIXED_FORMATS[group[0].domain] for group in groups))
        return cls(fmt, tuple(tuple(f.attr for f in group) if group[0].domain is Domain.BIT else group[0].attr
                              for group in groups))

    def decode(self, payload: bytes, offset: int) -> dict[str, Any]:
        args: dict[str, Any] = {}
        for slot, value in zip(self.slots, self.fmt.unpack_from(payload, offset)):
            if slot.__class__ is str:
                args[slot] = value
            else:
                for index, attr in enumerate(slot):
                    args[attr] = bool(value & (1 << index))
        return args


_STRAIGHT_LINE_DOMAINS = set(_FIXED_FORMATS) | {Domain.SHORTSTR}


def _straight_line_decoder(m: Method, groups: list[list[Field]]) -> Callable[[bytes, int], dict | None] | None:
    """Generated source reading `m`'s arguments from a payload at an offset: the dict, or None for
    anything but a well-formed payload (then the field-by-field reader raises the right error)."""
    if not all(group[0].domain in _STRAIGHT_LINE_DOMAINS for group in groups) \
            or not any(group[0].domain is Domain.SHORTSTR for group in groups):
        return None
    text = "'utf-8'" if not m.has_content else "'utf-8', 'surrogateescape'"
    lines = ["def decode(payload, offset):", "    try:", "        end = len(payload)", "        pos = offset"]
    values: list[str] = []
    for index, group in enumerate(groups):
        domain = group[0].domain
        if domain is Domain.SHORTSTR:
            lines += ["        size = payload[pos]; pos += 1",
                      "        if pos + size > end: return None",
                      f"        v{index} = payload[pos:pos + size].decode({text}); pos += size"]
            values.append(f"{group[0].attr!r}: v{index}")
        else:
            fmt = struct.Struct(">" + _FIXED_FORMATS[domain])
            lines.append(f"        v{index} = _unpack_{fmt.format[1]}(payload, pos)[0]; pos += {fmt.size}")
            if domain is Domain.BIT:
                values += [f"{f.attr!r}: v{index} & {1 << bit} != 0" for bit, f in enumerate(group)]
            else:
                values.append(f"{group[0].attr!r}: v{index}")
    lines += ["        if pos != end: return None", "        return {" + ", ".join(values) + "}",
              "    except Exception:  # short, malformed, or not bytes: the careful reader says which",
              "        return None"]
    namespace = {f"_unpack_{code}": struct.Struct(">" + code).unpack_from for code in "BHIQ"}
    exec(compile("\n".join(lines), f"<decoder of {m.name}>", "exec"), namespace)
    return namespace["decode"]


def _field_groups(fields: tuple[Field, ...]) -> list[list[Field]]:
    """Fields in wire order, with each run of consecutive bits (up to 8) as one group."""
    groups: list[list[Field]] = []
    for f in fields:
        if f.domain is Domain.BIT and groups and groups[-1][0].domain is Domain.BIT and len(groups[-1]) < 8:
            groups[-1].append(f)
        else:
            groups.append([f])
    return groups


def _bits_decoder(attrs: tuple[str, ...]) -> Decoder:
    def decode(reader: Reader, args: dict[str, Any]) -> None:
        packed = reader.octet()
        for index, attr in enumerate(attrs):
            args[attr] = bool(packed & (1 << index))
    return decode


def _bits_encoder(attrs: tuple[str, ...]) -> Encoder:
    def encode(out: bytearray, args: Mapping[str, Any]) -> None:
        packed = 0
        for index, attr in enumerate(attrs):
            if args[attr]:
                packed |= 1 << index
        out.append(packed)
    return encode


def _field_decoder(f: Field, strict_text: bool) -> Decoder:
    attr = f.attr
    read: Callable[[Reader], Any]
    if f.domain is Domain.SHORTSTR:
        def read(reader: Reader) -> Any:
            return reader.shortstr(strict=strict_text)
    else:
        read = {
            Domain.OCTET: Reader.octet, Domain.SHORT: Reader.short, Domain.LONG: Reader.long,
            Domain.LONGLONG: Reader.longlong, Domain.TIMESTAMP: Reader.longlong,
            Domain.LONGSTR: Reader.longstr, Domain.TABLE: decode_table,
        }[f.domain]

    def decode(reader: Reader, args: dict[str, Any]) -> None:
        args[attr] = read(reader)
    return decode


def _field_encoder(f: Field) -> Encoder:
    attr = f.attr
    write: Callable[[bytearray, Any], None] = {
        Domain.OCTET: lambda out, v: put(out, U8, v), Domain.SHORT: lambda out, v: put(out, U16, v),
        Domain.LONG: lambda out, v: put(out, U32, v), Domain.LONGLONG: lambda out, v: put(out, U64, v),
        Domain.TIMESTAMP: lambda out, v: put(out, U64, v), Domain.SHORTSTR: put_shortstr,
        Domain.LONGSTR: put_longstr, Domain.TABLE: put_table,
    }[f.domain]

    def encode(out: bytearray, args: Mapping[str, Any]) -> None:
        write(out, args[attr])
    return encode


def _compile(m: Method) -> _Codec:
    decoders: list[Decoder] = []
    encoders: list[Encoder] = []
    strict_text = not m.has_content
    groups = _field_groups(m.fields)
    for group in groups:
        if group[0].domain is Domain.BIT:
            attrs = tuple(f.attr for f in group)
            decoders.append(_bits_decoder(attrs))
            encoders.append(_bits_encoder(attrs))
        else:
            decoders.append(_field_decoder(group[0], strict_text))
            encoders.append(_field_encoder(group[0]))
    defaults = {f.attr: f.default for f in m.fields if f.default is not NO_DEFAULT}
    return _Codec(m, U16.pack(m.class_id) + U16.pack(m.method_id), tuple(decoders), tuple(encoders),
                  defaults, frozenset(f.attr for f in m.fields), _FixedLayout.of(groups),
                  _straight_line_decoder(m, groups))


_CODECS: dict[tuple[int, int], _Codec] = {m.key: _compile(m) for m in METHODS}


def method_key(payload: bytes) -> tuple[int, int]:
    """The (class id, method id) a method frame payload starts with."""
    if len(payload) < 4:
        raise frame_error(f"method frame payload of {len(payload)} bytes has no class and method id")
    return U16.unpack_from(payload, 0)[0], U16.unpack_from(payload, 2)[0]


def lookup(class_id: int, method_id: int) -> Method | None:
    return METHODS_BY_ID.get((class_id, method_id))


def decode_method(payload: bytes) -> tuple[Method, dict[str, Any]]:
    """A method frame payload as (declaration, arguments). Every failure is a DecodeError."""
    key = method_key(payload)
    codec = _CODECS.get(key)
    if codec is None:
        raise frame_error(f"unknown method {key[0]}.{key[1]}")
    return codec.method, decode_arguments(codec.method, payload, 4)


def decode_arguments(method: Method, payload: bytes, offset: int = 4) -> dict[str, Any]:
    codec = _CODECS[method.key]
    fixed = codec.fixed
    if fixed is not None and len(payload) - offset == fixed.fmt.size:
        return fixed.decode(payload, offset)
    straight = codec.straight
    if straight is not None:
        args = straight(payload, offset)
        if args is not None:
            return args
    return _field_by_field(codec, payload, offset)


def _field_by_field(codec: _Codec, payload: bytes, offset: int) -> dict[str, Any]:
    """Variable-width fields, or a payload of the wrong size (whose error this names)."""
    reader = Reader(payload, offset)
    args: dict[str, Any] = {}
    for decode in codec.decoders:
        decode(reader, args)
    if reader.remaining:
        raise frame_error(f"{codec.method.name}: {reader.remaining} bytes left over after the last field")
    return args


def complete_arguments(method: Method | str, args: Mapping[str, Any]) -> dict[str, Any]:
    """`args` with defaults filled in; TypeError for unknown or missing required arguments."""
    codec = _codec(method)
    unknown = set(args) - codec.names
    if unknown:
        raise TypeError(f"{codec.method.name} has no argument(s) {sorted(unknown)}")
    full = {**codec.defaults, **args}
    missing = codec.names - set(full)
    if missing:
        raise TypeError(f"{codec.method.name} needs argument(s) {sorted(missing)}")
    return full


def encode_method(method: Method | str, args: Mapping[str, Any] | None = None, /, **kwargs: Any) -> bytes:
    """A method frame payload. Arguments may be left out where the spec declares a default.
    TypeError for unknown or missing arguments, ValueError for values the wire cannot carry."""
    codec = _codec(method)
    full = complete_arguments(codec.method, {**(args or {}), **kwargs})
    out = bytearray(codec.prefix)
    for encode in codec.encoders:
        encode(out, full)
    return bytes(out)


def _codec(method: Method | str) -> _Codec:
    if isinstance(method, str):
        method = METHODS_BY_NAME[method]
    return _CODECS[method.key]

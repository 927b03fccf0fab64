"""Hypothesis strategies for AMQP values, derived from the spec table."""

from __future__ import annotations

import decimal

from hypothesis import strategies as st

from protocols.amqp.codec.field_table import (
    ByteArray, Float32, Int8, Int16, Int32, Int64, Timestamp, UInt8, UInt16, UInt32,
)
from protocols.amqp.codec.properties import BasicProperties
from protocols.amqp.spec import BASIC_PROPERTIES, Domain, Method


def shortstr() -> st.SearchStrategy[str]:
    return st.text(max_size=63)   # at most 4 UTF-8 bytes a character: always within 255 bytes


def _decimals() -> st.SearchStrategy[decimal.Decimal]:
    return st.builds(lambda unscaled, scale: decimal.Decimal(unscaled).scaleb(-scale),
                     st.integers(0, 2**32 - 1), st.integers(0, 20))


def field_values() -> st.SearchStrategy:
    """Every RabbitMQ field type, nested through tables and arrays."""
    scalars = st.one_of(
        st.booleans(),
        st.integers(-128, 127).map(Int8), st.integers(0, 255).map(UInt8),
        st.integers(-2**15, 2**15 - 1).map(Int16), st.integers(0, 2**16 - 1).map(UInt16),
        st.integers(-2**31, 2**31 - 1).map(Int32), st.integers(0, 2**32 - 1).map(UInt32),
        st.integers(-2**63, 2**63 - 1).map(Int64),
        st.floats(width=32, allow_nan=False).map(Float32), st.floats(allow_nan=False),
        _decimals(), st.text(max_size=30), st.binary(max_size=30).map(ByteArray),
        st.integers(0, 2**64 - 1).map(Timestamp), st.none(),
    )
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(shortstr(), inner, max_size=4),
    ), max_leaves=20)


def field_tables() -> st.SearchStrategy[dict]:
    return st.dictionaries(shortstr(), field_values(), max_size=6)


def light_tables() -> st.SearchStrategy[dict]:
    """Cheap tables for method and property round trips (field_tables covers the types in depth)."""
    values = st.booleans() | st.integers(-2**31, 2**31 - 1).map(Int32) | st.text(max_size=8) | st.none()
    return st.dictionaries(st.text(max_size=8), values | st.lists(values, max_size=2), max_size=3)


def domain_values(domain: Domain) -> st.SearchStrategy:
    return {
        Domain.OCTET: st.integers(0, 255), Domain.SHORT: st.integers(0, 2**16 - 1),
        Domain.LONG: st.integers(0, 2**32 - 1), Domain.LONGLONG: st.integers(0, 2**64 - 1),
        Domain.TIMESTAMP: st.integers(0, 2**64 - 1), Domain.BIT: st.booleans(),
        Domain.SHORTSTR: shortstr(), Domain.LONGSTR: st.binary(max_size=60), Domain.TABLE: light_tables(),
    }[domain]


def method_args(method: Method) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({f.attr: domain_values(f.domain) for f in method.fields})


def basic_properties(all_set: bool = False) -> st.SearchStrategy[BasicProperties]:
    def value(prop):
        strategy = domain_values(prop.domain)
        return strategy if all_set else st.none() | strategy
    return st.builds(BasicProperties, **{p.attr: value(p) for p in BASIC_PROPERTIES})

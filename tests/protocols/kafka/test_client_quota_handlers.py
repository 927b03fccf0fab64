"""DescribeClientQuotas and AlterClientQuotas, each call through the wire format both ways."""

from __future__ import annotations

import pytest

from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.handlers import alter_client_quotas as alter
from protocols.kafka.handlers import describe_client_quotas as describe
from test_admin_handlers import broker, call  # noqa: F401 (fixture)

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def entry(entity: dict, **ops) -> dict:
    return {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
            "ops": [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in ops.items()]}


async def set_quotas(broker, *entries, validate_only=False, version=1) -> list[tuple[int, str | None]]:
    response = await call(broker, alter, version, {"entries": list(entries), "validate_only": validate_only})
    return [(e.error_code, e.error_message) for e in response.entries]


async def described(broker, components, strict=False, version=1):
    response = await call(broker, describe, version, {"components": [
        {"entity_type": t, "match_type": m, "match": n} for t, m, n in components], "strict": strict})
    if response.error_code:
        return response.error_code
    entries = [(tuple((e.entity_type, e.entity_name) for e in x.entity), tuple((v.key, v.value) for v in x["values"]))
               for x in response.entries]
    return sorted(entries, key=repr)


@pytest.mark.parametrize("version", [0, 1])
async def test_set_quotas_are_described_through_filters(broker, version) -> None:
    assert await set_quotas(broker, entry({"user": "alice"}, producer_byte_rate=1024.0),
                            entry({"user": None, "client-id": "app"}, consumer_byte_rate=2048.0),
                            entry({"client-id": None}, producer_byte_rate=10.0), version=version) == [(0, None)] * 3
    alice = ((("user", "alice"),), (("producer_byte_rate", 1024.0),))
    default_user_app = ((("user", None), ("client-id", "app")), (("consumer_byte_rate", 2048.0),))
    default_client = ((("client-id", None),), (("producer_byte_rate", 10.0),))
    assert await described(broker, [], version=version) == sorted([alice, default_user_app, default_client], key=repr)
    assert await described(broker, [("user", EXACT, "alice")]) == [alice]
    assert await described(broker, [("user", DEFAULT, None)]) == [default_user_app]
    assert await described(broker, [("user", DEFAULT, None)], strict=True) == []
    assert await described(broker, [("user", SPECIFIED, None)]) == [alice]
    assert await described(broker, [("client-id", SPECIFIED, None)]) == [default_user_app]


async def test_validate_only_stores_nothing_and_removal_deletes(broker) -> None:
    assert await set_quotas(broker, entry({"user": "bob"}, producer_byte_rate=5.0), validate_only=True) == [(0, None)]
    assert await described(broker, []) == []
    await set_quotas(broker, entry({"user": "bob"}, producer_byte_rate=5.0))
    await set_quotas(broker, entry({"user": "bob"}, producer_byte_rate=None))
    assert await described(broker, []) == []


async def test_each_bad_entry_is_refused_on_its_own(broker) -> None:
    results = await set_quotas(broker, entry({"group": "g"}, producer_byte_rate=1.0),
                               entry({"user": "u"}, request_percentage=50.0),
                               entry({"user": "u"}, no_such_key=1.0),
                               entry({"user": "ok"}, consumer_byte_rate=3.0))
    assert [code for code, _ in results] == [ErrorCode.INVALID_REQUEST] * 3 + [ErrorCode.NONE]
    assert await described(broker, []) == [((("user", "ok"),), (("consumer_byte_rate", 3.0),))]
    assert await described(broker, [("user", EXACT, "a"), ("user", EXACT, "b")]) == ErrorCode.INVALID_REQUEST
    assert await described(broker, [("ip", DEFAULT, None)]) == ErrorCode.INVALID_REQUEST

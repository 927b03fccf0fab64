"""DescribeUserScramCredentials and AlterUserScramCredentials against a real core's user store,
each call through the wire format both ways."""

from __future__ import annotations

import hashlib

import pytest

from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.handlers import alter_user_scram_credentials as alter
from protocols.kafka.handlers import describe_user_scram_credentials as describe
from test_admin_handlers import broker, call  # noqa: F401 (fixture)

SHA256, SHA512 = 1, 2


def upsert(name: str, mechanism: int = SHA256, password: bytes = b"secret", iterations: int = 4096,
           salt: bytes = b"salt") -> dict:
    hash_name = "sha256" if mechanism == SHA256 else "sha512"
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt,
            "salted_password": hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)}


async def alter_call(broker, deletions=(), upsertions=()) -> dict[str, tuple[int, str | None]]:
    response = await call(broker, alter, 0, {"deletions": list(deletions), "upsertions": list(upsertions)})
    return {r.user: (r.error_code, r.error_message) for r in response.results}


async def test_an_upserted_credential_is_described_and_logs_in_with_its_password(broker) -> None:
    assert await alter_call(broker, upsertions=[upsert("dora", SHA512, b"pw", 8192)]) == {"dora": (0, None)}
    response = await call(broker, describe, 0, {"users": [{"name": "dora"}]})
    (result,) = response.results
    assert (result.error_code, [(i.mechanism, i.iterations) for i in result.credential_infos]) == (0, [(SHA512, 8192)])
    assert await broker.users.verify("dora", "pw") is not None
    assert await broker.users.verify("dora", "other") is None


async def test_each_user_gets_kafkas_error_and_none_of_its_changes_apply(broker) -> None:
    await alter_call(broker, upsertions=[upsert("erin")])
    results = await alter_call(broker, deletions=[{"name": "erin", "mechanism": SHA512},
                                                  {"name": "fay", "mechanism": 7}],
                               upsertions=[upsert("erin", SHA256, b"new"), upsert("gus", iterations=100),
                                           upsert("hal", iterations=20000), upsert("", SHA256),
                                           upsert("ivy"), upsert("ivy")])
    assert {user: code for user, (code, _) in results.items()} == {
        "erin": ErrorCode.RESOURCE_NOT_FOUND, "fay": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        "gus": ErrorCode.UNACCEPTABLE_CREDENTIAL, "hal": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "": ErrorCode.UNACCEPTABLE_CREDENTIAL, "ivy": ErrorCode.DUPLICATE_RESOURCE}
    assert await broker.users.verify("erin", "secret") is not None   # erin's upsert did not apply
    assert await broker.users.get("gus") is None and await broker.users.get("ivy") is None


async def test_deleting_the_last_credential_removes_the_user(broker) -> None:
    await alter_call(broker, upsertions=[upsert("jo", SHA256), upsert("jo", SHA512)])
    assert await alter_call(broker, deletions=[{"name": "jo", "mechanism": SHA256}]) == {"jo": (0, None)}
    assert set((await broker.users.get("jo")).scram) == {"SCRAM-SHA-512"}
    await alter_call(broker, deletions=[{"name": "jo", "mechanism": SHA512}])
    assert await broker.users.get("jo") is None


@pytest.mark.parametrize("users", [None, []])
async def test_describing_no_names_lists_every_user_and_duplicates_or_unknowns_are_errors(broker, users) -> None:
    await alter_call(broker, upsertions=[upsert("kim"), upsert("lee", SHA512)])
    every = await call(broker, describe, 0, {"users": users})
    assert [r.user for r in every.results] == ["kim", "lee"]
    asked = await call(broker, describe, 0, {"users": [{"name": "kim"}, {"name": "kim"}, {"name": "zed"}]})
    assert [(r.user, r.error_code) for r in asked.results] == [
        ("kim", ErrorCode.DUPLICATE_RESOURCE), ("zed", ErrorCode.RESOURCE_NOT_FOUND)]

"""Bearer tokens: what the validator accepts and refuses, who a token names, and how often the key
set is read again."""

import asyncio
import hmac
import json
import time

import jwt
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from compat_tests.token_issuer import AUDIENCE, ISSUER, SigningKey, TokenIssuer
from core.auth import UserStore
from core.jwks import KeySet
from core.tokens import InvalidToken, TokenSettings, TokenValidator, looks_like_jwt, token_user

SETTINGS = TokenSettings(jwks_file="unused", issuer=ISSUER, audience=AUDIENCE)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def issuer() -> TokenIssuer:
    return TokenIssuer("RSA", "EC")


def validator(issuer: TokenIssuer, settings: TokenSettings = SETTINGS, clock=None) -> TokenValidator:
    keys = KeySet("memory", lambda: json.dumps(issuer.jwks()).encode(), clock=clock or time.monotonic)
    return TokenValidator(settings, keys)


async def test_a_valid_token_names_its_subject_with_either_key_type(issuer) -> None:
    check = validator(issuer)
    for key in issuer.keys:
        identity = await check.validate(issuer.mint("alice", key=key, lifetime_s=60))
        assert identity.principal == "alice" and identity.tenant is None
        assert time.time() + 50 < identity.expires_at <= time.time() + 61


@pytest.mark.parametrize("case", ["expired", "wrong issuer", "wrong audience", "unknown key", "garbage",
                                  "not yet valid", "no exp", "alg none", "hmac with the public key", "tampered"])
async def test_bad_tokens_are_refused(issuer, case: str) -> None:
    mint = issuer.mint
    token = {
        "expired": lambda: mint(lifetime_s=-120),
        "wrong issuer": lambda: mint(issuer="https://other.test"),
        "wrong audience": lambda: mint(audience="someone-else"),
        "unknown key": lambda: mint(key=SigningKey("RSA")),
        "garbage": lambda: "eyJhbGciOiJSUzI1NiJ9.not-base64!.x",
        "not yet valid": lambda: mint(nbf=int(time.time()) + 600),
        "no exp": lambda: jwt.encode({"sub": "alice", "iss": ISSUER, "aud": AUDIENCE}, issuer.keys[0].private,
                                     algorithm="RS256", headers={"kid": issuer.keys[0].kid}),
        "alg none": lambda: jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, None, algorithm="none"),
        "hmac with the public key": lambda: _hmac_with_public_key(issuer),
        "tampered": lambda: _tampered(mint()),
    }[case]()
    with pytest.raises(InvalidToken):
        await validator(issuer).validate(token)


def _hmac_with_public_key(issuer: TokenIssuer) -> str:
    # The classic confusion: HS256 keyed with the published (public) key's bytes, signed by hand
    # because PyJWT itself refuses to sign so.
    encode = lambda doc: jwt.utils.base64url_encode(json.dumps(doc).encode())   # noqa: E731
    signed = encode({"alg": "HS256", "kid": issuer.keys[0].kid}) + b"." \
        + encode({"sub": "mallory", "exp": int(time.time()) + 60})
    secret = json.dumps(issuer.jwks()["keys"][0]).encode()
    return (signed + b"." + jwt.utils.base64url_encode(hmac.digest(secret, signed, "sha256"))).decode()


def _tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(jwt.utils.base64url_decode(payload))
    claims["sub"] = "mallory"
    return ".".join((header, jwt.utils.base64url_encode(json.dumps(claims).encode()).decode(), signature))


async def test_issuer_and_audience_are_checked_only_where_configured(issuer) -> None:
    lax = validator(issuer, TokenSettings(jwks_file="unused"))
    assert (await lax.validate(issuer.mint(issuer="https://other.test", audience="x"))).principal == "alice"


async def test_the_principal_and_tenant_come_from_the_configured_claims(issuer) -> None:
    settings = TokenSettings(jwks_file="unused", principal_claim="preferred_username", tenant_claim="tenant")
    check = validator(issuer, settings)
    identity = await check.validate(issuer.mint(preferred_username="bob", tenant="acme/payments"))
    assert (identity.principal, identity.tenant, identity.namespace) == ("bob", "acme", "payments")
    assert (await check.validate(issuer.mint(preferred_username="bob", tenant="acme"))).namespace == "default"
    for claims in ({"tenant": "acme"}, {"preferred_username": "bob"}, {"preferred_username": "bob", "tenant": "a b"},
                   {"preferred_username": 7, "tenant": "acme"}):
        with pytest.raises(InvalidToken):
            await check.validate(issuer.mint(**claims))


async def test_a_stored_user_keeps_its_tenant_and_an_unknown_one_lands_where_the_token_says(core, issuer) -> None:
    users = UserStore(core.metadata)
    await users.put_user("carol", "pw-of-carol", tenant="acme", namespace="billing")
    settings = TokenSettings(jwks_file="unused", tenant_claim="tenant")
    check = validator(issuer, settings)
    stored = await token_user(users, await check.validate(issuer.mint("carol", tenant="other")))
    assert (stored.principal.tenant, stored.principal.namespace, bool(stored.scram)) == ("acme", "billing", True)
    unknown = await token_user(users, await check.validate(issuer.mint("dave@example.com", tenant="other")))
    assert (unknown.principal.user, unknown.principal.tenant, unknown.scram) == ("dave@example.com", "other", {})
    assert unknown.permission_on("other", "default") is not None and unknown.permission_on("public", "default") is None


async def test_an_unknown_key_id_reads_the_set_again_but_at_most_once_per_interval() -> None:
    issuer, clock = TokenIssuer("EC"), Clock()
    check = validator(issuer, TokenSettings(jwks_file="unused"), clock)
    await check.validate(issuer.mint())
    assert check.keys.reads == 1
    rotated = SigningKey("EC")
    forged = issuer.mint(key=rotated)
    # Many logins with a key id the set lacks, at once and one after another: one read per interval.
    results = await asyncio.gather(*(check.validate(forged) for _ in range(20)), return_exceptions=True)
    assert all(isinstance(r, InvalidToken) for r in results) and check.keys.reads == 1   # read 0 s ago
    clock.now += 11
    issuer.keys.append(rotated)                         # the issuer publishes its new key
    results = await asyncio.gather(*(check.validate(forged) for _ in range(20)))
    assert {r.principal for r in results} == {"alice"} and check.keys.reads == 2
    clock.now += 3600
    await check.validate(issuer.mint())                 # an hour old: read again, the login not waiting
    await asyncio.sleep(0.2)
    assert check.keys.reads == 3


async def test_an_unreadable_key_set_refuses_tokens_and_keeps_keys_read_before(issuer, tmp_path) -> None:
    path = tmp_path / "jwks.json"
    clock = Clock()
    keys = KeySet.from_file(str(path), clock=clock)
    check = TokenValidator(TokenSettings(jwks_file=str(path)), keys)
    with pytest.raises(InvalidToken):
        await check.validate(issuer.mint())             # no file yet
    issuer.write(path)
    clock.now += 11
    assert (await check.validate(issuer.mint())).principal == "alice"
    path.write_text("{not json")
    clock.now += 3600
    for _ in range(2):   # the stale set's background read fails: the old keys stand
        assert (await check.validate(issuer.mint())).principal == "alice"
        await asyncio.sleep(0.2)
    assert keys.reads == 3


def test_only_jwt_shaped_passwords_are_taken_for_tokens(issuer) -> None:
    assert looks_like_jwt(issuer.mint())
    assert not looks_like_jwt("guest") and not looks_like_jwt("eyJ.only-two") and not looks_like_jwt("a.b.c")


_b64 = lambda doc: jwt.utils.base64url_encode(json.dumps(doc).encode()).decode()   # noqa: E731
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                     max_leaves=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.dictionaries(st.sampled_from(["alg", "kid", "typ", "x"]), _json | st.sampled_from(["RS256", "ES256"])),
       claims=st.dictionaries(st.sampled_from(["sub", "exp", "iss", "aud", "nbf", "iat"]), _json),
       signature=st.binary(max_size=80), raw=st.text(max_size=60))
async def test_arbitrary_tokens_are_refused_with_invalid_token_only(issuer, header, claims, signature, raw) -> None:
    check = validator(issuer)
    forged = f"{_b64(header)}.{_b64(claims)}.{jwt.utils.base64url_encode(signature).decode()}"
    for token in (forged, raw, "eyJ" + raw):
        with pytest.raises(InvalidToken):
            await check.validate(token)

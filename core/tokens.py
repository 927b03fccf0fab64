"""Bearer tokens as identities: a JWT (RFC 7519) signed by a key of the configured key set
(core/jwks.py) names a user, whichever protocol carried it (Kafka's OAUTHBEARER, an AMQP password).

Checks, in order: the token parses; its header names an asymmetric algorithm (RS*, PS*, ES*, EdDSA;
never "none" or HMAC) and, by "kid", a key of the set (a token without "kid" may be signed by any key
of its type); the signature; "exp" is present and not past; "nbf" and "iat", where present, are
not in the future; "iss" and "aud" equal the configured issuer and audience where those are set.
Every comparison of times allows `clock_skew_s` (Kafka's sasl.oauthbearer.clock.skew.seconds).

Who the token names: the string in `principal_claim` (default "sub"). Where the user lands:
  - a user of the store (/users/<name>, core/auth.py) by that name is that user: its tenant,
    namespace, permissions and tags, as if it had logged in with its password;
  - any other name is a user known only to its connections, as Kafka accepts any valid token's
    principal: it lands in the tenant (and namespace) the `tenant_claim` names ("tenant" or
    "tenant/namespace"), else the default tenant and namespace, and may do there what a stored
    user without a permission list may (core/auth.py); Kafka ACLs name it "User:<name>".
With `tenant_claim` set, a token without that claim (or with a bad name in it) is refused.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt

from core.auth import Principal, User, UserStore
from core.errors import InvalidName
from core.jwks import KeySet, KeySetUnavailable
from core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, check_name

log = logging.getLogger("gateway.core.tokens")

ALGORITHMS_BY_KEY_TYPE = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "EC": ("ES256", "ES384", "ES512"),
    "OKP": ("EdDSA",),
}
ALGORITHMS = frozenset(alg for algs in ALGORITHMS_BY_KEY_TYPE.values() for alg in algs)
MAX_TOKEN_BYTES = 16 * 1024     # a JWT is a few hundred bytes to a few KiB
MAX_PRINCIPAL_CHARS = 255


class InvalidToken(Exception):
    """The token was refused; the message says why (for the log, not for the client)."""


@dataclass(frozen=True, slots=True)
class TokenSettings:
    jwks_url: str = ""
    jwks_file: str = ""
    issuer: str = ""              # "": not checked
    audience: str = ""            # "": not checked
    principal_claim: str = "sub"
    tenant_claim: str = ""        # "": every unknown user lands in the default tenant
    clock_skew_s: int = 30

    @property
    def enabled(self) -> bool:
        return bool(self.jwks_url or self.jwks_file)


@dataclass(frozen=True, slots=True)
class TokenIdentity:
    """What a valid token says."""

    principal: str
    tenant: str | None            # from the tenant claim; None without one configured
    namespace: str | None
    expires_at: float             # "exp", seconds since the epoch


def looks_like_jwt(text: str) -> bool:
    """Three base64url parts joined by dots, the first a JSON object ("eyJ" is '{"')."""
    return text.startswith("eyJ") and text.count(".") == 2 and len(text) <= MAX_TOKEN_BYTES


class TokenValidator:
    def __init__(self, settings: TokenSettings, keys: KeySet | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        if keys is None:
            keys = KeySet.from_url(settings.jwks_url) if settings.jwks_url else KeySet.from_file(settings.jwks_file)
        self.keys = keys
        self._clock = clock

    async def validate(self, token: str) -> TokenIdentity:
        if not token or len(token) > MAX_TOKEN_BYTES:
            raise InvalidToken("empty or oversized token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"malformed token: {exc}") from None
        algorithm, key_id = header.get("alg"), header.get("kid")
        if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
            raise InvalidToken(f"algorithm {algorithm!r} is not accepted")
        if key_id is not None and not isinstance(key_id, str):
            raise InvalidToken("malformed key id")
        try:
            candidates = [key for key in await self.keys.keys(key_id) if _fits(key, algorithm)]
        except KeySetUnavailable as exc:
            raise InvalidToken(str(exc)) from None
        if not candidates:
            raise InvalidToken(f"no key for key id {key_id!r} and algorithm {algorithm}")
        claims = None
        failure: Exception | None = None
        for jwk in candidates:
            try:
                claims = self._decode(token, jwk, algorithm)
                break
            except jwt.InvalidSignatureError as exc:
                failure = exc   # maybe another key of the set signed it
            except (jwt.PyJWTError, ValueError, TypeError, KeyError) as exc:   # a bad token or key
                raise InvalidToken(_reason(exc)) from None
        if claims is None:
            raise InvalidToken(_reason(failure))
        return self._identity(claims)

    def _decode(self, token: str, jwk: dict[str, Any], algorithm: str) -> dict[str, Any]:
        settings = self.settings
        key = jwt.PyJWK(jwk, algorithm).key
        return jwt.decode(
            token, key, algorithms=[algorithm],
            issuer=settings.issuer or None, audience=settings.audience or None, leeway=settings.clock_skew_s,
            options={"require": ["exp"], "verify_aud": bool(settings.audience), "verify_iss": bool(settings.issuer),
                     "verify_sub": False, "verify_jti": False})

    def _identity(self, claims: dict[str, Any]) -> TokenIdentity:
        principal = claims.get(self.settings.principal_claim)
        if not isinstance(principal, str) or not principal or len(principal) > MAX_PRINCIPAL_CHARS \
                or not principal.isprintable():
            raise InvalidToken(f"claim {self.settings.principal_claim!r} does not name a principal")
        tenant = namespace = None
        if self.settings.tenant_claim:
            tenant, namespace = _scope(claims.get(self.settings.tenant_claim), self.settings.tenant_claim)
        return TokenIdentity(principal, tenant, namespace, float(claims["exp"]))


def _fits(jwk: dict[str, Any], algorithm: str) -> bool:
    declared = jwk.get("alg")
    return algorithm in ALGORITHMS_BY_KEY_TYPE.get(jwk.get("kty"), ()) and declared in (None, algorithm)


def _scope(value: Any, claim: str) -> tuple[str, str]:
    if not isinstance(value, str):
        raise InvalidToken(f"claim {claim!r} is missing")
    tenant, _, namespace = value.partition("/")
    try:
        return check_name("tenant", tenant), check_name("namespace", namespace or DEFAULT_NAMESPACE)
    except InvalidName:
        raise InvalidToken(f"claim {claim!r} does not name a tenant: {value!r}") from None


def _reason(exc: Exception | None) -> str:
    if isinstance(exc, jwt.ExpiredSignatureError):
        return "the token has expired"
    return f"{type(exc).__name__}: {exc}" if exc is not None else "no key verified the signature"


async def token_user(users: UserStore, identity: TokenIdentity) -> User:
    """The user a valid token logs in as (see the module's docstring)."""
    stored = await users.get(identity.principal)
    if stored is not None:
        return stored
    return User(Principal(identity.principal, identity.tenant or DEFAULT_TENANT,
                          identity.namespace or DEFAULT_NAMESPACE), {})

"""SaslAuthenticate (key 36), versions 0-2.

Behaviour: carries the SASL exchange of the mechanism chosen by SaslHandshake. PLAIN: one round,
"authzid NUL user NUL password". SCRAM-SHA-256/512: two rounds (client-first → server-first,
client-final → server-final). OAUTHBEARER: one round, the client's bearer token (a JWT checked
against the configured key set, core/tokens.py); a refused token is answered with the JSON error
of RFC 7628 and fails once the client acknowledges it (protocols/kafka/sasl/oauthbearer.py).
On success the connection is authenticated as the user, whose tenant and namespace scope every
later request. On failure: SASL_AUTHENTICATION_FAILED, then the connection is closed after a short
delay (Kafka's connection.failed.authentication.delay.ms, 100 ms), and the refusal is written to
the audit log (core/audit.py).

Re-authentication (KIP-368): v1+ answers session_lifetime_ms, the time left until the token expires
(0 for PLAIN and SCRAM: their logins do not expire). A logged-in connection may run SaslHandshake
and SaslAuthenticate again; it must keep its mechanism and principal, else it is refused and closed.
Past its session lifetime a connection that has not re-authenticated is closed at its next request
(protocols/kafka/server.py), as Kafka does.
"""

import logging
import time

from core.auth import SCRAM_MECHANISMS, Principal
from core.tokens import InvalidToken, token_user
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.sasl.oauthbearer import INVALID_TOKEN, OAuthBearerError, parse_initial_response
from protocols.kafka.sasl.scram import ScramError, ScramServer
from protocols.kafka.schema.sasl_authenticate import SASL_AUTHENTICATE as API

log = logging.getLogger("gateway.kafka")

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"


async def handle(request: Msg, ctx: RequestContext) -> dict:
    session = ctx.session
    if not session.exchanging:
        session.close_after_response = True
        return _failure(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate outside a SASL handshake")
    token = bytes(request.auth_bytes or b"")
    if session.mechanism == PLAIN:
        return await _plain(token, ctx)
    if session.mechanism == OAUTHBEARER:
        return await _oauthbearer(token, ctx)
    return await _scram(token, ctx)


async def _plain(token: bytes, ctx: RequestContext) -> dict:
    parts = token.split(b"\0")
    if len(parts) != 3:
        return _refuse(ctx, "Authentication failed: Invalid SASL/PLAIN response", None)
    authzid, user, password = (part.decode("utf-8", "replace") for part in parts)
    principal = await ctx.broker.users.verify_password(user, password)
    if principal is None or (authzid and authzid != user):
        return _refuse(ctx, "Authentication failed: Invalid username or password", user)
    return _logged_in(ctx, principal)


async def _scram(token: bytes, ctx: RequestContext) -> dict:
    session = ctx.session
    mechanism = session.mechanism
    invalid = f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    try:
        if session.scram is None:
            session.scram = ScramServer(SCRAM_MECHANISMS[mechanism])
            name = session.scram.receive_first(token)
            user = await ctx.broker.users.get(name)
            if user is None or mechanism not in user.scram:
                return _refuse(ctx, invalid, name)
            session.scram_user = user
            return {"error_code": ErrorCode.NONE, "auth_bytes": session.scram.server_first(user.scram[mechanism])}
        server_final = session.scram.receive_final(token)
    except ScramError:
        return _refuse(ctx, invalid, session.scram_user.principal.user if session.scram_user else None)
    session.scram = None
    return _logged_in(ctx, session.scram_user.principal, server_final)


async def _oauthbearer(message: bytes, ctx: RequestContext) -> dict:
    session = ctx.session
    if session.token_refused is not None:
        return _refuse(ctx, session.token_refused, None)   # the client's %x01 after our error, or anything else
    try:
        initial = parse_initial_response(message)
    except OAuthBearerError as exc:
        return _refuse(ctx, f"Authentication failed: invalid OAUTHBEARER message: {exc}", None)
    if ctx.broker.tokens is None:   # the configuration refuses this; a broker built without tokens
        return _refuse(ctx, "Authentication failed: no token key set is configured", None)
    try:
        identity = await ctx.broker.tokens.validate(initial.token)
        if initial.authzid is not None and initial.authzid != identity.principal:
            raise InvalidToken("the authorization id differs from the token's principal")
    except InvalidToken as exc:
        log.info("OAUTHBEARER login from %s refused: %s", session.client_host, exc)
        session.token_refused = INVALID_TOKEN.decode()
        return {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": INVALID_TOKEN}
    user = await token_user(ctx.broker.users, identity)
    session.stored_user = bool(user.scram)
    return _logged_in(ctx, user.principal, expires_at=identity.expires_at)


def _logged_in(ctx: RequestContext, principal: Principal, auth_bytes: bytes = b"", *,
               expires_at: float | None = None) -> dict:
    """The exchange succeeded: a first login, or a re-authentication that must not change who it is."""
    session = ctx.session
    if session.principal is not None and (principal != session.principal
                                          or session.mechanism != session.logged_in_with):
        log.info("re-authentication from %s refused: %s with %s, was %s with %s", session.client_host,
                 principal.user, session.mechanism, session.principal.user, session.logged_in_with)
        return _refuse(ctx, "Re-authentication must keep the principal and the SASL mechanism", principal.user)
    lifetime_ms = 0
    session.expires_at = None
    if expires_at is not None:
        # Kafka's session lifetime: until the credential expires, and 0 (expired at once) if it has.
        lifetime_ms = max(0, int(expires_at * 1000 - time.time() * 1000))
        session.expires_at = time.monotonic() + lifetime_ms / 1000
    session.principal, session.logged_in_with, session.exchanging = principal, session.mechanism, False
    return {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": auth_bytes,
            "session_lifetime_ms": lifetime_ms}


def _refuse(ctx: RequestContext, message: str, user: str | None) -> dict:
    ctx.session.close_after_response = True
    client = ctx.session.client
    ctx.broker.core.audit.refused("login", "kafka", user, "login", f"bad credentials ({ctx.session.mechanism})",
                                  client.address if client is not None else None)
    return _failure(ErrorCode.SASL_AUTHENTICATION_FAILED, message)


def _failure(code: ErrorCode, message: str) -> dict:
    return {"error_code": code, "error_message": message, "auth_bytes": b""}

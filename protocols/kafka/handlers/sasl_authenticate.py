"""SaslAuthenticate (key 36), versions 0-2.

Behaviour: carries the SASL exchange of the mechanism chosen by SaslHandshake. PLAIN: one round,
"authzid NUL user NUL password". SCRAM-SHA-256/512: two rounds (client-first → server-first,
client-final → server-final). On success the connection is authenticated as the user, whose tenant
and namespace scope every later request. On failure: SASL_AUTHENTICATION_FAILED, then the
connection is closed after a short delay (Kafka's connection.failed.authentication.delay.ms, 100 ms),
and the refusal is written to the audit log (core/audit.py).
Gaps: no re-authentication (KIP-368): session_lifetime_ms is 0.
"""

from core.auth import SCRAM_MECHANISMS
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.sasl.scram import ScramError, ScramServer
from protocols.kafka.schema.sasl_authenticate import SASL_AUTHENTICATE as API

PLAIN = "PLAIN"


async def handle(request: Msg, ctx: RequestContext) -> dict:
    session = ctx.session
    if session.mechanism is None or session.authenticated:
        session.close_after_response = True
        return _failure(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate outside a SASL handshake")
    token = bytes(request.auth_bytes or b"")
    if session.mechanism == PLAIN:
        return await _plain(token, ctx)
    return await _scram(token, ctx)


async def _plain(token: bytes, ctx: RequestContext) -> dict:
    parts = token.split(b"\0")
    if len(parts) != 3:
        return _refuse(ctx, "Authentication failed: Invalid SASL/PLAIN response", None)
    authzid, user, password = (part.decode("utf-8", "replace") for part in parts)
    principal = await ctx.broker.users.verify_password(user, password)
    if principal is None or (authzid and authzid != user):
        return _refuse(ctx, "Authentication failed: Invalid username or password", user)
    ctx.session.principal = principal
    return {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": b""}


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
    session.principal = session.scram_user.principal
    session.scram = None
    return {"error_code": ErrorCode.NONE, "auth_bytes": server_final}


def _refuse(ctx: RequestContext, message: str, user: str | None) -> dict:
    ctx.session.close_after_response = True
    client = ctx.session.client
    ctx.broker.core.audit.refused("login", "kafka", user, "login", f"bad credentials ({ctx.session.mechanism})",
                                  client.address if client is not None else None)
    return _failure(ErrorCode.SASL_AUTHENTICATION_FAILED, message)


def _failure(code: ErrorCode, message: str) -> dict:
    return {"error_code": code, "error_message": message, "auth_bytes": b""}

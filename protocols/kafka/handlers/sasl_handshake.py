"""SaslHandshake (key 17), versions 0-1.

Behaviour: picks the mechanism for the SaslAuthenticate requests that follow (v1). Lists the
enabled mechanisms (of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER); an unknown one gets
UNSUPPORTED_SASL_MECHANISM, a handshake while an exchange is under way or a listener without SASL
ILLEGAL_SASL_STATE. On a connection already logged in it starts a re-authentication (KIP-368).
Gaps: v0 (raw SASL tokens after the handshake, pre-1.0 clients) is answered but the raw tokens
that would follow are not understood; every client in scope uses v1.
"""

from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.sasl_handshake import SASL_HANDSHAKE as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    enabled = list(ctx.broker.settings.sasl_mechanisms)
    session = ctx.session
    if not enabled or session.exchanging:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": enabled}
    if request.mechanism not in enabled:
        return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}
    session.mechanism, session.exchanging, session.token_refused = request.mechanism, True, None
    session.scram = None
    return {"error_code": ErrorCode.NONE, "mechanisms": enabled}

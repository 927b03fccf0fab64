"""ApiVersions (key 18), versions 0-3.

Behaviour: lists every API this broker has a handler for, at the versions declared (the registry
derives the list; nothing is kept by hand). A request at an unknown version is answered by the
connection layer in the v0 format with UNSUPPORTED_VERSION (KIP-511).
Gaps: no supported/finalized features (tagged fields of v3) are reported.
"""

from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.api_versions import API_VERSIONS as API


async def handle(request: Msg, ctx: RequestContext) -> dict:
    return {"error_code": ErrorCode.NONE, "api_keys": ctx.broker.api_versions, "throttle_time_ms": 0}

"""DescribeUserScramCredentials (key 50), version 0.

Behaviour: the SCRAM mechanisms and iteration counts of the asked users (a null or empty list: of
every user), as Kafka: a user asked twice is DUPLICATE_RESOURCE, an unknown one RESOURCE_NOT_FOUND.
Users are those of the gateway's user store (the config file's [[users]] and those added with
AlterUserScramCredentials). With ACLs enforced (SASL on) the request needs DESCRIBE on the
cluster, else the whole answer is CLUSTER_AUTHORIZATION_FAILED.
Gaps: user names are limited to the core's name alphabet ([A-Za-z0-9._-]).
"""

from collections import Counter

from protocols.kafka.authorization import Operation, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.describe_user_scram_credentials import DESCRIBE_USER_SCRAM_CREDENTIALS as API
from protocols.kafka.scram_mechanisms import CODE_BY_MECHANISM


async def handle(request: Msg, ctx: RequestContext) -> dict:
    if not await check_cluster(ctx, Operation.DESCRIBE):
        # As Kafka: the error at the top and for each asked user.
        refused = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        return _answer(*refused, [_user(user.name, *refused) for user in request.users or ()])
    users = ctx.broker.users
    asked = [user.name for user in request.users or ()]
    names = asked or await users.names()
    seen = Counter(asked)
    results = []
    for name in dict.fromkeys(names):
        if seen[name] > 1:
            results.append(_user(name, ErrorCode.DUPLICATE_RESOURCE,
                                 f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"))
            continue
        user = await users.get(name)
        if user is None or not user.scram:
            results.append(_user(name, ErrorCode.RESOURCE_NOT_FOUND,
                                 f"Attempt to describe a user credential that does not exist: {name}"))
            continue
        infos = sorted((CODE_BY_MECHANISM[m], c.iterations) for m, c in user.scram.items() if m in CODE_BY_MECHANISM)
        results.append(_user(name, ErrorCode.NONE, None,
                             [{"mechanism": code, "iterations": iterations} for code, iterations in infos]))
    return _answer(ErrorCode.NONE, None, results)


def _answer(error_code: int, message: str | None, results: list[dict]) -> dict:
    return {"throttle_time_ms": 0, "error_code": error_code, "error_message": message, "results": results}


def _user(name: str, error_code: int, message: str | None, infos: list[dict] | None = None) -> dict:
    return {"user": name, "error_code": error_code, "error_message": message, "credential_infos": infos or []}

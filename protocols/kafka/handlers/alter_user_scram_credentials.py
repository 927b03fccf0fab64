"""AlterUserScramCredentials (key 51), version 0.

Behaviour: deletes and sets (upserts) SCRAM credentials, one result per user, as Kafka: a user's
changes apply only if all of them are valid. Errors: an empty or illegal name
UNACCEPTABLE_CREDENTIAL, a mechanism other than SCRAM-SHA-256/512 UNSUPPORTED_SASL_MECHANISM,
iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL, the same user and mechanism twice
DUPLICATE_RESOURCE, deleting a credential that does not exist RESOURCE_NOT_FOUND. Only the
derived SCRAM keys of the client's salted password are stored. A new user lands in the caller's
tenant/namespace; it can log in with SCRAM, and with PLAIN (and AMQP) through either credential.
With ACLs enforced (SASL on) the request needs ALTER on the cluster, else every user is
CLUSTER_AUTHORIZATION_FAILED. The config file's [[users]] are stored again at every start.
Gaps: user names are limited to the core's name alphabet ([A-Za-z0-9._-]).
"""

from collections import Counter

from core.auth import SCRAM_MECHANISMS, ScramCredential
from core.errors import InvalidName
from core.names import check_name
from protocols.kafka.authorization import Operation, check_cluster
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.schema.alter_user_scram_credentials import ALTER_USER_SCRAM_CREDENTIALS as API
from protocols.kafka.scram_mechanisms import MAX_ITERATIONS, MECHANISM_BY_CODE, MIN_ITERATIONS


async def handle(request: Msg, ctx: RequestContext) -> dict:
    changes = [*request.deletions, *request.upsertions]
    users = list(dict.fromkeys(change.name for change in changes))
    if not await check_cluster(ctx, Operation.ALTER):
        return _answer([_result(name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
                        for name in users])
    twice = {key for key, count in Counter((c.name, c.mechanism) for c in changes).items() if count > 1}
    store = ctx.broker.users
    results = []
    for name in users:
        mine = [c for c in changes if c.name == name]
        refusal = _refusal(name, mine, twice)
        if refusal is None:
            refusal = await _missing_deletion(store, name, [d for d in request.deletions if d.name == name])
        if refusal is not None:
            results.append(_result(name, *refusal))
            continue
        for deletion in (d for d in request.deletions if d.name == name):
            await store.delete_scram(name, MECHANISM_BY_CODE[deletion.mechanism])
        for upsertion in (u for u in request.upsertions if u.name == name):
            mechanism = MECHANISM_BY_CODE[upsertion.mechanism]
            credential = ScramCredential.from_salted_password(upsertion.salted_password, SCRAM_MECHANISMS[mechanism],
                                                              upsertion.salt, upsertion.iterations)
            await store.put_scram(name, mechanism, credential, tenant=ctx.tenant, namespace=ctx.namespace)
        results.append(_result(name, ErrorCode.NONE, None))
    return _answer(results)


def _refusal(name: str, changes: list[Msg], twice: set) -> tuple[int, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    try:
        check_name("user", name)
    except InvalidName as exc:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc)
    for change in changes:
        if change.mechanism not in MECHANISM_BY_CODE:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
        if (name, change.mechanism) in twice:
            return ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
        iterations = getattr(change, "iterations", None)
        if iterations is not None and iterations < MIN_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        if iterations is not None and iterations > MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


async def _missing_deletion(store, name: str, deletions: list[Msg]) -> tuple[int, str] | None:
    if not deletions:
        return None
    user = await store.get(name)
    for deletion in deletions:
        if user is None or MECHANISM_BY_CODE[deletion.mechanism] not in user.scram:
            return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return None


def _answer(results: list[dict]) -> dict:
    return {"throttle_time_ms": 0, "results": results}


def _result(name: str, error_code: int, message: str | None) -> dict:
    return {"user": name, "error_code": error_code, "error_message": message}

"""Grants (core/access.py) as Kafka ACL bindings: what DescribeAcls shows of them beside the stored ones.

A grant's pattern becomes a Kafka resource pattern where Kafka can say it:

    ".*"                    LITERAL "*"
    "^orders$"              LITERAL "orders"
    "^pay" (plain text)     PREFIXED "pay"
    "" or "^$"              nothing

Any other regular expression has no Kafka form and is left out of the view (it still decides).
Each action becomes the operations GRANTED_BY gives to that action alone (read: READ on topics and
groups; write: WRITE on topics, WRITE and DESCRIBE on transactional ids; configure: CREATE, DELETE,
ALTER, ALTER_CONFIGS on topics, DELETE on groups), as ALLOW entries of "User:<name>" from any host.
The view is read-only: DeleteAcls deletes stored bindings; a grant changes through the admin API.
Only the grants of the client's own namespace are shown, as only those decide for it.
"""

from __future__ import annotations

import re

from core.access import Action
from core.acl import WILDCARD, AclBinding, PatternType, Permission
from core.auth import EVERYTHING
from protocols.kafka.authorization import GRANTED_BY

_PLAIN = re.compile(r"[A-Za-z0-9_-]+")   # names without a character a regular expression treats specially


def kafka_pattern(regex: str) -> tuple[PatternType, str] | None:
    """The Kafka resource pattern a grant's regular expression amounts to, if there is one."""
    if regex == EVERYTHING:
        return PatternType.LITERAL, WILDCARD
    if regex.startswith("^") and regex.endswith("$") and _PLAIN.fullmatch(regex[1:-1]):
        return PatternType.LITERAL, regex[1:-1]
    if regex.startswith("^") and _PLAIN.fullmatch(regex[1:]):
        return PatternType.PREFIXED, regex[1:]
    return None


OPERATIONS_OF: dict[Action, list] = {
    action: [key for key, actions in GRANTED_BY.items() if actions == frozenset({action})] for action in Action}


async def grant_bindings(core, tenant: str, namespace: str) -> list[AclBinding]:
    bindings = []
    for user, permission in await core.access.namespace_grants(tenant, namespace):
        for action in Action:
            pattern = kafka_pattern(getattr(permission, action.value))
            if pattern is None:
                continue
            for resource_type, operation in OPERATIONS_OF[action]:
                bindings.append(AclBinding.of(resource_type, pattern[1], pattern[0], f"User:{user}", WILDCARD,
                                              operation, Permission.ALLOW))
    return bindings

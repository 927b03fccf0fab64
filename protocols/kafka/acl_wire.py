"""The ACL model of core/acl.py in Kafka's wire form: numeric codes (as of Kafka 2.8), filters, errors.

A code Kafka 2.8 does not define reads as UNKNOWN, as Kafka's `fromCode` does: in a filter it
matches nothing, in a creation it is refused with INVALID_REQUEST. Code 0 is Kafka's own UNKNOWN:
Kafka refuses a request carrying it while parsing (IllegalArgumentException) and closes the
connection without answering; `refuse_unknown_codes` does the same here.
"""

from __future__ import annotations

from enum import Enum

from core.acl import (AclBinding, AclBindingFilter, EntryFilter, Operation, PatternType, Permission,
                      ResourcePatternFilter, ResourceType)
from core.errors import CoreError
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.errors import kafka_code
from protocols.kafka.machine.connection import RemoteProtocolError

UNKNOWN_CODE = 0

RESOURCE_TYPES = {1: ResourceType.ANY, 2: ResourceType.TOPIC, 3: ResourceType.GROUP, 4: ResourceType.CLUSTER,
                  5: ResourceType.TRANSACTIONAL_ID, 6: ResourceType.DELEGATION_TOKEN}
PATTERN_TYPES = {1: PatternType.ANY, 2: PatternType.MATCH, 3: PatternType.LITERAL, 4: PatternType.PREFIXED}
OPERATIONS = {1: Operation.ANY, 2: Operation.ALL, 3: Operation.READ, 4: Operation.WRITE, 5: Operation.CREATE,
              6: Operation.DELETE, 7: Operation.ALTER, 8: Operation.DESCRIBE, 9: Operation.CLUSTER_ACTION,
              10: Operation.DESCRIBE_CONFIGS, 11: Operation.ALTER_CONFIGS, 12: Operation.IDEMPOTENT_WRITE}
PERMISSIONS = {1: Permission.ANY, 2: Permission.DENY, 3: Permission.ALLOW}

_CODES: dict[Enum, int] = {value: code for table in (RESOURCE_TYPES, PATTERN_TYPES, OPERATIONS, PERMISSIONS)
                           for code, value in table.items()}

CLUSTER_AUTHORIZATION_FAILED = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


def resource_type(code: int) -> ResourceType:
    return RESOURCE_TYPES.get(code, ResourceType.UNKNOWN)


def pattern_type(code: int) -> PatternType:
    return PATTERN_TYPES.get(code, PatternType.UNKNOWN)


def operation(code: int) -> Operation:
    return OPERATIONS.get(code, Operation.UNKNOWN)


def permission(code: int) -> Permission:
    return PERMISSIONS.get(code, Permission.UNKNOWN)


def code(value: Enum) -> int:
    """The Kafka code of a value (UNKNOWN is 0)."""
    return _CODES.get(value, UNKNOWN_CODE)


def refuse_unknown_codes(api_name: str, items: list[tuple[int, int, int, int]]) -> None:
    """Close the connection, as Kafka does, if any (resource type, pattern type, operation,
    permission) holds Kafka's UNKNOWN code."""
    for codes in items:
        if UNKNOWN_CODE in codes:
            raise RemoteProtocolError(f"{api_name} contains UNKNOWN elements: {codes}")


def binding_filter(resource_type_code: int, name: str | None, pattern_type_code: int, principal: str | None,
                   host: str | None, operation_code: int, permission_code: int) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(resource_type(resource_type_code), name, pattern_type(pattern_type_code)),
        EntryFilter(principal, host, operation(operation_code), permission(permission_code)))


def binding_fields(binding: AclBinding) -> dict:
    """The fields every ACL answer shares (DescribeAcls' acls add no resource; DeleteAcls' do)."""
    e = binding.entry
    return {"principal": e.principal, "host": e.host, "operation": code(e.operation),
            "permission_type": code(e.permission)}


def error_fields(exc: CoreError | None) -> tuple[int, str | None]:
    """(error code, message) as Kafka's ApiError.fromThrowable writes them: no message for
    UNKNOWN_SERVER_ERROR, so nothing internal leaks."""
    if exc is None:
        return ErrorCode.NONE, None
    error = kafka_code(exc)
    return error, None if error == ErrorCode.UNKNOWN_SERVER_ERROR else str(exc)

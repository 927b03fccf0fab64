"""DescribeAcls, CreateAcls, DeleteAcls handlers, called directly with requests encoded and responses
decoded by kafka-python's codec (an independent implementation of the wire format)."""

import pytest
from kafka.protocol.admin.acl import (CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
                                      DescribeAclsRequest, DescribeAclsResponse)

from core.auth import Principal
from protocols.kafka.broker import ConnectionSession, KafkaSettings, RequestContext
from protocols.kafka.codec.compile import decode_request, encode_response
from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.codec.frames import RequestHeader
from protocols.kafka.handlers import create_acls, delete_acls, describe_acls
from protocols.kafka.machine.connection import RemoteProtocolError
from protocols.kafka.server import make_broker

# Kafka's codes.
ANY, TOPIC, GROUP, CLUSTER = 1, 2, 3, 4
MATCH, LITERAL, PREFIXED = 2, 3, 4
ALL, READ, WRITE, ALTER, DESCRIBE = 2, 3, 4, 7, 8
DENY, ALLOW = 2, 3
ANONYMOUS = ConnectionSession()


@pytest.fixture
def broker(core):
    return make_broker(core, KafkaSettings("localhost", 9092))


@pytest.fixture
def sasl_broker(core):
    return make_broker(core, KafkaSettings("localhost", 9092, sasl_mechanisms=("PLAIN",), super_users=("User:root",)))


async def call(broker, handler, request, response_cls, version, session=ANONYMOUS):
    api = handler.API
    body = decode_request(api, version, memoryview(bytes(request.encode(version=version))))
    ctx = RequestContext(broker, RequestHeader(api.key, version, 7, "test"), session)
    out = bytearray()
    encode_response(api, version, await handler.handle(body, ctx), out)
    return response_cls.decode(bytes(out), version=version)


def creation(name, operation=READ, permission=ALLOW, *, resource_type=TOPIC, pattern=LITERAL,
             principal="User:alice", host="*"):
    return CreateAclsRequest.AclCreation(resource_type=resource_type, resource_name=name,
                                         resource_pattern_type=pattern, principal=principal, host=host,
                                         operation=operation, permission_type=permission)


def describe_request(resource_type=ANY, name=None, pattern=ANY, principal=None, host=None, operation=ANY,
                     permission=ANY):
    return DescribeAclsRequest(resource_type_filter=resource_type, resource_name_filter=name,
                               pattern_type_filter=pattern, principal_filter=principal, host_filter=host,
                               operation=operation, permission_type=permission)


def delete_filter(resource_type=ANY, name=None, pattern=ANY, principal=None, host=None, operation=ANY,
                  permission=ANY):
    return DeleteAclsRequest.DeleteAclsFilter(resource_type_filter=resource_type, resource_name_filter=name,
                                              pattern_type_filter=pattern, principal_filter=principal,
                                              host_filter=host, operation=operation, permission_type=permission)


async def create(broker, creations, version=2, session=ANONYMOUS):
    response = await call(broker, create_acls, CreateAclsRequest(creations=creations), CreateAclsResponse,
                          version, session)
    return [(r.error_code, r.error_message) for r in response.results]


async def describe(broker, version=2, session=ANONYMOUS, **filter_fields):
    return await call(broker, describe_acls, describe_request(**filter_fields), DescribeAclsResponse, version, session)


def shape(response):
    """DescribeAcls resources as comparable tuples (pattern type absent in v0 reads as LITERAL)."""
    return [(r.resource_type, r.resource_name, r.pattern_type,
             [(a.principal, a.host, a.operation, a.permission_type) for a in r.acls]) for r in response.resources]


@pytest.mark.parametrize("version", [1, 2])
async def test_create_describe_with_filters_then_delete(broker, version) -> None:
    assert await create(broker, [creation("orders"), creation("orders", WRITE, host="10.0.0.1"),
                                 creation("ord", DESCRIBE, pattern=PREFIXED), creation("*", READ, DENY,
                                                                                     principal="User:*"),
                                 creation("billing", READ, resource_type=GROUP)], version) == [(0, None)] * 5

    everything = await describe(broker, version)
    assert (everything.error_code, everything.error_message) == (0, None)
    assert shape(everything) == [
        (TOPIC, "orders", LITERAL, [("User:alice", "*", READ, ALLOW), ("User:alice", "10.0.0.1", WRITE, ALLOW)]),
        (TOPIC, "ord", PREFIXED, [("User:alice", "*", DESCRIBE, ALLOW)]),
        (TOPIC, "*", LITERAL, [("User:*", "*", READ, DENY)]),
        (GROUP, "billing", LITERAL, [("User:alice", "*", READ, ALLOW)]),
    ]
    matching = await describe(broker, version, resource_type=TOPIC, name="orders", pattern=MATCH)
    assert [r.resource_name for r in matching.resources] == ["orders", "ord", "*"]
    exact = await describe(broker, version, resource_type=TOPIC, name="ord", pattern=ANY)
    assert [r.resource_name for r in exact.resources] == ["ord"]
    by_host = await describe(broker, version, host="10.0.0.1")
    assert shape(by_host) == [(TOPIC, "orders", LITERAL, [("User:alice", "10.0.0.1", WRITE, ALLOW)])]
    denies = await describe(broker, version, permission=DENY, principal="User:*")
    assert [r.resource_name for r in denies.resources] == ["*"]

    deleted = await call(broker, delete_acls, DeleteAclsRequest(filters=[
        delete_filter(TOPIC, "orders", LITERAL), delete_filter(operation=READ), delete_filter(GROUP, "nothing")]),
        DeleteAclsResponse, version)
    got = [[(m.error_code, m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
             m.permission_type) for m in result.matching_acls] for result in deleted.filter_results]
    assert got == [
        [(0, TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW),
         (0, TOPIC, "orders", LITERAL, "User:alice", "10.0.0.1", WRITE, ALLOW)],
        [(0, TOPIC, "*", LITERAL, "User:*", "*", READ, DENY),
         (0, GROUP, "billing", LITERAL, "User:alice", "*", READ, ALLOW)],
        [],
    ]
    assert all(r.error_code == 0 and r.error_message is None for r in deleted.filter_results)
    assert shape(await describe(broker, version)) == [(TOPIC, "ord", PREFIXED, [("User:alice", "*", DESCRIBE, ALLOW)])]


async def test_v0_creates_and_describes_literal_acls_only(broker) -> None:
    assert await create(broker, [creation("orders")], version=0) == [(0, None)]
    assert await create(broker, [creation("ord", WRITE, pattern=PREFIXED)], version=1) == [(0, None)]
    v0 = await describe(broker, version=0)
    assert shape(v0) == [(TOPIC, "orders", LITERAL, [("User:alice", "*", READ, ALLOW)])]
    v1 = await describe(broker, version=1)
    assert [(r.resource_name, r.pattern_type) for r in v1.resources] == [("orders", LITERAL), ("ord", PREFIXED)]


async def test_v0_delete_filters_are_literal(broker) -> None:
    await create(broker, [creation("orders"), creation("orders", pattern=PREFIXED)])
    deleted = await call(broker, delete_acls, DeleteAclsRequest(filters=[delete_filter(TOPIC, "orders")]),
                         DeleteAclsResponse, 0)
    assert [m.resource_name for m in deleted.filter_results[0].matching_acls] == ["orders"]
    assert [(r.resource_name, r.pattern_type) for r in (await describe(broker)).resources] == [("orders", PREFIXED)]


async def test_invalid_creations_get_kafka_error_codes_and_messages_one_by_one(broker) -> None:
    results = await create(broker, [
        creation("my-cluster", ALTER, resource_type=CLUSTER),
        creation("kafka-cluster", ALTER, resource_type=CLUSTER),
        creation(""),
        creation("a/b"),
        creation("orders", operation=99),
        creation("orders", resource_type=42),
        creation("fine"),
    ])
    assert results == [
        (ErrorCode.INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (0, None),
        (ErrorCode.INVALID_REQUEST, "Invalid empty resource name"),
        (ErrorCode.INVALID_REQUEST, "Failed to create ACL"),
        (ErrorCode.INVALID_REQUEST, "Failed to create ACL"),
        (ErrorCode.INVALID_REQUEST, "Failed to create ACL"),
        (0, None),
    ]
    assert [r.resource_name for r in (await describe(broker)).resources] == ["kafka-cluster", "fine"]


async def test_a_principal_without_a_type_fails_its_resource_pattern_as_kafka_does(broker) -> None:
    results = await create(broker, [creation("orders", principal="alice"), creation("orders", WRITE),
                                    creation("payments")])
    assert results == [(ErrorCode.UNKNOWN_SERVER_ERROR, None)] * 2 + [(0, None)]
    assert [r.resource_name for r in (await describe(broker)).resources] == ["payments"]


@pytest.mark.parametrize("bad", [dict(operation=ANY), dict(permission=ANY), dict(resource_type=ANY),
                                 dict(pattern=ANY), dict(pattern=MATCH)], ids=str)
async def test_a_filter_value_in_a_creation_fails_the_whole_request_as_kafka_does(broker, bad) -> None:
    results = await create(broker, [creation("fine"), creation("orders", **bad)])
    assert results == [(ErrorCode.UNKNOWN_SERVER_ERROR, None)] * 2
    assert (await describe(broker)).resources == []


@pytest.mark.parametrize("handler, wire_request", [
    (create_acls, CreateAclsRequest(creations=[creation("orders", operation=0)])),
    (create_acls, CreateAclsRequest(creations=[creation("orders", pattern=0)])),
    (describe_acls, describe_request(resource_type=0)),
    (describe_acls, describe_request(permission=0)),
    (delete_acls, DeleteAclsRequest(filters=[delete_filter(pattern=0)])),
], ids=["create-op", "create-pattern", "describe-type", "describe-permission", "delete-pattern"])
async def test_kafkas_unknown_code_zero_closes_the_connection(broker, handler, wire_request) -> None:
    with pytest.raises(RemoteProtocolError, match="contains UNKNOWN elements"):
        await call(broker, handler, wire_request, None, 2)


async def test_creating_the_same_acl_twice_is_stored_once(broker) -> None:
    assert await create(broker, [creation("orders"), creation("orders")]) == [(0, None)] * 2
    assert await create(broker, [creation("orders")]) == [(0, None)]
    assert shape(await describe(broker)) == [(TOPIC, "orders", LITERAL, [("User:alice", "*", READ, ALLOW)])]


async def test_with_sasl_the_acl_apis_need_cluster_permissions(sasl_broker) -> None:
    alice = ConnectionSession(principal=Principal("alice"), client_host="10.0.0.1")
    root = ConnectionSession(principal=Principal("root"))
    assert await create(sasl_broker, [creation("orders")], session=alice) == [
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")]
    refused = await describe(sasl_broker, session=alice)
    assert (refused.error_code, refused.resources) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    refused_delete = await call(sasl_broker, delete_acls, DeleteAclsRequest(filters=[delete_filter()] * 2),
                                DeleteAclsResponse, 2, alice)
    assert [(r.error_code, r.matching_acls) for r in refused_delete.filter_results] == [
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])] * 2

    # A super user grants alice DESCRIBE on the cluster; ALTER stays refused.
    assert await create(sasl_broker, [creation("kafka-cluster", DESCRIBE, resource_type=CLUSTER)],
                        session=root) == [(0, None)]
    allowed = await describe(sasl_broker, session=alice)
    assert (allowed.error_code, [r.resource_name for r in allowed.resources]) == (0, ["kafka-cluster"])
    assert (await create(sasl_broker, [creation("orders")], session=alice))[0][0] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def test_without_sasl_acls_are_stored_but_everything_is_allowed(broker) -> None:
    await create(broker, [creation("kafka-cluster", ALL, DENY, resource_type=CLUSTER, principal="User:*")])
    assert [r.resource_name for r in (await describe(broker)).resources] == ["kafka-cluster"]
    assert await create(broker, [creation("orders")]) == [(0, None)]

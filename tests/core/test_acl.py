"""ACLs: Kafka's AclAuthorizer decisions, Kafka's AclBindingFilter semantics, storage per tenant."""

import pytest

from core.acl import (ANY_ACL, WILDCARD, AclBinding, AclBindingFilter, Authorizer, EntryFilter, Operation,
                      PatternType, Permission, ResourcePattern, ResourcePatternFilter, ResourceType)
from core.auth import Principal
from core.errors import CoreError, InvalidAcl

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
O = Operation
ALICE = Principal("alice", "acme")
HOST = "10.0.0.1"


def acl(name: str, op: Operation, perm: Permission = ALLOW, *, principal: str = "User:alice", host: str = "*",
        pattern: PatternType = LIT, rtype: ResourceType = T) -> AclBinding:
    return AclBinding.of(rtype, name, pattern, principal, host, op, perm)


# (what it shows, ACLs stored, operation, resource type, resource name, allowed?)
RULES = [
    ("no ACL at all: denied by default", [], O.READ, T, "orders", False),
    ("a literal ALLOW grants its operation", [acl("orders", O.READ)], O.READ, T, "orders", True),
    ("a literal ALLOW grants nothing else", [acl("orders", O.READ)], O.WRITE, T, "orders", False),
    ("a literal ALLOW is for its name only", [acl("orders", O.READ)], O.READ, T, "orders2", False),
    ("a literal ALLOW is for its resource type only", [acl("orders", O.READ)], O.READ, G, "orders", False),
    ("DENY beats ALLOW", [acl("orders", O.READ), acl("orders", O.READ, DENY)], O.READ, T, "orders", False),
    ("a wildcard DENY beats a literal ALLOW",
     [acl("orders", O.READ), acl(WILDCARD, O.READ, DENY)], O.READ, T, "orders", False),
    ("a prefixed DENY beats a literal ALLOW",
     [acl("orders", O.READ), acl("ord", O.READ, DENY, pattern=PRE)], O.READ, T, "orders", False),
    ("DENY of another operation does not deny", [acl("orders", O.ALL), acl("orders", O.WRITE, DENY)],
     O.READ, T, "orders", True),
    ("DENY ALL denies every operation", [acl("orders", O.READ), acl("orders", O.ALL, DENY)],
     O.READ, T, "orders", False),
    ("DENY implies nothing: DENY READ leaves DESCRIBE", [acl("orders", O.DESCRIBE), acl("orders", O.READ, DENY)],
     O.DESCRIBE, T, "orders", True),
    ("ALLOW ALL grants every operation", [acl("orders", O.ALL)], O.IDEMPOTENT_WRITE, T, "orders", True),
    ("READ implies DESCRIBE", [acl("orders", O.READ)], O.DESCRIBE, T, "orders", True),
    ("WRITE implies DESCRIBE", [acl("orders", O.WRITE)], O.DESCRIBE, T, "orders", True),
    ("DELETE implies DESCRIBE", [acl("orders", O.DELETE)], O.DESCRIBE, T, "orders", True),
    ("ALTER implies DESCRIBE", [acl("orders", O.ALTER)], O.DESCRIBE, T, "orders", True),
    ("CREATE does not imply DESCRIBE", [acl("orders", O.CREATE)], O.DESCRIBE, T, "orders", False),
    ("DESCRIBE implies nothing upwards", [acl("orders", O.DESCRIBE)], O.READ, T, "orders", False),
    ("ALTER_CONFIGS implies DESCRIBE_CONFIGS", [acl("orders", O.ALTER_CONFIGS)], O.DESCRIBE_CONFIGS, T, "orders", True),
    ("ALTER does not imply ALTER_CONFIGS", [acl("orders", O.ALTER)], O.ALTER_CONFIGS, T, "orders", False),
    ("a wildcard ALLOW covers every name of its type", [acl(WILDCARD, O.READ)], O.READ, T, "anything", True),
    ("a prefixed ALLOW covers names starting with it", [acl("ord", O.READ, pattern=PRE)], O.READ, T, "orders", True),
    ("a prefixed ALLOW covers the prefix itself", [acl("orders", O.READ, pattern=PRE)], O.READ, T, "orders", True),
    ("a prefixed ALLOW does not cover other names", [acl("ord", O.READ, pattern=PRE)], O.READ, T, "payments", False),
    ("a prefixed '*' is not a wildcard", [acl("*", O.READ, pattern=PRE)], O.READ, T, "orders", False),
    ("a literal name is not a prefix", [acl("ord", O.READ)], O.READ, T, "orders", False),
    ("User:* grants every user", [acl("orders", O.READ, principal="User:*")], O.READ, T, "orders", True),
    ("User:* denies every user", [acl("orders", O.READ), acl("orders", O.READ, DENY, principal="User:*")],
     O.READ, T, "orders", False),
    ("another user's ALLOW grants nothing", [acl("orders", O.READ, principal="User:bob")], O.READ, T, "orders", False),
    ("another principal type is not this user", [acl("orders", O.READ, principal="Group:alice")],
     O.READ, T, "orders", False),
    ("an ALLOW for the client's host grants", [acl("orders", O.READ, host=HOST)], O.READ, T, "orders", True),
    ("an ALLOW for another host grants nothing", [acl("orders", O.READ, host="10.9.9.9")], O.READ, T, "orders", False),
    ("a DENY for another host does not deny", [acl("orders", O.READ), acl("orders", O.READ, DENY, host="10.9.9.9")],
     O.READ, T, "orders", True),
    ("a DENY for the client's host denies", [acl("orders", O.READ), acl("orders", O.READ, DENY, host=HOST)],
     O.READ, T, "orders", False),
    ("ACLs on the cluster resource", [acl("kafka-cluster", O.IDEMPOTENT_WRITE, rtype=C)],
     O.IDEMPOTENT_WRITE, C, "kafka-cluster", True),
]


@pytest.mark.parametrize("stored, operation, resource_type, name, allowed",
                         [case[1:] for case in RULES], ids=[case[0] for case in RULES])
async def test_authorizer_follows_kafka_acl_rules(core, stored, operation, resource_type, name, allowed) -> None:
    authorizer = Authorizer(core.metadata)
    assert await authorizer.create_acls("acme", stored) == [None] * len(stored)
    assert await authorizer.authorize(ALICE, HOST, operation, resource_type, name) is allowed


async def test_super_users_are_allowed_without_any_acl_even_against_a_deny(core) -> None:
    authorizer = Authorizer(core.metadata, super_users=["User:admin", " User:root "])
    await authorizer.create_acls("acme", [acl("orders", O.ALL, DENY, principal="User:*")])
    for user in ("admin", "root"):
        assert await authorizer.authorize(Principal(user, "acme"), HOST, O.WRITE, T, "orders")
    assert not await authorizer.authorize(ALICE, HOST, O.WRITE, T, "orders")


async def test_allow_everyone_if_no_acl_found_applies_only_where_no_acl_exists(core) -> None:
    authorizer = Authorizer(core.metadata, allow_everyone_if_no_acl_found=True)
    await authorizer.create_acls("acme", [acl("orders", O.READ, principal="User:bob")])
    assert await authorizer.authorize(ALICE, HOST, O.WRITE, T, "payments")
    assert not await authorizer.authorize(ALICE, HOST, O.READ, T, "orders")


async def test_an_unknown_client_host_gets_only_wildcard_host_allows_and_every_deny(core) -> None:
    authorizer = Authorizer(core.metadata)
    await authorizer.create_acls("acme", [acl("a", O.READ, host=HOST), acl("b", O.READ),
                                          acl("b", O.READ, DENY, host="10.9.9.9")])
    assert not await authorizer.authorize(ALICE, None, O.READ, T, "a")
    assert not await authorizer.authorize(ALICE, None, O.READ, T, "b")
    assert await authorizer.authorize(ALICE, HOST, O.READ, T, "b")


async def test_acls_belong_to_their_tenant(core) -> None:
    authorizer = Authorizer(core.metadata)
    await authorizer.create_acls("other", [acl("orders", O.READ, principal="User:*")])
    assert not await authorizer.authorize(ALICE, HOST, O.READ, T, "orders")
    assert await authorizer.authorize(Principal("alice", "other"), HOST, O.READ, T, "orders")
    assert await authorizer.acls("acme") == []


async def test_acls_survive_a_new_authorizer_and_changes_apply_at_once(core) -> None:
    first = Authorizer(core.metadata)
    await first.create_acls("acme", [acl("orders", O.READ), acl("orders", O.WRITE)])
    assert await first.authorize(ALICE, HOST, O.READ, T, "orders")
    second = Authorizer(core.metadata)
    assert await second.acls("acme") == [acl("orders", O.READ), acl("orders", O.WRITE)]
    deleted = await second.delete_acls("acme", [AclBindingFilter(entry=EntryFilter(operation=O.READ))])
    assert [d.binding for d in deleted[0]] == [acl("orders", O.READ)]
    assert not await second.authorize(ALICE, HOST, O.READ, T, "orders")
    assert await Authorizer(core.metadata).acls("acme") == [acl("orders", O.WRITE)]


async def test_creating_an_existing_acl_succeeds_and_stores_it_once(core) -> None:
    authorizer = Authorizer(core.metadata)
    binding = acl("orders", O.READ)
    assert await authorizer.create_acls("acme", [binding, binding]) == [None, None]
    assert await authorizer.create_acls("acme", [binding]) == [None]
    assert await authorizer.acls("acme") == [binding]
    assert len(await core.metadata.children("/acls/acme")) == 1


@pytest.mark.parametrize("binding", [
    acl("orders", O.UNKNOWN), acl("orders", O.ANY), acl("orders", O.READ, Permission.UNKNOWN),
    acl("orders", O.READ, Permission.ANY), acl("orders", O.READ, pattern=PatternType.MATCH),
    acl("orders", O.READ, pattern=PatternType.UNKNOWN), acl("orders", O.READ, rtype=ResourceType.ANY),
    acl("a/b", O.READ)], ids=lambda b: repr(b))
async def test_bindings_kafka_cannot_store_are_refused_one_by_one(core, binding) -> None:
    authorizer = Authorizer(core.metadata)
    good = acl("fine", O.READ)
    results = await authorizer.create_acls("acme", [binding, good])
    assert isinstance(results[0], InvalidAcl) and str(results[0]) == "Failed to create ACL"
    assert results[1] is None
    assert await authorizer.acls("acme") == [good]


async def test_a_malformed_principal_fails_every_binding_of_its_resource_pattern(core) -> None:
    authorizer = Authorizer(core.metadata)
    results = await authorizer.create_acls("acme", [acl("orders", O.READ, principal="alice"),
                                                    acl("orders", O.WRITE), acl("other", O.WRITE)])
    assert type(results[0]) is CoreError and type(results[1]) is CoreError
    with pytest.raises(CoreError, match="principalType:principalName"):
        raise results[0]
    assert results[2] is None
    assert await authorizer.acls("acme") == [acl("other", O.WRITE)]


def pattern(name: str, pattern_type: PatternType = LIT, rtype: ResourceType = T) -> ResourcePattern:
    return ResourcePattern(rtype, name, pattern_type)


# (what it shows, filter, pattern, matches?)
PATTERN_FILTERS = [
    ("ANY type, null name, ANY pattern matches all", ResourcePatternFilter(), pattern("x", PRE, G), True),
    ("a resource type matches only itself", ResourcePatternFilter(G), pattern("x"), False),
    ("ANY pattern type matches literal with the exact name", ResourcePatternFilter(T, "x", PatternType.ANY),
     pattern("x"), True),
    ("ANY pattern type matches prefixed with the exact name", ResourcePatternFilter(T, "x", PatternType.ANY),
     pattern("x", PRE), True),
    ("ANY pattern type does not match the wildcard", ResourcePatternFilter(T, "x", PatternType.ANY),
     pattern(WILDCARD), False),
    ("ANY pattern type does not match a shorter prefix", ResourcePatternFilter(T, "xy", PatternType.ANY),
     pattern("x", PRE), False),
    ("LITERAL matches only literal patterns", ResourcePatternFilter(T, "x", LIT), pattern("x", PRE), False),
    ("LITERAL with null name matches every literal", ResourcePatternFilter(T, None, LIT), pattern("y"), True),
    ("a '*' name filter matches only the wildcard", ResourcePatternFilter(T, WILDCARD, LIT), pattern("x"), False),
    ("PREFIXED matches the same prefix only", ResourcePatternFilter(T, "x", PRE), pattern("x", PRE), True),
    ("PREFIXED is exact, not a prefix search", ResourcePatternFilter(T, "xy", PRE), pattern("x", PRE), False),
    ("MATCH matches the literal name", ResourcePatternFilter(T, "orders", PatternType.MATCH), pattern("orders"), True),
    ("MATCH matches the literal wildcard", ResourcePatternFilter(T, "orders", PatternType.MATCH),
     pattern(WILDCARD), True),
    ("MATCH matches an applicable prefix", ResourcePatternFilter(T, "orders", PatternType.MATCH),
     pattern("ord", PRE), True),
    ("MATCH skips a prefix that does not apply", ResourcePatternFilter(T, "orders", PatternType.MATCH),
     pattern("pay", PRE), False),
    ("MATCH skips another literal", ResourcePatternFilter(T, "orders", PatternType.MATCH), pattern("ord"), False),
    ("MATCH with null name matches everything", ResourcePatternFilter(T, None, PatternType.MATCH),
     pattern("y", PRE), True),
    ("an UNKNOWN resource type matches nothing", ResourcePatternFilter(ResourceType.UNKNOWN), pattern("x"), False),
    ("an UNKNOWN pattern type matches nothing", ResourcePatternFilter(T, None, PatternType.UNKNOWN),
     pattern("x"), False),
]


@pytest.mark.parametrize("acl_filter, resource, matches", [case[1:] for case in PATTERN_FILTERS],
                         ids=[case[0] for case in PATTERN_FILTERS])
def test_resource_pattern_filters_follow_kafka(acl_filter, resource, matches) -> None:
    assert acl_filter.matches(resource) is matches


def test_entry_filters_match_exact_strings_or_anything_when_null() -> None:
    entry = acl("x", O.READ, principal="User:*", host=HOST).entry
    assert EntryFilter().matches(entry)
    assert EntryFilter("User:*", HOST, O.READ, ALLOW).matches(entry)
    assert not EntryFilter("User:alice").matches(entry)         # "User:*" in a filter is a literal string
    assert not EntryFilter(host="*").matches(entry)
    assert not EntryFilter(operation=O.ALL).matches(entry)      # ALL is a stored value, not a filter wildcard
    assert not EntryFilter(permission=DENY).matches(entry)
    assert not EntryFilter(operation=O.UNKNOWN).matches(entry)


async def test_describe_filters_and_delete_reports_each_acl_under_its_first_filter(core) -> None:
    authorizer = Authorizer(core.metadata)
    stored = [acl("orders", O.READ), acl("ord", O.WRITE, pattern=PRE), acl(WILDCARD, O.DESCRIBE),
              acl("payments", O.READ, principal="User:bob")]
    await authorizer.create_acls("acme", stored)
    match = AclBindingFilter(ResourcePatternFilter(T, "orders", PatternType.MATCH))
    assert await authorizer.acls("acme", match) == stored[:3]
    assert await authorizer.acls("acme", AclBindingFilter(entry=EntryFilter("User:bob"))) == [stored[3]]
    assert await authorizer.acls("acme", ANY_ACL) == stored

    deleted = await authorizer.delete_acls("acme", [
        AclBindingFilter(ResourcePatternFilter(T, None, PRE)),
        AclBindingFilter(),
        AclBindingFilter(ResourcePatternFilter(G)),
    ])
    assert [[d.binding for d in per_filter] for per_filter in deleted] == [[stored[1]], [stored[0], stored[2], stored[3]], []]
    assert all(d.error is None for per_filter in deleted for d in per_filter)
    assert await authorizer.acls("acme") == []
    assert await core.metadata.children("/acls/acme") == []


async def test_authorize_refuses_a_filter_value_as_the_operation(core) -> None:
    with pytest.raises(ValueError, match="cannot authorize ANY"):
        await Authorizer(core.metadata).authorize(ALICE, HOST, O.ANY, T, "orders")


async def test_a_change_made_by_another_process_reaches_this_cache_through_the_watch(core) -> None:
    here, there = Authorizer(core.metadata), Authorizer(core.metadata)   # two processes' caches, one store
    alice = Principal("alice")
    binding = AclBinding.of(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", Operation.WRITE,
                            Permission.ALLOW)
    assert not await here.authorize(alice, None, Operation.WRITE, ResourceType.TOPIC, "orders")   # cached now
    assert await there.create_acls("public", [binding]) == [None]
    assert await here.authorize(alice, None, Operation.WRITE, ResourceType.TOPIC, "orders")
    await there.delete_acls("public", [AclBindingFilter()])
    assert not await here.authorize(alice, None, Operation.WRITE, ResourceType.TOPIC, "orders")
    here.close()
    there.close()

"""Per-tenant/namespace permissions stored with a user: explicit ones, or its own namespace by default."""

from core.auth import Permission, UserStore


async def test_without_permissions_a_user_has_everything_in_its_own_namespace_only(core) -> None:
    users = UserStore(core.metadata)
    await users.put_user("alice", "secret", tenant="acme", namespace="orders", iterations=1)
    alice = await users.verify("alice", "secret")
    assert alice.permissions is None
    assert alice.permission_on("acme", "orders") == Permission("acme", "orders", ".*", ".*", ".*")
    assert alice.permission_on("public", "default") is None


async def test_listed_permissions_are_stored_and_are_all_there_is(core) -> None:
    users = UserStore(core.metadata)
    listed = [Permission("public", "default", "^amq\\.gen", ".*", ""), Permission("acme", "billing")]
    await users.put_user("bob", "secret", tenant="acme", namespace="orders", iterations=1, permissions=listed)
    bob = await users.get("bob")
    assert bob.permissions == tuple(listed)
    assert bob.permission_on("public", "default") == listed[0]
    assert bob.permission_on("acme", "orders") is None     # its own namespace is not listed
    assert await users.verify("bob", "wrong") is None
    assert (await users.verify_password("bob", "secret")).tenant == "acme"

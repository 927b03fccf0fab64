"""Users: salted SCRAM credentials only, PLAIN checked against them, tenants attached."""

from core.auth import ScramCredential, UserStore


async def test_password_check_and_tenant_mapping(core) -> None:
    users = UserStore(core.metadata)
    await users.put_user("alice", "wonderland", tenant="acme", namespace="billing", iterations=4096)
    principal = await users.verify_password("alice", "wonderland")
    assert (principal.user, principal.tenant, principal.namespace) == ("alice", "acme", "billing")
    assert await users.verify_password("alice", "Wonderland") is None
    assert await users.verify_password("nobody", "wonderland") is None
    assert await users.verify_password("../etc", "x") is None


async def test_only_salted_keys_are_stored(core) -> None:
    users = UserStore(core.metadata)
    await users.put_user("bob", "hunter2-hunter2")
    raw = (await core.metadata.get("/users/bob")).value
    assert b"hunter2" not in raw
    user = await users.get("bob")
    assert set(user.scram) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    cred = user.scram["SCRAM-SHA-512"]
    assert cred == ScramCredential.derive("hunter2-hunter2", "sha512", cred.salt, cred.iterations)
    await users.delete_user("bob")
    assert await users.get("bob") is None

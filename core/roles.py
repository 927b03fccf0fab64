"""Roles: named sets of permissions that users take on, so a team's access is granted once.

A role lives at /roles/<name> as {"permissions": [{"tenant", "namespace", "configure", "write",
"read"}, ...]} (the form of a user's own, core/auth.py); a user lists the roles it has in its
"roles". What a role grants is added to what the user's own permissions grant (core/access.py).
Roles span tenants, so only administrators define them and give them to users (gateway/admin).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from core.auth import Permission
from core.names import check_name
from storage.api import MetadataStore, NoNode

ROLES_ROOT = "/roles"


class RoleStore:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    async def get(self, name: str) -> tuple[Permission, ...] | None:
        """The role's permissions; None if there is no such role."""
        node = await self._metadata.get(f"{ROLES_ROOT}/{check_name('role', name)}")
        if node is None:
            return None
        return tuple(Permission.from_doc(doc) for doc in json.loads(node.value)["permissions"])

    async def put(self, name: str, permissions: Sequence[Permission]) -> None:
        doc = {"permissions": [permission.to_doc() for permission in permissions]}
        await self._metadata.put(f"{ROLES_ROOT}/{check_name('role', name)}", json.dumps(doc).encode())

    async def delete(self, name: str) -> bool:
        """False if there was no such role."""
        try:
            await self._metadata.delete(f"{ROLES_ROOT}/{check_name('role', name)}")
        except NoNode:
            return False
        return True

    async def names(self) -> list[str]:
        return sorted(await self._metadata.children(ROLES_ROOT))

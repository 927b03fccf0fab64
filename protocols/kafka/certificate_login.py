"""Logins by client certificate on a Kafka TLS listener without SASL (Kafka's SSL listener with
ssl.client.auth): the principal is `User:<name>`, the name given by the principal mapping rules
(protocols/kafka/principal_rules.py; by default the certificate's CN).

A name that is also a user of the store (core/auth.py) lands in that user's tenant and namespace,
as the same user's SASL login would; any other name in the default tenant and namespace. A client
without a certificate (client auth "requested") has no principal: ACLs refuse it everything.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from core.auth import Principal, UserStore
from core.certificates import common_name, subject_dn
from protocols.kafka.principal_rules import Rule, principal_name

log = logging.getLogger("gateway.kafka")

MECHANISM = "SSL"   # how the admin API says a connection logged in


@dataclass(frozen=True, slots=True)
class CertificateLogin:
    principal: Principal
    stored: bool        # the name is one of the user store's


async def certificate_login(users: UserStore, certificate: dict | None, rules: tuple[Rule, ...],
                            peer: object) -> CertificateLogin | None:
    """Who the certificate logs in; None without a certificate or when no rule maps its DN."""
    if not certificate:
        return None
    dn = subject_dn(certificate)
    name = principal_name(rules, dn, common_name(certificate))
    if name is None:
        log.warning("Kafka connection from %s: no ssl.principal.mapping.rules rule maps %r; no principal", peer, dn)
        return None
    user = await users.get(name)
    if user is not None:
        return CertificateLogin(user.principal, True)
    return CertificateLogin(Principal(name), False)

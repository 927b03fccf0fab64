"""Who a client certificate names: its subject as an RFC 2253 distinguished name, and its CN.

The input is the verified peer certificate as Python's ssl module gives it (`getpeercert()`), so a
front end on a TLS listener can turn it into a login: the CN is the user (Kafka's `User:<CN>`,
AMQP's EXTERNAL mechanism), the whole DN is what Kafka's principal mapping rules read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The attribute names RFC 2253 (and Java's X500Principal, which Kafka's rules are written against) uses.
_SHORT_NAMES = {
    "commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
    "localityName": "L", "stateOrProvinceName": "ST", "streetAddress": "STREET", "domainComponent": "DC",
    "userId": "UID",
}
_SPECIAL = set(',+"\\<>;=')


def subject_dn(certificate: Mapping[str, Any]) -> str:
    """"CN=alice,OU=payments,O=Example,C=DE": the most specific attribute first, as RFC 2253 writes it."""
    rdns = []
    for rdn in reversed(certificate.get("subject", ())):
        rdns.append("+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(value)}" for name, value in rdn))
    return ",".join(rdns)


def common_name(certificate: Mapping[str, Any]) -> str | None:
    """The subject's CN (its last one, the most specific, if there are several); None without one."""
    names = [value for rdn in certificate.get("subject", ()) for name, value in rdn if name == "commonName"]
    return names[-1] if names else None


def _escape(value: str) -> str:
    out = "".join(f"\\{char}" if char in _SPECIAL else char for char in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and len(out) > 1:
        out = out[:-1] + "\\ "
    return out


def describe_tls(ssl_object: Any) -> dict | None:
    """How a connection is encrypted, as the admin API shows it; None for a plaintext one."""
    if ssl_object is None:
        return None
    certificate = ssl_object.getpeercert() or None
    cipher = ssl_object.cipher()
    return {"version": ssl_object.version(), "cipher": cipher[0] if cipher else None,
            "client_certificate": subject_dn(certificate) if certificate else None}

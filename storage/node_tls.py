"""Mutual TLS between the cluster's own processes: bookies, the gateways that write to them, and
the brokers' peer links.

Every node holds a certificate of the cluster's private CA (`[storage]` tls_cert, tls_key, tls_ca)
and accepts only peers that show one too, so the CA itself is what says "a member of this cluster"
(the host name in a certificate is not checked: nodes move and are advertised under other names).
The shared secret stays as a second factor: a node needs both a certificate and the secret.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

HANDSHAKE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class NodeTls:
    server: ssl.SSLContext    # what a node listens with: a peer certificate of the CA is required
    client: ssl.SSLContext    # what a node connects with: shows its certificate, checks the peer's

    @classmethod
    def load(cls, cert: str, key: str, ca: str) -> "NodeTls":
        """Both contexts from the PEM files; OSError or ssl.SSLError if one does not load."""
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        for context in (server, client):
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(cert, key)
            context.load_verify_locations(cafile=ca)
            context.verify_mode = ssl.CERT_REQUIRED
        client.check_hostname = False
        return cls(server, client)

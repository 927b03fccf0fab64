"""A private CA and a node certificate for a local cluster (`gateway cluster up --tls`), made with
the openssl command.

One certificate serves every process of the local cluster: as a server (bookies, broker peer links,
the brokers' Kafka and AMQP TLS ports) and as a client (gateways writing to bookies, brokers asking
each other). It names the cluster's host, so client libraries that check host names accept it.
Files that exist are kept, so a restarted cluster keeps its CA.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = 365


class CertificateError(RuntimeError):
    """openssl is missing or failed; the message says which step."""


@dataclass(frozen=True)
class ClusterCertificates:
    ca: Path          # the CA certificate every node trusts (clients of the TLS ports too)
    cert: Path        # the node certificate
    key: Path         # its private key (mode 0600)


def cluster_certificates(directory: Path, host: str = "127.0.0.1") -> ClusterCertificates:
    directory.mkdir(parents=True, exist_ok=True)
    out = ClusterCertificates(directory / "ca.pem", directory / "node.pem", directory / "node.key")
    ca_key = directory / "ca.key"
    if not (out.ca.exists() and ca_key.exists()):
        _openssl("the cluster CA", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-days", str(DAYS), "-subj", "/CN=gateway local cluster CA", "-keyout", str(ca_key),
                 "-out", str(out.ca))
    if not (out.cert.exists() and out.key.exists()):
        request = directory / "node.csr"
        _openssl("the node key", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-subj", "/CN=gateway-node", "-keyout", str(out.key), "-out", str(request))
        extensions = directory / "node.ext"
        extensions.write_text(f"subjectAltName = {_names(host)}\nbasicConstraints = CA:FALSE\n"
                              "extendedKeyUsage = serverAuth, clientAuth\n")
        _openssl("the node certificate", "x509", "-req", "-in", str(request), "-CA", str(out.ca), "-CAkey", str(ca_key),
                 "-CAcreateserial", "-days", str(DAYS), "-extfile", str(extensions), "-out", str(out.cert))
        request.unlink()
    for key in (ca_key, out.key):
        key.chmod(0o600)
    return out


def _names(host: str) -> str:
    names = {"IP:127.0.0.1", "DNS:localhost"}
    try:
        names.add(f"IP:{ipaddress.ip_address(host)}")
    except ValueError:
        names.add(f"DNS:{host}")
    return ", ".join(sorted(names))


def _openssl(step: str, *args: str) -> None:
    if shutil.which("openssl") is None:
        raise CertificateError("--tls needs the openssl command (Debian package openssl)")
    result = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise CertificateError(f"openssl failed making {step}: {result.stderr.strip()}")

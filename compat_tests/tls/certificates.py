"""A throwaway private CA and the certificates the TLS tests need, written as PEM files.

EC P-256 keys: quick to make, and every client library here speaks ECDSA.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Pair:
    cert: str     # PEM file of the certificate
    key: str      # PEM file of its private key


class Authority:
    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self._cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - DAY).not_valid_after(now + 30 * DAY)
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                   content_commitment=False, key_encipherment=False,
                                                   data_encipherment=False, key_agreement=False,
                                                   encipher_only=False, decipher_only=False), critical=True)
                      .sign(self._key, hashes.SHA256()))
        self.cert = str(directory / f"{name}-ca.pem")
        Path(self.cert).write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def server(self, file_name: str, *, hosts=("127.0.0.1", "localhost")) -> Pair:
        names = [x509.IPAddress(ipaddress.ip_address(h)) if h[0].isdigit() else x509.DNSName(h) for h in hosts]
        return self._issue(file_name, "gateway", [x509.SubjectAlternativeName(names)],
                           ExtendedKeyUsageOID.SERVER_AUTH)

    def client(self, file_name: str, common_name: str, *, expired: bool = False,
               organization_unit: str | None = None) -> Pair:
        return self._issue(file_name, common_name, [], ExtendedKeyUsageOID.CLIENT_AUTH, expired=expired,
                           organization_unit=organization_unit)

    def _issue(self, file_name: str, common_name: str, extensions, usage, *, expired: bool = False,
               organization_unit: str | None = None) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Gateway Tests")]
        if organization_unit:
            attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, organization_unit))
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = (now - 10 * DAY, now - DAY) if expired else (now - DAY, now + 30 * DAY)
        builder = (x509.CertificateBuilder().subject_name(x509.Name(attributes))
                   .issuer_name(self._cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        for extension in extensions:
            builder = builder.add_extension(extension, critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = Pair(str(self.directory / f"{file_name}.pem"), str(self.directory / f"{file_name}.key"))
        Path(pair.cert).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        Path(pair.key).write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                     serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
        return pair


    def revocation_list(self, file_name: str, revoked: list[Pair]) -> str:
        """A CRL of this CA naming `revoked`, valid for a day; the PEM file's path."""
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateRevocationListBuilder().issuer_name(self._cert.subject)
                   .last_update(now - DAY).next_update(now + DAY))
        for pair in revoked:
            builder = builder.add_revoked_certificate(
                x509.RevokedCertificateBuilder().serial_number(serial_of(pair.cert)).revocation_date(now - DAY).build())
        path = self.directory / f"{file_name}.pem"
        path.write_bytes(builder.sign(self._key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
        return str(path)


def serial_of(pem_file: str) -> int:
    return x509.load_pem_x509_certificate(Path(pem_file).read_bytes()).serial_number

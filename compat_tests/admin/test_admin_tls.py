"""HTTPS on the admin port: with a certificate and key configured the API answers over TLS (and not
over plain HTTP); a certificate without its key is refused at start."""

from __future__ import annotations

import subprocess

import httpx
import pytest

from compat_tests.admin.conftest import ADMIN, CONFIG
from compat_tests.conftest import GatewayStartFailed, start_gateway


def self_signed(directory) -> tuple[str, str]:
    cert, key = directory / "admin.pem", directory / "admin.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return str(cert), str(key)


def test_the_admin_api_over_https(tmp_path):
    cert, key = self_signed(tmp_path)
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    gateway = start_gateway(tmp_path, "--config", str(config), "--admin-tls-cert", cert, "--admin-tls-key", key)
    try:
        host, port = gateway.admin
        with httpx.Client(base_url=f"https://{host}:{port}/api/v1", verify=cert, timeout=30) as client:
            assert client.get("/tenants").status_code == 401
            answer = client.get("/tenants", auth=ADMIN)
            assert answer.status_code == 200 and "public" in answer.text
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://{host}:{port}/api/v1/info", timeout=5)
    finally:
        gateway.stop()


def test_a_certificate_without_its_key_is_refused(tmp_path):
    cert, _ = self_signed(tmp_path)
    with pytest.raises(GatewayStartFailed, match="admin_tls_cert and admin_tls_key go together"):
        start_gateway(tmp_path, "--admin-tls-cert", cert)

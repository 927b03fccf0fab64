"""SCRAM-SHA-256/512 server exchange against an independent client computation (RFC 5802)."""

import base64
import hashlib
import hmac

import pytest

from core.auth import ScramCredential
from protocols.kafka.sasl.scram import ScramError, ScramServer


def client_final(password: str, hash_name: str, client_first_bare: str, server_first: str) -> str:
    attrs = dict(item.split("=", 1) for item in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    stored_key = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


@pytest.mark.parametrize("hash_name", ["sha256", "sha512"])
def test_scram_exchange_accepts_the_right_password_and_proves_the_server(hash_name: str) -> None:
    credential = ScramCredential.derive("s3cret", hash_name, b"salt-salt-salt!!", 4096)
    server = ScramServer(hash_name, nonce=b"server-nonce")
    assert server.receive_first(b"n,,n=alice,r=clientnonce") == "alice"
    server_first = server.server_first(credential).decode()
    assert server_first.startswith("r=clientnonce")
    final = server.receive_final(client_final("s3cret", hash_name, "n=alice,r=clientnonce", server_first).encode())
    salted = hashlib.pbkdf2_hmac(hash_name, b"s3cret", b"salt-salt-salt!!", 4096)
    server_key = hmac.digest(salted, b"Server Key", hash_name)
    auth = f"n=alice,r=clientnonce,{server_first},c=biws,r={server_first.split(',')[0][2:]}".encode()
    assert final == b"v=" + base64.b64encode(hmac.digest(server_key, auth, hash_name))


def test_scram_exchange_refuses_a_wrong_password() -> None:
    credential = ScramCredential.derive("s3cret", "sha256", b"0123456789abcdef", 4096)
    server = ScramServer("sha256")
    server.receive_first(b"n,,n=alice,r=abc")
    server_first = server.server_first(credential).decode()
    with pytest.raises(ScramError, match="invalid credentials"):
        server.receive_final(client_final("wrong", "sha256", "n=alice,r=abc", server_first).encode())


@pytest.mark.parametrize("message, why", [(b"p=tls-unique,,n=a,r=b", "channel binding"),
                                          (b"n,,r=b", "user name or nonce"),
                                          (b"n,,n=a", "user name or nonce"),
                                          (b"\xff\xfe", "UTF-8"),
                                          (b"n,,n=a=b,r=c", "malformed user name")])
def test_scram_refuses_malformed_client_first(message: bytes, why: str) -> None:
    with pytest.raises(ScramError, match=why):
        ScramServer("sha256").receive_first(message)


def test_scram_refuses_a_replayed_or_foreign_nonce() -> None:
    credential = ScramCredential.derive("pw", "sha256", b"0123456789abcdef", 4096)
    server = ScramServer("sha256")
    server.receive_first(b"n,,n=bob,r=mine")
    server.server_first(credential)
    with pytest.raises(ScramError, match="nonce differs"):
        server.receive_final(b"c=biws,r=someoneelse,p=AAAA")

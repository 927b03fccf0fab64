"""The client's SASL OAUTHBEARER message (RFC 7628, KIP-255): what parses and what is refused."""

import pytest

from protocols.kafka.sasl.oauthbearer import OAuthBearerError, parse_initial_response


def test_the_kafka_clients_message_and_its_variants_parse() -> None:
    assert parse_initial_response(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01").token == "abc.def.ghi"
    message = parse_initial_response(b"n,a=al=2Cice,\x01auth=bearer  t0k-en_~+/==\x01logicalCluster=lc-1\x01\x01")
    assert (message.token, message.authzid, message.extensions) == ("t0k-en_~+/==", "al,ice", {"logicalCluster": "lc-1"})


@pytest.mark.parametrize("data", [
    b"",
    b"n,,auth=Bearer abc\x01\x01",                     # no separator after the gs2-header
    b"n,,\x01auth=Bearer abc\x01",                     # no closing separator
    b"p=tls-unique,,\x01auth=Bearer abc\x01\x01",      # channel binding
    b"n,,\x01\x01",                                    # no auth pair
    b"n,,\x01auth=Basic abc\x01\x01",
    b"n,,\x01auth=Bearer a b\x01\x01",
    b"n,,\x01auth=Bearer abc\x01auth=Bearer xyz\x01\x01",
    b"n,,\x01a-b=c\x01auth=Bearer abc\x01\x01",        # a key of other than letters
    b"n,a=bad=name,\x01auth=Bearer abc\x01\x01",
    b"n,,\x01auth=Bearer \xff\x01\x01",
    b"n,,\x01auth=Bearer " + b"a" * 70_000 + b"\x01\x01",
])
def test_malformed_messages_are_refused(data: bytes) -> None:
    with pytest.raises(OAuthBearerError):
        parse_initial_response(data)

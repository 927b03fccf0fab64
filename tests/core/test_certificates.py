"""A client certificate's subject as RFC 2253 writes it (most specific first, specials escaped),
and its CN."""

from __future__ import annotations

from core.certificates import common_name, subject_dn


def certificate(*rdns) -> dict:
    return {"subject": tuple(tuple(rdn) for rdn in rdns)}


def test_the_dn_starts_with_the_most_specific_attribute_in_short_names():
    cert = certificate([("countryName", "DE")], [("organizationName", "Example")],
                       [("organizationalUnitName", "Payments")], [("commonName", "alice")])
    assert subject_dn(cert) == "CN=alice,OU=Payments,O=Example,C=DE"
    assert common_name(cert) == "alice"


def test_special_characters_are_escaped_and_multi_valued_rdns_joined_with_plus():
    cert = certificate([("organizationName", "Example, Inc.")], [("commonName", " #bob+1 "), ("userId", "7")])
    assert subject_dn(cert) == "CN=\\ #bob\\+1\\ +UID=7,O=Example\\, Inc."
    assert subject_dn(certificate([("commonName", "#hash")])) == "CN=\\#hash"


def test_without_a_cn_there_is_none_and_the_most_specific_of_several_wins():
    assert common_name(certificate([("organizationName", "Example")])) is None
    assert common_name(certificate([("commonName", "team")], [("commonName", "alice")])) == "alice"

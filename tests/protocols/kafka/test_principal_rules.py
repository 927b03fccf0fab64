"""Kafka's ssl.principal.mapping.rules: parsed as Kafka writes them, applied in order to the whole
distinguished name, DEFAULT being the certificate's CN."""

from __future__ import annotations

import pytest

from protocols.kafka.principal_rules import parse_rules, principal_name

DN = "CN=Alice,OU=Payments,O=Example\\, Inc.,C=DE"


@pytest.mark.parametrize("rules, expected", [
    ("DEFAULT", "Alice"),
    ("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/", "Alice@Payments"),
    ("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L", "alice@payments"),
    ("RULE:^CN=(.*?),.*$/$1/U", "ALICE"),
    ("RULE:^CN=(.*?),OU=Sales,.*$/$1/, RULE:^.*O=(.*?)\\\\.*$/$1/, DEFAULT", "Example"),  # the first that matches
    ("RULE:^CN=Bob,.*$/bob/,DEFAULT", "Alice"),
    ("RULE:^.*C=DE$/germany\\/$0/", "germany/" + DN),   # an escaped slash in the replacement
])
def test_the_first_matching_rule_names_the_principal(rules, expected):
    assert principal_name(parse_rules(rules), DN, "Alice") == expected


def test_a_pattern_matches_the_whole_dn_not_a_part_of_it():
    assert principal_name(parse_rules("RULE:CN=(.*?),/$1/"), DN, "Alice") is None


def test_a_dn_no_rule_matches_has_no_principal_and_default_without_cn_is_the_dn():
    assert principal_name(parse_rules("RULE:^CN=Bob$/bob/"), DN, "Alice") is None
    assert principal_name(parse_rules("DEFAULT"), "O=Example", None) == "O=Example"


@pytest.mark.parametrize("text", ["", "RULE:^CN=(.*)$/$1", "RULE:^CN=(.*)$/$1/X", "DEFAULTS", "RULE:([/x/",
                                  "DEFAULT RULE:^a$/b/"])
def test_what_is_not_a_list_of_rules_is_refused(text):
    with pytest.raises(ValueError):
        parse_rules(text)

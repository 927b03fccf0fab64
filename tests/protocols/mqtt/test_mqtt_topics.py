"""Topic filters: validity, MQTT's matching rules, shared subscriptions, and the amq.topic mapping."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.mqtt.machine.topics import (InvalidTopic, check_filter, check_name, matches, routing_key, split_shared,
                                           topic_of_key)


@pytest.mark.parametrize("topic_filter, topic, expected", [
    ("a/b/c", "a/b/c", True),
    ("a/+/c", "a/b/c", True),
    ("a/+/c", "a/b/d", False),
    ("a/#", "a", True),                 # "#" also matches the parent level
    ("a/#", "a/b/c", True),
    ("+", "a", True),
    ("+", "a/b", False),
    ("+/+", "/a", True),                # an empty level is a level
    ("#", "$SYS/x", False),             # "$" topics: never by a leading wildcard
    ("+/x", "$SYS/x", False),
    ("$SYS/#", "$SYS/x", True),
    ("a/b", "a/b/c", False),
])
def test_matching(topic_filter, topic, expected):
    assert matches(topic_filter, topic) is expected


@pytest.mark.parametrize("bad", ["", "a/#/b", "a#", "a/b+", "#/a"])
def test_invalid_filters(bad):
    with pytest.raises(InvalidTopic):
        check_filter(bad)


@pytest.mark.parametrize("bad", ["", "a/+", "a/#"])
def test_invalid_topic_names(bad):
    with pytest.raises(InvalidTopic):
        check_name(bad)


def test_shared_subscriptions():
    assert split_shared("$share/g1/a/+/c") == ("g1", "a/+/c")
    assert split_shared("a/b") == (None, "a/b")
    for bad in ("$share/g1", "$share//a", "$share/g+/a", "$share/g/a/#/b"):
        with pytest.raises(InvalidTopic):
            split_shared(bad)


def test_routing_keys_are_rabbitmqs():
    assert routing_key("a/b/c") == "a.b.c"
    assert routing_key("a/+/#") == "a.*.#"
    assert routing_key("v1.2/x") == "v1/2.x"          # "." and "/" swap, so the mapping is one-to-one


@given(st.text(st.characters(blacklist_characters="+#\x00", blacklist_categories=("Cs",)), min_size=1))
def test_topic_and_routing_key_map_back(topic):
    assert topic_of_key(routing_key(topic)) == topic

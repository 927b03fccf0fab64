"""ResourceAccess: RabbitMQ's permission semantics (regex search, "" matches nothing, amq.default)."""

import pytest

from core.auth import Permission
from protocols.amqp.machine.errors import ChannelError
from protocols.amqp.permissions import ResourceAccess


def access(configure=".*", write=".*", read=".*") -> ResourceAccess:
    return ResourceAccess.fixed(Permission("public", "default", configure, write, read), "/", "u")


def refusal(check, name: str) -> str:
    with pytest.raises(ChannelError) as refused:
        check(name)
    assert refused.value.reply_code == 403 and not refused.value.closes_connection
    return refused.value.reply_text


def test_a_pattern_is_a_search_not_a_full_match() -> None:
    checks = access(configure="orders")
    checks.configure_queue("new-orders-queue")
    assert refusal(checks.configure_queue, "billing") == (
        "ACCESS_REFUSED - access to queue 'billing' in vhost '/' refused for user 'u'")


def test_the_empty_pattern_matches_nothing() -> None:
    checks = access(read="")
    assert "queue 'q'" in refusal(checks.read_queue, "q")
    assert "exchange 'amq.default'" in refusal(checks.read_exchange, "")


def test_the_default_exchange_is_checked_and_named_as_amq_default() -> None:
    checks = access(write="^amq\\.default$")
    checks.write_exchange("")
    assert "exchange 'amq.direct'" in refusal(checks.write_exchange, "amq.direct")
    assert "exchange 'amq.default'" in refusal(access(write="^x").write_exchange, "")
    assert "exchange 'amq.default'" in refusal(access(read="^x").read_exchange, "")


def test_each_permission_is_separate_and_answers_are_remembered_consistently() -> None:
    checks = access(configure="^c", write="^w", read="^r")
    for _ in range(2):
        checks.configure_exchange("cx")
        checks.write_queue("wq")
        checks.read_exchange("rx")
        refusal(checks.configure_exchange, "wx")
        refusal(checks.write_queue, "rq")
        refusal(checks.read_exchange, "cx")
    for i in range(1000):     # more names than remembered: still right
        checks.write_exchange(f"w{i}")
        refusal(checks.write_exchange, f"x{i}")


def test_a_changed_grant_applies_to_the_next_check_and_a_removed_one_refuses_everything() -> None:
    from core.access import UserGrants
    from core.auth import Principal, User

    grants = UserGrants("u")
    grants.set(User(Principal("u", "t", "ns"), {}, (Permission("t", "ns"),)))
    refusals = []
    checks = ResourceAccess(grants, "t", "ns", "t/ns", "u", lambda *refused: refusals.append(refused))
    checks.write_exchange("orders")
    grants.set(User(Principal("u", "t", "ns"), {}, (Permission("t", "ns", write="^audit$"),)))
    assert "exchange 'orders'" in refusal(checks.write_exchange, "orders")
    checks.read_queue("q")
    grants.set(User(Principal("u", "t", "ns"), {}, ()))
    refusal(checks.read_queue, "q")
    assert [(kind, name, action.value) for kind, name, action in refusals] == [
        ("exchange", "orders", "write"), ("queue", "q", "read")]


def test_the_method_table_covers_every_client_method_of_exchange_queue_and_basic() -> None:
    from protocols.amqp.permissions import METHOD_ACTIONS, PERMISSION_ACTIONS
    from protocols.amqp.spec import CLIENT, METHODS

    sent = {m.name for m in METHODS if CLIENT in m.sent_by and m.name.split(".")[0] in ("exchange", "queue", "basic")}
    assert sent == set(METHOD_ACTIONS)
    assert {action for needs in METHOD_ACTIONS.values() for action, _ in needs} == set(PERMISSION_ACTIONS.values())

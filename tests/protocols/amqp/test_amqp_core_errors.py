"""Every core error has its AMQP reply code in protocols.amqp.errors.CORE_TO_AMQP, and from_core
words it as RabbitMQ does."""

from __future__ import annotations

import importlib
import pkgutil

import core
from core import errors
from core.errors import CoreError, Resource
from protocols.amqp.errors import CORE_TO_AMQP, amqp_code, from_core
from protocols.amqp.spec import ReplyCode


def all_core_errors() -> set[type[CoreError]]:
    # Every core module first: an error class defined outside core/errors.py counts too.
    for info in pkgutil.walk_packages(core.__path__, prefix="core."):
        importlib.import_module(info.name)
    found: set[type[CoreError]] = set()
    todo = [CoreError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_core_error_has_an_amqp_code() -> None:
    missing = sorted(cls.__qualname__ for cls in all_core_errors() if cls not in CORE_TO_AMQP)
    assert not missing, f"add these to protocols/amqp/errors.py CORE_TO_AMQP: {missing}"


def test_the_walk_finds_errors_outside_core_errors() -> None:
    from core.transactions.errors import InvalidTxnState
    assert {CoreError, errors.UnknownQueue, InvalidTxnState} <= all_core_errors()


def test_soft_errors_close_the_channel_and_hard_ones_the_connection() -> None:
    assert amqp_code(errors.UnknownQueue.about(Resource.queue("q"), "no {resource}")) == ReplyCode.NOT_FOUND
    assert amqp_code(errors.StorageUnavailable("disk")) == ReplyCode.INTERNAL_ERROR
    assert not from_core(errors.UnknownQueue.about(Resource.queue("q"), "no {resource}"), "/").closes_connection
    assert from_core(errors.StorageUnavailable("disk"), "/").closes_connection


def test_the_vhost_follows_the_resource_as_rabbitmq_words_it() -> None:
    unknown = errors.UnknownExchange.about(Resource.exchange("x"), "no {resource}")
    assert str(unknown) == "no exchange 'x'"      # the core's own wording, as the admin API shows it
    error = from_core(unknown, "/", 40, 10)
    assert (error.reply_code, error.reply_text) == (ReplyCode.NOT_FOUND, "NOT_FOUND - no exchange 'x' in vhost '/'")
    # A name that looks like a resource elsewhere in the text is left as it is.
    inequivalent = errors.InequivalentDeclaration.about(
        Resource.queue("q"), "inequivalent arg 'x-dead-letter-exchange' for {resource}: received 'queue 'z'' but "
                             "current is 'none'")
    assert from_core(inequivalent, "v").reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-exchange' for queue 'q' in vhost 'v': received "
        "'queue 'z'' but current is 'none'")
    assert from_core(errors.StorageUnavailable("disk full"), "v").reply_text.endswith("disk full")

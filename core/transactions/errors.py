"""Errors of the transaction coordinator (protocol-neutral; each protocol maps them to its codes)."""

from __future__ import annotations

from core.errors import CoreError


class TransactionError(CoreError):
    pass


class InvalidTxnState(TransactionError):
    """The request does not fit the transaction's state (ending one that is not ongoing, writing
    to a partition that was not added to it)."""


class InvalidProducerIdMapping(TransactionError):
    """The producer id is not the one the transactional id holds (or the id is unknown)."""


class ProducerFenced(TransactionError):
    """A producer of an older epoch of this transactional id: a newer one has taken over."""


class ConcurrentTransactions(TransactionError):
    """The previous transaction of this id is still being completed; retry."""
    retriable = True


class InvalidTransactionTimeout(TransactionError):
    """transaction.timeout.ms is not positive or is over the coordinator's maximum."""


class InvalidTransactionalId(TransactionError):
    """An empty transactional id, or one too long to store."""

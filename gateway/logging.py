"""The one place that sets up logging: every record goes to stderr, because stdout carries only the
machine-readable READY line."""

from __future__ import annotations

import logging
import sys

GATEWAY_LOGGERS = ("gateway", "gateway.kafka", "gateway.amqp", "gateway.core", "gateway.storage")
# Modules that log under their own package name (logging.getLogger(__name__)) follow the same level.
PACKAGE_LOGGERS = ("protocols", "core", "storage")
# uvicorn serves the admin API; its error logger reports start-up and shutdown of that server.
ADMIN_SERVER_LOGGERS = ("uvicorn", "uvicorn.error")
ACCESS_LOGGER = "uvicorn.access"

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"

_installed_handler: logging.Handler | None = None


def configure_logging(level: str) -> None:
    """Route all logging to stderr; our loggers at `level`, third-party ones at warning or above.

    Idempotent: calling it again (tests do) replaces the handler instead of doubling every line.
    """
    global _installed_handler
    numeric_level = logging.getLevelName(level.upper())
    if not isinstance(numeric_level, int):
        raise ValueError(f"unknown log level {level!r}")

    root = logging.getLogger()
    if _installed_handler is not None:
        root.removeHandler(_installed_handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    _installed_handler = handler
    # Libraries stay quiet below warning even at debug; asking for "error" quiets them too.
    root.setLevel(max(numeric_level, logging.WARNING))

    for name in GATEWAY_LOGGERS + PACKAGE_LOGGERS + ADMIN_SERVER_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(numeric_level)
        logger.propagate = True
        logger.handlers.clear()  # e.g. uvicorn's own, so each record is written exactly once
    # One line per admin request (metrics scrapes, health checks) is noise except when debugging.
    logging.getLogger(ACCESS_LOGGER).setLevel(numeric_level if numeric_level <= logging.DEBUG else logging.WARNING)

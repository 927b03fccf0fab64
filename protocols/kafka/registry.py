"""The handler of every API, found in handlers/ (one module per API with `API` and `handle`).

ApiVersions is answered from this table: what is served is exactly what has a handler, at the
versions its declaration lists. Nothing is maintained by hand.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType
from typing import Any

from protocols.kafka import handlers
from protocols.kafka.broker import RequestContext
from protocols.kafka.codec.compile import Msg, compile_all
from protocols.kafka.codec.declare import Api

Handler = Callable[[Msg, RequestContext], Awaitable[Any]]


def _handler_modules() -> list[ModuleType]:
    return [importlib.import_module(f"{handlers.__name__}.{info.name}")
            for info in pkgutil.iter_modules(handlers.__path__)]


def _collect() -> tuple[dict[int, Api], dict[int, Handler]]:
    apis: dict[int, Api] = {}
    table: dict[int, Handler] = {}
    for module in _handler_modules():
        api = module.API
        if api.key in apis:
            raise RuntimeError(f"two handlers for API key {api.key}: {apis[api.key].name} and {module.__name__}")
        compile_all(api)
        apis[api.key] = api
        table[api.key] = module.handle
    return apis, table


APIS, HANDLERS = _collect()


def advertised(apis: Mapping[int, Api] = APIS) -> list[dict[str, int]]:
    return [{"api_key": key, "min_version": api.versions[0], "max_version": api.versions[1]}
            for key, api in sorted(apis.items())]

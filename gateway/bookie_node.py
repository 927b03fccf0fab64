"""The `gateway bookie` process: one bookie served over TCP for replicated storage.

Start-up: lock the data directory (gateway/data_dir.py), open the metadata store (ZooKeeper; the
session a killed previous run left open is closed first), open the bookie directory (cookie checked against the
metadata store: a wiped or swapped directory is refused, see storage/bookie/cookie.py), listen,
register (ephemeral, with rack), then print one line on stdout:

    BOOKIE READY {"id": ..., "address": "host:port", "listen": "host:port", "rack": ..., "data_dir": ...,
                  "pid": ..., "metrics": "host:port"}

("address" is what clients are told: --advertised-address when given, else where it listens;
"metrics" where Prometheus scrapes /metrics: --metrics-port, absent with --metrics-port -1.)

The bookie id is the one in the directory's cookie when there is one, else --id, else
"bookie-<host>-<port>". SIGTERM/SIGINT: unregister, stop serving, close the journal, exit 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from gateway.bookie_metrics import serve_metrics
from gateway.data_dir import SESSION_FILE, DataDirInUse, lock_data_dir
from gateway.runtime import event_loop_factory, tune_gc
from storage.api import StorageError
from storage.bookie import cookie
from storage.bookie.bookie import Bookie
from storage.bookie.orphans import OrphanCollector
from storage.bookie.registration import BookieRegistration, Registration
from storage.bookie.server import BookieServer
from storage.config import StorageConfig
from storage.ledger.placement import DEFAULT_RACK
from storage.metadata.open import open_metadata_store

log = logging.getLogger("gateway.bookie")

READY_PREFIX = "BOOKIE READY "
_GC_INTERVAL_S = 60.0
_STATE_CHECK_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class BookieSettings:
    data_dir: Path
    host: str
    port: int
    metadata: str
    secret: str
    rack: str = DEFAULT_RACK
    bookie_id: str | None = None
    advertised: str | None = None       # "host:port" clients are told, when it differs (NAT, a proxy)
    storage: StorageConfig = StorageConfig()
    metrics_port: int | None = 0        # Prometheus /metrics on the listen host (0: a free port; None: none)


def run(settings: BookieSettings) -> int:
    tune_gc()
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        return runner.run(_serve(settings))


async def _serve(settings: BookieSettings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if not settings.secret:
        log.error("a bookie needs the cluster's shared secret ([storage] secret in --config)")
        return 2
    try:
        data_dir_lock = lock_data_dir(settings.data_dir)
    except DataDirInUse as exc:
        log.error("bookie cannot start: %s", exc)
        return 1
    try:
        return await _serve_locked(settings, stop)
    finally:
        if data_dir_lock is not None:
            os.close(data_dir_lock)


async def _serve_locked(settings: BookieSettings, stop: asyncio.Event) -> int:
    metadata = await open_metadata_store(settings.metadata, session_file=settings.data_dir / SESSION_FILE,
                                         session_timeout_s=settings.storage.zookeeper_session_timeout_ms / 1000)
    bookie = server = registration = metrics_server = session_metrics = None
    try:
        directory = settings.data_dir / "bookie"
        bookie_id = _bookie_id(settings, directory)
        bookie = await Bookie.open(directory, settings.storage, metadata, bookie_id=bookie_id)
        instance_id = json.loads((directory / cookie.FILE_NAME).read_bytes())["instance_id"]
        server = BookieServer(bookie, bookie_id, instance_id, settings.secret.encode(), tls=settings.storage.node_tls)
        host, port = await server.start(settings.host, settings.port)
        listen = f"{host}:{port}"
        advertised_host, _, advertised_port = (settings.advertised or listen).rpartition(":")
        registration = Registration(metadata, BookieRegistration(bookie_id, advertised_host, int(advertised_port),
                                                                 settings.rack, instance_id,
                                                                 read_only=bookie.is_read_only))
        await registration.start()
        ready = {"id": bookie_id, "address": settings.advertised or listen, "listen": listen, "rack": settings.rack,
                 "data_dir": str(settings.data_dir), "pid": os.getpid()}
        if settings.metrics_port is not None:
            metrics_server, session_metrics = serve_metrics(bookie, directory, metadata, settings.host,
                                                            settings.metrics_port, _version())
            ready["metrics"] = f"{settings.host}:{metrics_server.server_port}"
        sys.stdout.write(READY_PREFIX + json.dumps(ready) + "\n")
        sys.stdout.flush()
        log.info("bookie %s serving on %s:%d (rack %s)", bookie_id, host, port, settings.rack)
        housekeeping = asyncio.create_task(_housekeeping(bookie, registration, OrphanCollector(bookie, metadata)))
        await stop.wait()
        housekeeping.cancel()
        return 0
    except StorageError as exc:
        log.error("bookie cannot start: %s", exc)
        return 1
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
            session_metrics.close()
        if registration is not None:
            await registration.close()
        if server is not None:
            await server.close()
        if bookie is not None:
            await bookie.close()
        await metadata.close()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("gateway")
    except PackageNotFoundError:
        return "0"


def _bookie_id(settings: BookieSettings, directory: Path) -> str:
    try:
        return json.loads((directory / cookie.FILE_NAME).read_bytes())["bookie_id"]
    except FileNotFoundError:
        pass
    if settings.bookie_id:
        return settings.bookie_id
    if settings.port == 0:
        raise StorageError("a new bookie on a free port needs --id (its address would change at every start)")
    return f"bookie-{settings.host}-{settings.port}"


async def _housekeeping(bookie: Bookie, registration: Registration, orphans: OrphanCollector) -> None:
    """Publish a turn to read-only at once; now and then drop deleted ledgers and collect journal garbage."""
    since_gc = 0.0
    while True:
        await asyncio.sleep(_STATE_CHECK_INTERVAL_S)
        try:
            await registration.set_read_only(bookie.is_read_only)
        except StorageError as exc:
            log.warning("could not publish the bookie's state: %s", exc)
        since_gc += _STATE_CHECK_INTERVAL_S
        if since_gc >= _GC_INTERVAL_S:
            since_gc = 0.0
            try:
                await orphans.collect()
                await bookie.collect_garbage()
            except (OSError, StorageError) as exc:
                log.warning("garbage collection failed: %s", exc)

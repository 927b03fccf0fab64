"""What every MQTT connection shares: settings, the core port, the sessions of client ids that are
connected or kept, and the retained messages."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from core.queues.service import QueueService
from protocols.mqtt.core_port import CorePort
from protocols.mqtt.retained import RetainedStore
from protocols.mqtt.session import Session, SessionStore

MAX_CLIENT_ID_BYTES = 200      # a client id names a queue (255 bytes at most, with its prefix)


@dataclass(frozen=True, slots=True)
class MqttSettings:
    default_guest: bool = True            # anonymous or guest/guest from loopback, on "/"
    max_packet_bytes: int = 16 << 20      # announced as maximum packet size in a 5.0 CONNACK
    connect_max_packet_bytes: int = 1 << 20   # until CONNECT is accepted
    receive_maximum: int = 1024           # QoS 1/2 publishes a client may have unacknowledged with us
    topic_alias_maximum: int = 64
    max_session_expiry_s: int = 0xFFFFFFFF
    connect_timeout_s: float = 10.0       # a connection silent after opening is dropped


class MqttBroker:
    def __init__(self, core, settings: MqttSettings, queues: QueueService) -> None:
        self.settings = settings
        self.port = CorePort(core, queues)
        self.retained = RetainedStore(self.port)
        self.stored_sessions = SessionStore(self.port)
        self.sessions: dict[tuple[str, str, str], Session] = {}
        self._session_locks: dict[tuple[str, str, str], asyncio.Lock] = {}

    def session_lock(self, key: tuple[str, str, str]) -> asyncio.Lock:
        """Held while a connection takes a client id over, so two CONNECTs with one id go one at a time."""
        lock = self._session_locks.get(key)
        if lock is None:
            lock = self._session_locks[key] = asyncio.Lock()
        return lock

    async def session_for(self, key: tuple[str, str, str]) -> Session | None:
        """The session of a client id: live or kept in memory, else stored, else None."""
        session = self.sessions.get(key)
        if session is None:
            session = await self.stored_sessions.load(*key)
            if session is not None:
                self.sessions[key] = session
        return session

    def session_for_now(self, key: tuple[str, str, str]) -> Session | None:
        """The session kept in memory (after a takeover: what the previous connection left)."""
        return self.sessions.get(key)

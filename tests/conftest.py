"""Fixtures every unit test may use."""

import pytest

from core.clock import FakeClock
from core.service import Core
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage


@pytest.fixture
async def core(tmp_path):
    """A started core on the embedded storage in tmp_path, with a fake clock."""
    storage = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    instance = Core(storage.metadata, storage.logs, FakeClock())
    await instance.start()
    yield instance
    await instance.close()
    await storage.close()

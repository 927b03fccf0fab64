"""Client quotas: which stored quota applies to a user and client id, and the throttle time."""

from __future__ import annotations

import pytest

from core.clock import FakeClock
from core.errors import InvalidArgument
from core.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, SAMPLES, ClientQuotas
from storage.config import StorageConfig
from storage.embedded import EmbeddedStorage


@pytest.fixture
async def storage(tmp_path):
    storage = await EmbeddedStorage.open(tmp_path / "data", StorageConfig())
    yield storage
    await storage.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start_ms=1_000_000)


async def test_no_quota_means_no_throttle_and_a_quota_throttles_past_its_rate(storage, clock) -> None:
    quotas = ClientQuotas(storage.metadata, clock)
    assert await quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "app", 10**9) == 0
    await quotas.alter({"client-id": "app"}, {PRODUCER_BYTE_RATE: 1000.0})
    # 10 s of window at 1000 B/s is 10,000 bytes: up to that, nothing to wait for ...
    assert await quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "app", 10_000) == 0
    # ... 20,000 is twice the rate: wait as long again as the window, as Kafka computes it.
    assert await quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "app", 10_000) == 10_000
    assert await quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "other", 10**6) == 0
    assert await quotas.throttle_ms(CONSUMER_BYTE_RATE, "alice", "app", 10**6) == 0
    # Once the samples age out of the window, the client is back within its quota.
    clock.advance(SAMPLES * 1000)
    assert await quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "app", 100) == 0


async def test_the_most_specific_quota_applies_in_kafkas_order(storage, clock) -> None:
    quotas = ClientQuotas(storage.metadata, clock)
    await quotas.alter({"client-id": None}, {PRODUCER_BYTE_RATE: 1e9})          # default client id
    await quotas.alter({"user": None}, {PRODUCER_BYTE_RATE: 1e9})               # default user
    await quotas.alter({"user": "alice"}, {PRODUCER_BYTE_RATE: 100.0})
    await quotas.alter({"user": "alice", "client-id": "batch"}, {PRODUCER_BYTE_RATE: 1e9})
    assert await quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "batch", 50_000) == 0   # user+client wins
    assert await quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "web", 50_000) > 0      # then user
    assert await quotas.throttle_ms(PRODUCER_BYTE_RATE, "bob", "web", 50_000) == 0       # default user


async def test_a_default_quota_meters_each_user_on_its_own(storage, clock) -> None:
    quotas = ClientQuotas(storage.metadata, clock)
    await quotas.alter({"user": None}, {CONSUMER_BYTE_RATE: 1000.0})
    assert await quotas.throttle_ms(CONSUMER_BYTE_RATE, "alice", "c", 15_000) > 0
    assert await quotas.throttle_ms(CONSUMER_BYTE_RATE, "bob", "c", 5_000) == 0


async def test_quotas_are_stored_and_removing_the_last_value_removes_the_entity(storage, clock) -> None:
    quotas = ClientQuotas(storage.metadata, clock)
    await quotas.alter({"user": "a/b c"}, {PRODUCER_BYTE_RATE: 5.0, CONSUMER_BYTE_RATE: 7.0})
    reloaded = ClientQuotas(storage.metadata, clock)
    assert [(e.entity, e.values) for e in await reloaded.entries()] == [
        ({"user": "a/b c"}, {PRODUCER_BYTE_RATE: 5.0, CONSUMER_BYTE_RATE: 7.0})]
    await reloaded.alter({"user": "a/b c"}, {PRODUCER_BYTE_RATE: None, CONSUMER_BYTE_RATE: None})
    assert await ClientQuotas(storage.metadata, clock).entries() == []


@pytest.mark.parametrize("entity, changes, message", [
    ({}, {PRODUCER_BYTE_RATE: 1.0}, "empty"),
    ({"ip": "1.2.3.4"}, {"connection_creation_rate": 1.0}, "entity type: ip"),
    ({"user": "u"}, {"request_percentage": 50.0}, "not supported"),
    ({"user": "u"}, {"bogus": 1.0}, "Invalid configuration key bogus"),
    ({"user": "u"}, {PRODUCER_BYTE_RATE: 0.0}, "positive"),
])
async def test_invalid_alterations_are_refused_and_store_nothing(storage, clock, entity, changes, message) -> None:
    quotas = ClientQuotas(storage.metadata, clock)
    with pytest.raises(InvalidArgument, match=message):
        await quotas.alter(entity, changes)
    assert await quotas.entries() == []

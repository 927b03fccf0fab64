"""AlterReplicaLogDirs through the wire format both ways: one log dir, so only moves into it succeed."""

from __future__ import annotations

import pytest

from protocols.kafka.codec.errors import ErrorCode
from protocols.kafka.handlers import alter_replica_log_dirs
from test_admin_handlers import LOG_DIR, broker, call, create  # noqa: F401 (fixture)


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_moves_into_the_broker_log_dir_succeed_and_other_dirs_are_not_found(broker, version) -> None:
    await create(broker, "ledger", 2)
    response = await call(broker, alter_replica_log_dirs, version, {"dirs": [
        {"path": LOG_DIR + "/", "topics": [{"name": "ledger", "partitions": [0, 1]}]},
        {"path": "/elsewhere", "topics": [{"name": "ledger", "partitions": [0]}, {"name": "other", "partitions": [3]}]},
        {"path": "relative/dir", "topics": [{"name": "other", "partitions": [4]}]},
    ]})
    assert [(r.topic_name, [(p.partition_index, p.error_code) for p in r.partitions]) for r in response.results] == [
        ("ledger", [(0, ErrorCode.NONE), (1, ErrorCode.NONE), (0, ErrorCode.LOG_DIR_NOT_FOUND)]),
        ("other", [(3, ErrorCode.LOG_DIR_NOT_FOUND), (4, ErrorCode.LOG_DIR_NOT_FOUND)]),
    ]

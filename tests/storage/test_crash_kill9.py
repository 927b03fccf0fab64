"""SIGKILL during a stream of acknowledged appends: every acknowledged entry is readable afterwards,
at the offset it was acknowledged with, whole; nothing unacknowledged is half-visible."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD = Path(__file__).with_name("crash_child.py")
ROOT = Path(__file__).resolve().parents[2]


def _run(mode: str, data_dir: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, str(CHILD), mode, str(data_dir)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)


def _expected_payload_len(seq: int) -> int:
    return len(f"p{seq}:") + 200 + seq % 700


def test_every_acknowledged_append_survives_kill9(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    acked: dict[int, int] = {}  # offset -> sequence number
    for _round in range(4):
        writer = _run("write", tmp_path)
        first = writer.stdout.readline()
        assert first.startswith("start "), writer.stderr.read()
        deadline = time.monotonic() + rng.uniform(0.5, 2.0)
        lines = []
        while time.monotonic() < deadline:
            line = writer.stdout.readline()
            if not line:
                break
            lines.append(line)
        writer.send_signal(signal.SIGKILL)
        rest, _ = writer.communicate()
        lines.extend(rest.splitlines(keepends=True))
        round_acks = {}
        for line in lines:
            if line.endswith("\n"):  # a line cut by the kill is not an acknowledgement we saw
                _, offset, seq = line.split()
                round_acks[int(offset)] = int(seq)
        assert round_acks, "the writer acknowledged nothing before the kill"
        acked.update(round_acks)

        dump = _run("dump", tmp_path)
        out, err = dump.communicate(timeout=120)
        assert dump.returncode == 0, err
        entries = {}
        end = None
        for line in out.splitlines():
            if line.startswith("entry "):
                _, offset, tag, size = line.split()
                entries[int(offset)] = (tag, int(size))
            elif line.startswith("end "):
                end = int(line.split()[1])
        assert end is not None
        assert sorted(entries) == list(range(end)), "offsets are not dense from 0"
        for offset, seq in acked.items():
            assert offset in entries, f"acknowledged offset {offset} is lost"
            assert entries[offset][0] == f"p{seq}", f"offset {offset} holds another entry than acknowledged"
        for offset, (tag, size) in entries.items():
            assert size == _expected_payload_len(int(tag[1:])), f"entry {offset} is torn"
    assert len(acked) > 1000

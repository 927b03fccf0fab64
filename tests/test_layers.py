"""The layering rules hold: import-linter's contracts (pyproject.toml), and the pure packages (record
formats, codecs, protocol state machines) import no I/O, no storage and no gateway."""

from __future__ import annotations

import ast
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
FORBIDDEN_PROJECT_PACKAGES = ("storage", "gateway")  # forbidden outright, whoever imports them
PROJECT_PACKAGES = ("gateway", "protocols", "core", "storage")


def test_import_linter_contracts_are_kept():
    result = subprocess.run(
        [str(VENV_BIN / "lint-imports"), "--config", "pyproject.toml", "--no-cache"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def pure_module_files() -> dict[str, Path]:
    """Every module under the pure package directories that exist so far, found by walking them."""
    modules = {}
    for pattern in PURE_PACKAGE_GLOBS:
        for directory in sorted(REPO_ROOT.glob(pattern)):
            if not directory.is_dir():
                continue
            for path in sorted(directory.rglob("*.py")):
                parts = path.relative_to(REPO_ROOT).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                modules[".".join(parts)] = path
    return modules


def pure_modules() -> list[str]:
    return list(pure_module_files())


def imported_names(path: Path) -> set[str]:
    """The absolute module names a file imports, anywhere in it (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def third_party_imports(files: list[Path]) -> list[str]:
    """Modules from installed distributions that the given files import."""
    return sorted({
        name for path in files for name in imported_names(path)
        if name.split(".")[0] not in sys.stdlib_module_names and name.split(".")[0] not in PROJECT_PACKAGES
    })


def test_pure_modules_are_found_where_they_exist():
    # Guards the walk itself: if core/records exists, it must be among the checked modules.
    if (REPO_ROOT / "core" / "records").is_dir():
        assert "core.records" in pure_modules()


def test_pure_modules_import_no_io_storage_or_gateway():
    files = pure_module_files()
    if not files:
        pytest.skip("no pure packages (core/records, protocols/*/codec, protocols/*/machine) yet")
    modules = list(files)
    # Direct imports, read from the source: caught even if a library had already loaded the module.
    direct = {str(path.relative_to(REPO_ROOT)): sorted(name for name in imported_names(path)
                                                        if name.split(".")[0] in FORBIDDEN_MODULES)
              for path in files.values()}
    direct = {path: names for path, names in direct.items() if names}
    assert not direct, f"pure modules import {direct}"
    # Third-party libraries are imported first and are not blamed for what they load themselves
    # (crc32c's __init__ imports importlib.metadata, which drags in email.utils and with it socket).
    # What is checked is what our modules add on top: directly, via the stdlib or via other project code.
    libraries = third_party_imports(list(files.values()))
    probe = (
        "import importlib, json, sys\n"
        f"for name in {libraries!r}:\n"
        "    importlib.import_module(name)\n"
        "before = set(sys.modules)\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"forbidden = {FORBIDDEN_MODULES!r}\n"
        "print(json.dumps(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in forbidden)))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in forbidden)))\n"
    )
    # A fresh interpreter, so nothing this test process imported can hide or cause a violation.
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"importing {modules} failed:\n{result.stderr}"
    added_by_us, present = (json.loads(line) for line in result.stdout.strip().splitlines()[-2:])
    assert added_by_us == [], f"pure modules {modules} pulled in {added_by_us}"
    # Project packages can never come in through a third-party library.
    assert not [m for m in present if m.split(".")[0] in FORBIDDEN_PROJECT_PACKAGES], present

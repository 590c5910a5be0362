"""Under CI a test that would skip for a missing package or missing data fails (tests/
conftest.py); a skip for "not applicable here" stays a skip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PROBE = '''
import pytest

def test_missing_package():
    pytest.importorskip("no_such_module_for_hastune")

def test_not_applicable():
    pytest.skip("this machine has CUDA")
'''


def _run(tmp_path: Path, ci: bool) -> str:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(tmp_path)], capture_output=True, text=True, env=env, timeout=120,
                       cwd=tmp_path)
    return p.stdout.strip().splitlines()[-1]


def test_missing_package_fails_under_ci(tmp_path: Path) -> None:
    assert _run(tmp_path, ci=True).startswith("1 failed, 1 skipped")


def test_missing_package_skips_elsewhere(tmp_path: Path) -> None:
    assert _run(tmp_path, ci=False).startswith("2 skipped")

"""What `hastune serve` and the real evaluator refuse before any worker starts, in one line
naming the real cause (runners/engine/backend.py `preflight`): a recipe's module:factory
model, an unknown device, CUDA that torch cannot see, torch missing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from hastune.errors import InputError
from runners.engine.backend import preflight

ROOT = Path(__file__).resolve().parents[2]


def test_a_recipe_model_never_reaches_the_factory_loader():
    with pytest.raises(InputError) as e:
        preflight("os:getcwd", "cpu", model_from="model", path="r.yaml")
    assert e.value.field == "model" and "--model" in e.value.fix
    preflight("ref-tiny", "cpu", model_from="model")  # presets are fine from a recipe


def test_bad_device_and_missing_torch(monkeypatch):
    with pytest.raises(InputError, match="unknown device 'tpu'"):
        preflight("ref-tiny", "tpu")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(InputError, match="need torch, which is not installed"):
        preflight("ref-tiny", "cpu")


def test_cuda_without_a_device_names_it():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(InputError, match="sees 0 CUDA devices"):
        preflight("ref-tiny", "cuda")


def test_serve_refuses_a_recipe_factory_model_with_exit_2(tmp_path):
    src = (ROOT / "examples/reference-cpu.yaml").read_text()
    bad = tmp_path / "r.yaml"
    bad.write_text(src.replace("model: ref-small", 'model: "os:getcwd"')
                   .replace("profile: ../profiles", f"profile: {ROOT}/profiles"))
    p = subprocess.run([sys.executable, "-m", "hastune", "serve",
                        "examples/configs/reference-cpu-nodg.yaml", "--recipe", str(bad),
                        "-n", "5"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "only --model on the command line" in p.stderr


def test_ctrl_c_stops_serve_with_one_line_and_130():
    """SIGINT to the whole process group (what Ctrl-C sends): the workers ignore it, the
    frontend stops them; exit 130, no traceback from anyone."""
    pytest.importorskip("torch")
    import os
    import signal
    import time

    p = subprocess.Popen([sys.executable, "-m", "hastune", "serve",
                          "examples/configs/reference-cpu-nodg.yaml", "--model", "ref-tiny"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        lines = []
        while time.monotonic() < deadline:  # until the workers are up
            line = p.stderr.readline()
            lines.append(line)
            if "serving; Ctrl-C stops" in line or not line:
                break
        assert any("serving" in x for x in lines), "".join(lines)
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err

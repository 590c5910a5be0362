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

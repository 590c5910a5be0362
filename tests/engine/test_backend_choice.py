"""Choosing the engine's backend: an unknown one, or ray where ray is not installed, is one
clear input error (exit 2) that says what to do — before any worker starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hastune.errors import InputError
from runners.engine import backend

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples" / "configs" / "epd-2-2-4.yaml"


def test_local_is_the_spawn_context():
    ctx = backend.context("local")
    assert ctx.get_start_method() == "spawn"
    backend.close(ctx)  # nothing to close


def test_an_unknown_backend_names_the_choices():
    with pytest.raises(InputError, match="unknown backend 'k8s'.*use local or ray"):
        backend.context("k8s")


def test_a_ray_address_needs_the_ray_backend():
    with pytest.raises(InputError, match="--ray-address.*add --backend ray"):
        backend.context("local", "10.0.0.1:6379")


def test_ray_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(InputError, match=r"needs ray, which is not installed.*pip install"):
        backend.check("ray")


def test_importing_the_engine_does_not_load_ray():
    out = subprocess.run([sys.executable, "-c", "import sys, hastune, hastune.cli, "
                          "runners.engine, runners.engine.backend; print('ray' in sys.modules)"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("args", [
    ["serve", CONFIG, "--backend", "k8s"],
    ["evaluate", REPO / "examples" / "audio-ultravox-8xa100.yaml", "-c", CONFIG,
     "--evaluator", "real", "--backend", "k8s"],
])
def test_cli_unknown_backend_exits_2(args):
    r = subprocess.run([sys.executable, "-m", "hastune", *map(str, args)], capture_output=True,
                       text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "--backend" in lines[0] and "use local or ray" in lines[0]


@pytest.mark.parametrize("opts, field", [
    ({"evaluator": "sim", "backend": "ray"}, "--backend"),
    ({"evaluator": "real", "backend": "ray", "workers": 2}, "--ray-address"),
])
def test_tune_checks_the_backend_before_any_work(opts, field, monkeypatch):
    from hastune.recipe import load_recipe
    from hastune.tune.runner import TuneOptions, Tuner

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(InputError, match=field):
        Tuner(load_recipe(REPO / "examples" / "reference-cpu.yaml"), TuneOptions(**opts))


def test_the_real_evaluator_takes_the_backend():
    from hastune.evaluators.engine import RealEvaluation, RealOptions
    from hastune.recipe import load_recipe

    rec = load_recipe(REPO / "examples" / "reference-cpu.yaml")
    with pytest.raises(InputError, match="unknown backend"):
        RealEvaluation(rec, RealOptions(backend="k8s"))


def test_cli_ray_missing_exits_2_with_the_install_line(tmp_path):
    (tmp_path / "ray.py").write_text('raise ModuleNotFoundError("No module named ray", '
                                     'name="ray")\n')  # ray absent, whether installed or not
    import os

    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "hastune", "serve", str(CONFIG), "--backend",
                        "ray"], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "pip install 'hastune[ray]'" in lines[0], r.stderr


@pytest.mark.parametrize("opts", [
    {"evaluator": "real", "workers": 2},
    {"evaluator": "real", "workers": 2, "engine": "vllm"},
])
def test_concurrent_engine_trials_on_this_machine_are_refused(opts, monkeypatch):
    """K engine trials at once on this machine would measure each other: refused, not run
    one at a time behind the user's back."""
    from hastune.recipe import load_recipe
    from hastune.tune.runner import TuneOptions, Tuner

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(InputError, match="--workers") as err:
        Tuner(load_recipe(REPO / "examples" / "reference-cpu.yaml"), TuneOptions(**opts))
    assert "--workers 1" in err.value.fix


def test_ray_workers_each_make_the_real_evaluator():
    """On a Ray cluster, K tune workers are K processes, each with the real evaluator the
    command names (not the simulator, not one after another in this process)."""
    from hastune.recipe import load_recipe
    from hastune.tune.runner import TuneOptions, Tuner

    pytest.importorskip("ray")
    tuner = Tuner(load_recipe(REPO / "examples" / "reference-cpu.yaml"),
                  TuneOptions(evaluator="real", backend="ray", ray_address="10.0.0.1:6379",
                              workers=2))
    name, options = tuner.evaluator_spec
    assert (name, options.backend, options.ray_address) == ("real", "ray", "10.0.0.1:6379")

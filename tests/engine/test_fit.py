"""Deployments that fit the machine (runners/engine/fit.py): the cores or GPUs a deployment
needs against the ones this process has, refused with the arithmetic before any worker
starts, or run with --oversubscribe and marked not comparable with the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.archs.epd import EPDConfig
from hastune.archs.nodg import NoDGConfig
from hastune.archs.padg import PaDGConfig
from hastune.errors import InputError
from runners.engine.fit import NOT_COMPARABLE, check_fit, cpu_cores, plan

ROOT = Path(__file__).resolve().parents[2]
CORES = len(cpu_cores())


def _epd(n_d: int) -> EPDConfig:
    return EPDConfig(architecture="epd", n_E=1, n_P=0, n_D=n_d, B=2, s=0.0)


@settings(max_examples=60, deadline=None)
@given(n_e=st.integers(1, 4), n_p=st.integers(0, 4), n_d=st.integers(1, 6),
       threads=st.integers(1, 4), have=st.integers(1, 24))
def test_fit_arithmetic_and_refusal(n_e, n_p, n_d, threads, have):
    cfg = EPDConfig(architecture="epd", n_E=n_e, n_P=n_p, n_D=n_d, B=2,
                    s=0.5 if n_p else 0.0)
    workers = n_e + n_p + n_d
    need = workers * threads
    fit = plan(cfg, "cpu", threads, have=have)
    assert fit.need == need and fit.fits == (need <= have)
    assert fit.arithmetic().startswith(f"{workers} worker")
    assert f"= {need} thread" in fit.arithmetic() and f"on {have} core" in fit.arithmetic()
    if need <= have:
        assert check_fit(cfg, "cpu", threads, have=have).oversubscribed is False
        # each worker its own cores: no core given twice
        fit.cores = list(range(have))
        given_ = [c for k in range(workers) for c in fit.cores_for(k)]
        assert len(given_) == len(set(given_)) == need
        return
    with pytest.raises(InputError) as e:
        check_fit(cfg, "cpu", threads, path="c.yaml", have=have)
    err = e.value
    assert err.file == "c.yaml" and err.field == "n_E/n_P/n_D"
    assert fit.arithmetic() in err.problem and "--oversubscribe" in err.fix
    assert f"at most {have // threads} worker" in err.fix
    over = check_fit(cfg, "cpu", threads, oversubscribe=True, have=have)
    assert over.oversubscribed and over.as_dict()["note"] == NOT_COMPARABLE
    assert over.as_dict()["fits"] is False


def test_replica_fields_and_gpus_and_ray():
    with pytest.raises(InputError) as e:
        check_fit(NoDGConfig(architecture="nodg", replicas=3, tp=1, pp=1), have=2)
    assert e.value.field == "replicas" and "3 workers × 1 thread = 3 threads on 2 cores" \
        in e.value.problem
    with pytest.raises(InputError, match="instances"):
        check_fit(PaDGConfig(architecture="padg", instances=4, tp=1, pp=1), have=2)
    gpus = plan(_epd(3), "cuda:1", have=4)  # GPUs from cuda:1 up
    assert gpus.need == 4 and gpus.fits and gpus.arithmetic() == "4 workers need 4 GPUs; 4 visible"
    assert [gpus.device_for(k) for k in range(4)] == ["cuda:1", "cuda:2", "cuda:3", "cuda:4"]
    with pytest.raises(InputError, match="4 workers need 4 GPUs; 1 visible"):
        check_fit(_epd(3), "cuda", have=1)
    shared = check_fit(_epd(3), "cuda", oversubscribe=True, have=1)
    assert {shared.device_for(k) for k in range(4)} == {"cuda:0"}
    ray = plan(_epd(5), "cpu", backend="ray")  # Ray places actors by num_cpus itself
    assert ray.fits and not ray.checked and ray.as_dict()["arithmetic"] == "placed by ray"


def test_this_machine():
    """The cores are this process's (sched_getaffinity: taskset narrows them)."""
    if hasattr(os, "sched_getaffinity"):
        assert CORES == len(os.sched_getaffinity(0))
    fits = plan(NoDGConfig(architecture="nodg", replicas=CORES, tp=1, pp=1), "cpu")
    assert fits.fits and fits.have == CORES and fits.cores == cpu_cores()
    over = plan(_epd(CORES), "cpu")  # one worker more than cores
    assert over.need == CORES + 1 and not over.fits
    assert not plan(NoDGConfig(architecture="nodg", replicas=CORES, tp=1, pp=1), "cpu",
                    threads=2).fits


def _recipe(tmp_path: Path, gpus: int) -> Path:
    rec = yaml.safe_load((ROOT / "examples" / "reference-cpu.yaml").read_text())
    rec["profile"] = str(ROOT / "profiles" / "cpu" / "ref-small-1core.yaml")
    rec["cluster"].update(gpus=gpus, gpus_per_node=gpus)
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(rec))
    return p


def test_cli_refuses_before_any_worker_starts(tmp_path):
    """One decode worker more than this process has cores: evaluate --evaluator real and
    serve exit 2 with the arithmetic, and no engine starts (no 'engine up', within seconds)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_epd(CORES).model_dump(mode="json")))
    rec = _recipe(tmp_path, CORES + 1)
    want = f"{CORES + 1} workers × 1 thread = {CORES + 1} threads on {CORES} core"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for args in (["evaluate", str(rec), "--config", str(cfg), "--evaluator", "real"],
                 ["serve", str(cfg), "--recipe", str(rec), "-n", "5"]):
        p = subprocess.run([sys.executable, "-m", "hastune", *args], capture_output=True,
                           text=True, timeout=60, cwd=ROOT, env=env)
        assert p.returncode == 2, p.stderr
        assert want in p.stderr and "--oversubscribe" in p.stderr, p.stderr
        assert "engine up" not in p.stderr and "Traceback" not in p.stderr
    # the simulator has no such limit: one device per worker, whatever runs it
    p = subprocess.run([sys.executable, "-m", "hastune", "evaluate", str(rec), "--config",
                        str(cfg), "--requests", "200", "--json"], capture_output=True,
                       text=True, timeout=120, cwd=ROOT, env=env)
    assert p.returncode in (0, 3), p.stderr
    assert "fit" not in json.loads(p.stdout)


def test_oversubscribed_serve_says_so(tmp_path):
    pytest.importorskip("torch")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_epd(CORES).model_dump(mode="json")))
    rec = _recipe(tmp_path, CORES + 1)
    p = subprocess.run([sys.executable, "-m", "hastune", "serve", str(cfg), "--recipe",
                        str(rec), "--model", "ref-tiny", "-n", "12", "--rate", "5",
                        "--oversubscribe", "--json"], capture_output=True, text=True,
                       timeout=180, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode in (0, 5), p.stderr[-2000:]
    assert "not comparable with the simulator" in p.stderr
    out = json.loads(p.stdout)
    assert out["fit"]["oversubscribed"] is True and out["fit"]["need"] == CORES + 1
    assert out["fit"]["have"] == CORES and out["fit"]["note"] == NOT_COMPARABLE

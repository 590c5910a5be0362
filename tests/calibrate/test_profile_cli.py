"""`hastune profile --model ... --out ...` on the CPU, end to end (ref-tiny, --quick, one
thread), and `hastune profile check` on what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def hastune(*args, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hastune", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("prof") / "ref-tiny.yaml"
    res = hastune("profile", "--model", "ref-tiny", "--device", "cpu", "--threads", "1",
                  "--quick", "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    return out, json.loads(res.stdout)


def test_profile_writes_a_valid_measured_profile(measured):
    out, summary = measured
    assert summary["measured"] == summary["shapes"] > 10
    assert set(summary["held_out_error"]) == {"encode", "prefill", "decode"}
    res = hastune("validate", out)
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert text.startswith("# Measured profile: ref-tiny@cpu")
    assert "# Regenerate: hastune profile --model ref-tiny --device cpu --threads 1 --quick" in text
    data = yaml.safe_load(text)
    # one thread: an encoder and its co-resident prefill time-share the worker's core, so
    # both run at 1/share of their full speed
    assert data["fit"]["measured"]["share"] == "time-shared"
    for curve in (data["encode"]["sm_curve"][1], data["prefill"]["sm_curve"]):
        assert [f for f, _ in curve][-1] == 1.0
        assert all(abs(r * f - 1.0) < 1e-3 for f, r in curve)
    assert data["memory"]["gpu_bytes"] == 2 * 2**30
    assert (out.parent / "ref-tiny.rows.json").exists()


def test_a_second_run_resumes_from_the_rows_file(measured):
    out, first = measured
    res = hastune("profile", "--model", "ref-tiny", "--threads", "1", "--quick", "--out", out,
                  "--json")
    assert res.returncode == 0, res.stderr
    again = json.loads(res.stdout)
    assert again["measured"] == 0 and again["held_out_error"] == first["held_out_error"]


def test_check_prints_the_measured_errors_without_calibration_data(measured):
    out, summary = measured
    res = hastune("profile", "check", out, "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["measured"] and got["held_out"] == summary["held_out_error"]
    res = hastune("profile", "check", out)
    assert res.returncode == 0 and "held-out" in res.stdout and "regenerate:" in res.stdout


def test_the_measured_profile_drives_evaluate(measured, tmp_path):
    out, _ = measured
    rec = yaml.safe_load((REPO / "examples" / "reference-cpu.yaml").read_text())
    rec["profile"] = str(out)
    rec["workload"]["requests"] = 200
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(rec))
    res = hastune("evaluate", p, "--config", REPO / "examples/configs/reference-cpu-epd.yaml",
                  "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["goodput_rps"] > 0


def test_profile_needs_model_and_out():
    res = hastune("profile", "--model", "ref-tiny")
    assert res.returncode == 2 and "--out" in res.stderr and "Fix:" in res.stderr
    res = hastune("profile", "--model", "ref-nope", "--out", "/tmp/never.yaml")
    assert res.returncode == 2 and "Fix:" in res.stderr and "Traceback" not in res.stderr
    assert not Path("/tmp/never.yaml").exists()


def test_profile_alone_prints_help_naming_both_uses():
    res = hastune("profile")
    assert "--model" in res.stdout and "check" in res.stdout


def test_cpu_thread_shares(tmp_path):
    torch = pytest.importorskip("torch")
    from hastune.calibrate.measure import Device

    before = torch.get_num_threads()
    try:
        dev = Device("cpu", threads=4)
        assert dev.share_kind == "threads" and dev.shares == [0.25, 0.5, 0.75]
        with dev.share(0.5) as given:
            assert given == 0.5 and torch.get_num_threads() == 2
        assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(before)


def test_the_profile_command_loads_torch_only_to_measure():
    code = ("import sys, hastune.cli.profile, hastune.calibrate.profiler, "
            "hastune.calibrate.fit_measured, hastune.calibrate.measure; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr



def test_shares_of_a_shape_are_measured_together(tmp_path):
    torch = pytest.importorskip("torch")
    from hastune.calibrate.measure import QUICK, Device, RowCache, measure, shapes
    from tests.runners.toy_model import ToyModel

    before = torch.get_num_threads()
    try:
        dev = Device("cpu", threads=2)  # the toy model does next to no work
        model = ToyModel()
        todo = shapes(QUICK, model.profile_sizes(), lambda m, s: (16, 4), dev.shares)
        rows = measure(model, dev, todo, QUICK, RowCache(None, {}))
    finally:
        torch.set_num_threads(before)
    share = [r for r in rows if r.stage == "encode@share"]
    assert sorted(r.params["share"] for r in share) == [0.5, 1.0]
    assert all(len(r.samples) == 2 * QUICK.repeats for r in share)
    assert {r.stage for r in rows} == {"encode", "prefill", "decode", "encode@share",
                                       "prefill@share"}

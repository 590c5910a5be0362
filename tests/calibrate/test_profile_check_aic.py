"""`hastune profile check` on a profile built from aiconfigurator-core: the fit record names the
source (engine, version, dtypes) and check reads those same tables again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from hastune.calibrate.aic_profiles import aic_source, build_profile
from hastune.calibrate.build import render
from hastune.models import load_model

REPO = Path(__file__).resolve().parents[2]


def hastune(*args, env=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hastune", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, **(env or {})})


def test_check_reads_the_tables_a_built_fp8_profile_was_fitted_on(tmp_path):
    data = build_profile(load_model(REPO / "examples/models/llama-3.1-8b"), "h100-80gb", "fp8")
    ksrc = data["fit"]["kernel_source"]
    assert (ksrc["database"], ksrc["engine"], ksrc["gemm_dtype"], ksrc["kv_dtype"]) == (
        "aiconfigurator-core", "vllm", "fp8", "fp8")
    path = tmp_path / "llama-8b-fp8.yaml"
    path.write_text(render(data, aic_source("fp8").origin), encoding="utf-8")
    # no calibration folder anywhere: the package's tables are what check reads
    out = hastune("profile", "check", path, "--json",
                  env={"HASTUNE_CALIBRATION": str(tmp_path / "nowhere")})
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["passed"] and res["calibration"] == "h100_sxm"
    assert res["kernel_source"]["gemm_dtype"] == "fp8"
    gemm = res["kernels"]["gemm"]
    assert gemm["held_out"]["rows"] > 0 and gemm["held_out"]["median_pct"] <= 10
    total = gemm["fitted"]["rows"] + gemm["held_out"]["rows"]
    assert total == len(aic_source("fp8").table("h100_sxm", "gemm"))


def test_check_refuses_a_profile_from_another_package_version(tmp_path):
    data = build_profile(load_model(REPO / "examples/models/llama-3.1-8b"), "h100-80gb")
    data["fit"]["kernel_source"]["package"] = "0.0.1"
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    out = hastune("profile", "check", path)
    assert out.returncode == 2 and "0.0.1" in out.stderr and "Fix:" in out.stderr
    assert "Traceback" not in out.stderr

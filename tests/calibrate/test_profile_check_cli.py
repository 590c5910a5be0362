"""`hastune profile check`: the real CLI in a subprocess (main() turns InputError into exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def hastune(*args: str | Path, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hastune", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, **(env or {})})


def test_check_prints_fitted_and_held_out_errors(calibration):
    out = hastune("profile", "check", "profiles/a100-80gb/llama-30b.yaml", "--json",
                  env={"HASTUNE_CALIBRATION": str(calibration)})
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["passed"] and res["calibration"] == "a100_sxm"
    gemm = res["kernels"]["gemm"]
    assert gemm["held_out"]["rows"] > 0 and gemm["held_out"]["median_pct"] <= 10
    assert gemm["fitted"]["rows"] > 3 * gemm["held_out"]["rows"]
    assert res["kernels"]["encoder_attention"]["held_out"] is None  # no A100 table
    assert "decode" in res["linear_fit"]


def test_without_calibration_data_exit_2_with_a_fix(tmp_path):
    out = hastune("profile", "check", "profiles/h100-80gb/qwen2-72b.yaml",
                  env={"HASTUNE_CALIBRATION": str(tmp_path / "nowhere")})
    assert out.returncode == 2
    assert "calibration data" in out.stderr and "Fix:" in out.stderr
    assert "HASTUNE_CALIBRATION" in out.stderr and "Traceback" not in out.stderr


def test_profile_without_fit_record_is_refused(tmp_path):
    src = (REPO / "profiles/a100-80gb/ultravox-v0.6-27b.yaml").read_text(encoding="utf-8")
    bare = tmp_path / "bare.yaml"
    bare.write_text(src.split("\nfit:\n")[0] + "\n", encoding="utf-8")
    out = hastune("profile", "check", bare)
    assert out.returncode == 2 and "fit:" in out.stderr and "Fix:" in out.stderr

"""The reference-model example: its measured CPU profile is shipped and drives `hastune
evaluate` on the example recipe."""

from __future__ import annotations

import json

import yaml

from hastune.profile import load_profile
from tests.calibrate.test_profile_cli import REPO, hastune


def test_shipped_cpu_profile_is_measured_and_says_how_to_regenerate():
    path = REPO / "profiles" / "cpu" / "ref-small-1core.yaml"  # one worker = one core
    prof = load_profile(path)
    assert prof.source.startswith("MEASURED") and prof.fit.measured is not None
    assert "1 thread" in prof.fit.measured.device
    assert "hastune profile --model ref-small --device cpu --threads 1" in \
        prof.fit.measured.command
    assert set(prof.fit.error) == {"encode", "prefill", "decode"}
    assert (REPO / "profiles" / "cpu" / "ref-small-1core.rows.json").exists()
    rec = yaml.safe_load((REPO / "examples" / "reference-cpu.yaml").read_text())
    assert (REPO / "examples" / rec["profile"]).resolve() == path.resolve()


def test_the_example_evaluates_with_the_shipped_profile():
    res = hastune("evaluate", "examples/reference-cpu.yaml", "--config",
                  "examples/configs/reference-cpu-epd.yaml", "--requests", "300", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["goodput_rps"] > 1.0

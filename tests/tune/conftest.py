from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_recipe(tmp_path) -> Path:
    """The audio example on 5 GPUs with short probes: 200 configurations, 28 survive pruning."""
    data = yaml.safe_load((ROOT / "examples" / "audio-ultravox-8xa100.yaml").read_text())
    data["cluster"]["gpus"] = 5
    data["workload"]["requests"] = 300
    data["evaluator"] = {"min_span": 2.0}
    p = tmp_path / "small.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def hastune(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hastune", *args], capture_output=True,
                          text=True, timeout=timeout, env={**__import__("os").environ,
                                                           "OMP_NUM_THREADS": "1"})

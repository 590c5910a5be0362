from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ("audio-ultravox-8xa100", "image-llava-8xa100", "video-qwen-8xa100")
# how each program's command starts in a script, and the flag set it is checked against
STARTS = {("vllm", "serve"): "vllm", ("python3", "-m", "sglang.launch_server"): "sglang",
          ("python3", "-m", "sglang_router.launch_router"): "sglang-router",
          ("vllm-router",): "vllm-router"}


def hastune(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hastune", *args], capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def small(example: str, tmp: Path, **cluster) -> Path:
    """An example on 5 GPUs with short probes (tunes in seconds)."""
    data = yaml.safe_load((ROOT / "examples" / f"{example}.yaml").read_text())
    data["cluster"].update({"gpus": 5, **cluster})
    data["workload"]["requests"] = 300
    data["evaluator"] = {"min_span": 2.0}
    p = tmp / f"{example}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.fixture(scope="session")
def tuned(tmp_path_factory) -> dict[str, Path]:
    """The audio, image and video examples tuned (3 trials each): their output dirs."""
    base = tmp_path_factory.mktemp("tuned")
    out = {}
    for ex in EXAMPLES:
        r = hastune("tune", str(small(ex, base)), "--trials", "3", "--out", str(base / ex),
                    "--no-plots", "--json")
        assert r.returncode == 0, r.stderr
        out[ex] = base / ex
    return out


def script_commands(text: str) -> list[tuple[str, list[str]]]:
    """(program, words after its start) of every engine command in a script's text."""
    joined = text.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True) if line.strip() else []
        while words and "=" in words[0] and not words[0].startswith("-"):
            words = words[1:]  # VAR=value prefixes
        for start, prog in STARTS.items():
            if tuple(words[:len(start)]) == start:
                out.append((prog, words[len(start):]))
        if words[:2] == ["hastune", "gateway"]:
            out.append(("hastune-gateway", words[3:]))
    return out

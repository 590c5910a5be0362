"""NVFP4 weights (issue 36: the fp4 rows of the measured runs): profiles on Blackwell read the
kernel tables' nvfp4 GEMM and MoE rows and count 4.5 bits a weight (one fp8 scale per block
of 16); Hopper, which has no FP4 tensor cores and no such rows, is refused with the reason;
an export of NVFP4 weights from a checkpoint that is not NVFP4 is refused (the engines load
NVFP4 from a ModelOpt checkpoint, they do not quantize to it)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from hastune.calibrate.aic_profiles import build_profile
from hastune.errors import InputError
from hastune.export import check_model
from hastune.models.hf import load_model
from hastune.models.spec import BYTES_PER

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"


@pytest.mark.parametrize("model", ["llama-3.1-70b", "mixtral-8x7b"])
def test_nvfp4_weights_on_b200(model):
    arch = load_model(EXAMPLES / model)
    kv = "fp8"
    nv = build_profile(arch, "b200_sxm", {"weights": "nvfp4", "kv_cache": kv}, "vllm")
    f8 = build_profile(arch, "b200_sxm", {"weights": "fp8", "kv_cache": kv}, "vllm")
    lin = arch.llm.linear_params()
    # the linear projections at 4.5 bits, the rest (embeddings, norms) at bf16
    assert nv["memory"]["weight_bytes"] == pytest.approx(
        lin * BYTES_PER["nvfp4"] + (arch.llm.params - lin) * 2.0, rel=1e-9)
    assert nv["memory"]["weight_bytes"] < 0.6 * f8["memory"]["weight_bytes"]
    # the same KV cache, other GEMM rows: B200's measured NVFP4 GEMMs are the faster ones
    assert nv["memory"]["kv_bytes_per_token"] == f8["memory"]["kv_bytes_per_token"]
    assert nv["prefill"]["per_token_s"] < f8["prefill"]["per_token_s"]


@pytest.mark.parametrize("system", ["h100_sxm", "h200_sxm"])
def test_nvfp4_on_hopper_is_refused_with_the_reason(system):
    arch = load_model(EXAMPLES / "llama-3.1-8b")
    with pytest.raises(InputError) as info:
        build_profile(arch, system, "nvfp4", "vllm")
    assert "no nvfp4 rows" in info.value.problem
    assert "FP4 tensor cores (Blackwell" in info.value.problem


@pytest.mark.parametrize("ckpt, refused", [("bf16", True), ("fp8", True), ("nvfp4", False)])
@pytest.mark.parametrize("engine", ["vllm", "sglang", "dynamo"])
def test_nvfp4_export_needs_an_nvfp4_checkpoint(engine, ckpt, refused):
    t = SimpleNamespace(engine_model="org/Model", checkpoint_precision=ckpt,
                        precision=SimpleNamespace(weights="nvfp4"))
    if not refused:
        check_model(t, engine)  # type: ignore[arg-type]
        return
    with pytest.raises(InputError) as info:
        check_model(t, engine)  # type: ignore[arg-type]
    assert info.value.field == "precision.weights" and "NVFP4 checkpoint" in info.value.fix
    check_model(t, "runners")  # type: ignore[arg-type]  # the CPU engine: no such weights


def test_profile_build_cli(tmp_path):
    import json
    import subprocess
    import sys

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "hastune", "profile", "build", *args],
                              capture_output=True, text=True, timeout=300)

    model = str(EXAMPLES / "llama-3.1-8b")
    ok = cli("--model", model, "--gpu", "b200-180gb", "--precision", "nvfp4", "--out",
             str(tmp_path / "p.yaml"), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["name"] == "llama-3.1-8b@b200-180gb+nvfp4"
    bad = cli("--model", model, "--gpu", "h100-80gb", "--precision", "nvfp4", "--out",
              str(tmp_path / "h.yaml"))
    assert bad.returncode == 2 and "FP4 tensor cores" in " ".join(bad.stderr.split())
    assert not (tmp_path / "h.yaml").exists()


def test_tune_writes_its_outputs_and_says_why_no_launch_files(tmp_path):
    """A tune whose target the engine refuses (NVFP4 weights, a bf16 checkpoint) records why
    in the summary, writes no deploy folder and goes on to its other outputs."""
    from hastune.cli.tune_view import deploy_line
    from hastune.tune.outputs import write_deploy

    t = SimpleNamespace(engine=SimpleNamespace(name="vllm"), engine_model="org/Model",
                        checkpoint_precision="bf16", precision=SimpleNamespace(weights="nvfp4"))
    summary: dict = {"goodput_rps": 1.0}
    assert write_deploy(tmp_path, tmp_path / "best_config.yaml", None, t, summary) == []
    d = summary["deploy"]
    assert d["written"] is False and d["refused"] and "NVFP4 checkpoint" in d["why"]
    assert not (tmp_path / "deploy").exists()
    line = deploy_line(summary)
    assert line is not None and "precision.weights" in line and "--target" not in line

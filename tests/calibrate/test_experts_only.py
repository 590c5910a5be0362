"""Weights that quantize the routed experts alone (issue 36), every other weight bf16: MXFP4
(gpt-oss's own format, the measured runs' fp4 on Hopper: 4.25 bits, 4-bit values with one
8-bit scale per 32; the tables' w4a16_mxfp4 MoE rows) and int4 (compressed-tensors'
weight-only int4 groups of 32, Kimi K2.5's: 4.5 bits; the tables' int4_wo MoE rows). A
measured run labelled fp4 of an MXFP4 checkpoint on Hopper (no FP4 tensor cores) runs as that
checkpoint, the same label on Blackwell or for another checkpoint stands; a row's int4_wo is
int4; an export needs the matching checkpoint."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.calibrate.aic_profiles import build_profile
from hastune.errors import InputError
from hastune.export import check_model
from hastune.fidelity.rows import aic_model_config
from hastune.fidelity.run import weights_run
from hastune.model_ref import Precision
from hastune.models.hf import load_model
from hastune.models.spec import BYTES_PER

GPT_OSS = aic_model_config("openai/gpt-oss-120b")
DEEPSEEK = aic_model_config("deepseek-ai/DeepSeek-V3")
KIMI = aic_model_config("moonshotai/Kimi-K2.5")


def test_the_packaged_configs_are_there():
    """aiconfigurator-core (the `kernels` extra) packages the configs."""
    assert GPT_OSS is not None and DEEPSEEK is not None and KIMI is not None


@settings(max_examples=60, deadline=None)
@given(experts=st.sampled_from([8, 16, 32, 64, 128]), moe_ffn=st.sampled_from([512, 1024, 2880]),
       layers=st.integers(2, 40), tp=st.sampled_from([1, 2, 4, 8]), whole=st.booleans(),
       precision=st.sampled_from(["mxfp4", "int4"]))
def test_experts_only_weights_are_the_experts_at_4_bits_and_the_rest_bf16(experts, moe_ffn,
                                                                          layers, tp, whole,
                                                                          precision):
    """On generated MoE shapes (gpt-oss's, other expert counts, widths and depths), TP-split
    or whole experts over EP = TP: what each GPU holds is the experts' share at 0.53125
    (MXFP4) or 0.5625 (int4) bytes and the rest's at 2."""
    llm = load_model(GPT_OSS).llm
    spec = dataclasses.replace(llm, experts=experts, moe_ffn=moe_ffn, layers=layers,
                               experts_per_token=min(4, experts), sliding_layers=0,
                               sliding_layer_ids=())
    ex = spec.moe_layers * spec.expert_params()
    rest = spec.params - ex
    ep = tp if whole else 0
    got = spec.weight_bytes(tp, precision, ep)
    want = rest * 2.0 / tp + ex * {"mxfp4": 0.53125, "int4": 0.5625}[precision] / (ep or tp)
    assert BYTES_PER[precision] == {"mxfp4": 0.53125, "int4": 0.5625}[precision]
    assert got == pytest.approx(want, rel=1e-12)
    assert got < spec.weight_bytes(tp, "bf16", ep)
    # a dense model has no experts to quantize: all of it bf16
    dense = dataclasses.replace(spec, experts=0, experts_per_token=0, moe_ffn=0)
    assert dense.weight_bytes(tp, precision) == dense.weight_bytes(tp, "bf16")


@pytest.mark.parametrize("system", ["h100_sxm", "h200_sxm"])
@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_gpt_oss_profiles_on_hopper(system, engine):
    """The checkpoint's precision on Hopper: the experts' kernels are the w4a16_mxfp4 rows
    (slower than bf16 ones where compute-bound: the tables say so), 65 GB of weights."""
    arch = load_model(GPT_OSS)
    assert arch.llm.checkpoint_precision == "mxfp4"
    mx = build_profile(arch, system, {"weights": "mxfp4", "kv_cache": "bf16"}, engine)
    ex = arch.llm.moe_layers * arch.llm.expert_params()
    assert mx["memory"]["weight_bytes"] == pytest.approx(
        ex * 0.53125 + (arch.llm.params - ex) * 2.0, rel=1e-9)
    with pytest.raises(InputError, match="FP4 tensor cores"):  # NVFP4 stays refused there
        build_profile(arch, system, {"weights": "nvfp4", "kv_cache": "bf16"}, engine)


@pytest.mark.parametrize("system", ["h200_sxm", "b200_sxm"])
def test_kimi_int4_profiles(system):
    """Kimi K2.5's int4 experts on the vLLM tables' int4_wo MoE rows, MLA bf16."""
    arch = load_model(KIMI)
    assert arch.llm.checkpoint_precision == "int4"
    p4 = build_profile(arch, system, {"weights": "int4", "kv_cache": "bf16"}, "vllm")
    ex = arch.llm.moe_layers * arch.llm.expert_params()
    tp = p4["tp"] if "tp" in p4 else 1
    assert p4["memory"]["weight_bytes"] == pytest.approx(
        (ex * 0.5625 + (arch.llm.params - ex) * 2.0) / tp, rel=1e-9)


@pytest.mark.parametrize("model, want", [("gpt", "mxfp4"), ("kimi", "int4")])
def test_a_recipe_of_such_a_checkpoint_defaults_to_it(model, want):
    from hastune.model_ref import precision_of

    rec = SimpleNamespace(precision=None)
    arch = load_model(GPT_OSS if model == "gpt" else KIMI)
    assert precision_of(rec, arch).weights == want  # type: ignore[arg-type]
    assert Precision(weights=want).weights == want


@pytest.mark.parametrize("weights, model, gpu, want", [
    ("nvfp4", "gpt", "h100-80gb", "mxfp4"),      # Hopper: the checkpoint as it runs there
    ("nvfp4", "gpt", "h200-141gb", "mxfp4"),
    ("nvfp4", "gpt", "b200-180gb", "nvfp4"),     # Blackwell: FP4 tensor cores, label stands
    ("nvfp4", "gpt", "gb200-186gb", "nvfp4"),
    ("nvfp4", "deepseek", "h200-141gb", "nvfp4"),  # an NVFP4 label of another checkpoint
    ("fp8", "gpt", "h100-80gb", "fp8"),
    ("bf16", "gpt", "h200-141gb", "bf16"),
])
def test_a_measured_runs_fp4_of_an_mxfp4_checkpoint(weights, model, gpu, want):
    path = str(GPT_OSS if model == "gpt" else DEEPSEEK)
    assert weights_run(weights, path, gpu) == want


def test_a_rows_int4_wo_is_int4():
    from hastune.fidelity.rows import QUANT

    assert QUANT["int4_wo"] == "int4"


@pytest.mark.parametrize("weights", ["mxfp4", "int4"])
@pytest.mark.parametrize("ckpt", ["bf16", "nvfp4", "mxfp4", "int4"])
@pytest.mark.parametrize("engine", ["vllm", "sglang", "dynamo"])
def test_experts_only_export_needs_that_checkpoint(engine, ckpt, weights):
    refused = ckpt != weights
    t = SimpleNamespace(engine_model="org/Model", checkpoint_precision=ckpt,
                        precision=SimpleNamespace(weights=weights))
    if not refused:
        check_model(t, engine)  # type: ignore[arg-type]
        return
    with pytest.raises(InputError) as info:
        check_model(t, engine)  # type: ignore[arg-type]
    name = {"mxfp4": "MXFP4", "int4": "int4"}[weights]
    assert info.value.field == "precision.weights" and f"{name} checkpoint" in info.value.fix


@pytest.mark.parametrize("weights", ["mxfp4", "int4"])
def test_a_dense_model_is_refused_with_the_reason(weights, tmp_path):
    """mxfp4 and int4 quantize routed experts: a dense model has none, so a recipe naming
    either for one is refused (before any cached profile is read), as is a profile build."""
    from pathlib import Path

    from hastune.evaluators.profile import resolve_profile
    from hastune.recipe import Recipe

    llama = Path(__file__).resolve().parents[2] / "examples" / "models" / "llama-3.1-8b"
    with pytest.raises(InputError, match="routed experts"):
        build_profile(load_model(llama), "h200_sxm", {"weights": weights}, "vllm")
    rec = Recipe.model_validate({
        "name": "dense", "model": str(llama), "precision": {"weights": weights},
        "cluster": {"gpu": "h200-141gb", "gpus": 1},
        "workload": {"requests": 10, "prompt_tokens": {"dist": "fixed", "mean": 100},
                     "output_tokens": {"dist": "fixed", "mean": 10}},
        "slo": {"ttft_s": 1.0, "tpot_s": 0.1}, "architecture": "nodg"})
    with pytest.raises(InputError) as info:
        resolve_profile(rec, quiet=True)
    assert info.value.field == "precision.weights" and "routed experts" in info.value.problem

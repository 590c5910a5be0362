"""The shipped profiles: complete, loadable, provenance recorded, physically sane.

Roofline bounds use nominal specs, independent of the calibration code: a decode step cannot
beat reading the weights once (weights / bandwidth) and a prefill cannot beat the peak
(2 · params · tokens / peak FLOP/s); a kernel-table model should be within a few times either.
"""

from __future__ import annotations

import pytest

from hastune.profile import load_profile

GPUS = ("a100-80gb", "a800-80gb", "h100-80gb", "h200-141gb", "l40s-48gb", "l20-48gb",
        "rtx6000ada-48gb")
MODELS = ("llava-v1.6-34b", "qwen2.5-vl-32b", "ultravox-v0.6-27b", "llama-30b",
          "codellama2-34b", "qwen2-72b")
DERIVED = {"a800-80gb": "a100_sxm", "l20-48gb": "l40s", "rtx6000ada-48gb": "l40s"}
# nominal (bf16 dense FLOP/s, HBM bytes/s); parameters (billions)
SPECS = {"a100-80gb": (312e12, 2.039e12), "h100-80gb": (989e12, 3.35e12)}
PARAMS = {"llama-30b": 32.5e9, "qwen2-72b": 72.7e9}


@pytest.fixture(scope="module")
def shipped(root):
    return {(g, m): load_profile(root / "profiles" / g / f"{m}.yaml") for g in GPUS for m in MODELS}


def test_every_gpu_and_model_has_a_calibrated_profile(shipped):
    for (gpu, model), prof in shipped.items():
        assert prof.gpu == gpu and prof.model == model and prof.name == f"{model}@{gpu}"
        assert prof.fit is not None and {"prefill", "decode"} <= set(prof.fit.error)
        if gpu in DERIVED:
            assert prof.source.startswith("DERIVED") and prof.fit.calibration == DERIVED[gpu]
            assert prof.fit.scale and "Derived GPU" in prof.method
        else:
            assert prof.source.startswith("CALIBRATED") and prof.fit.scale is None
        for tp in prof.tp_degrees:  # every variant is a valid profile of its own
            at = prof.for_tp(tp)
            assert at.tp == tp and at.memory.kv_capacity_tokens() > 0


def test_models_that_need_several_gpus_have_a_tp_base(shipped):
    assert shipped["a100-80gb", "qwen2-72b"].tp == 2
    assert shipped["h200-141gb", "qwen2-72b"].tp == 2
    assert shipped["l40s-48gb", "qwen2-72b"].tp == 4
    assert shipped["l40s-48gb", "llava-v1.6-34b"].tp == 2
    assert shipped["a100-80gb", "ultravox-v0.6-27b"].tp == 1  # the examples' profiles stay tp 1
    with pytest.raises(ValueError, match="tp=1"):
        shipped["a100-80gb", "qwen2-72b"].for_tp(1)


@pytest.mark.parametrize("gpu", sorted(SPECS))
@pytest.mark.parametrize("model", sorted(PARAMS))
def test_decode_and_prefill_within_roofline_bounds(shipped, gpu, model):
    prof = shipped[gpu, model]
    peak, bw = SPECS[gpu]
    for tp in prof.tp_degrees:
        p = prof.for_tp(tp)
        floor = p.memory.weight_bytes / bw
        step = p.decode.step(1, 512)
        assert floor <= step <= 3 * floor, (tp, floor, step)
        tokens = 2048
        flops = 2 * PARAMS[model] / tp * tokens
        pre = p.prefill.latency(tokens, tokens * tokens)
        assert flops / peak <= pre <= 3 * flops / peak, (tp, flops / peak, pre)


def test_derived_gpus_follow_their_specs(shipped):
    # A800 = A100 silicon: single-GPU sections identical, TP all-reduce slower (NVLink 400)
    a100, a800 = shipped["a100-80gb", "llama-30b"], shipped["a800-80gb", "llama-30b"]
    assert a800.prefill == a100.prefill and a800.decode == a100.decode
    assert a800.for_tp(2).prefill.per_token_s > a100.for_tp(2).prefill.per_token_s
    # L20 has a third of the L40S's compute and the same bandwidth: prefill slower, decode not
    l40s, l20 = shipped["l40s-48gb", "codellama2-34b"], shipped["l20-48gb", "codellama2-34b"]
    assert 2.0 < l20.prefill.latency(4096, 4096**2) / l40s.prefill.latency(4096, 4096**2) < 3.5
    assert l20.decode.step(1, 512) == pytest.approx(l40s.decode.step(1, 512), rel=0.1)


def test_example_profiles_keep_the_seed_sm_shape(shipped):
    for model in ("llava-v1.6-34b", "qwen2.5-vl-32b", "ultravox-v0.6-27b"):
        curve = shipped["a100-80gb", model].encode.curve_for(1)
        assert curve is not None and dict(curve)[0.1] > 1.5 and dict(curve)[0.5] == 1.0


def test_shipped_files_match_the_generator(root, calibration):
    """The committed YAML is what scripts/make_profiles.py writes from the tables today."""
    from hastune.calibrate.build import profile_dict, render

    path = root / "profiles/a100-80gb/llama-30b.yaml"
    assert render(profile_dict("llama-30b", "a100-80gb", calibration)) == \
        path.read_text(encoding="utf-8"), "regenerate: python scripts/make_profiles.py"

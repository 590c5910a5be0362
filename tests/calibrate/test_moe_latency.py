"""MoE, MLA and fp8 in the per-layer latency model (hastune.calibrate.latency): bounds from the
roofline, what expert parallelism moves, DeepSeek-V3's MLA step, fp8 against bf16, and
generated properties. aiconfigurator-core (the `kernels` extra) is installed in CI, so the
tests that read it do not skip; the calibration-folder ones use the `calibration` fixture."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.calibrate.aic_profiles import aic_source, build_profile
from hastune.calibrate.device import build_device
from hastune.calibrate.latency import LatencyModel
from hastune.errors import InputError
from hastune.models import load_model
from hastune.profile import Profile

REPO = Path(__file__).resolve().parents[2]
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def model(name: str):
    return load_model(REPO / "examples" / "models" / name)


@cache
def aic_device(gpu: str, precision: str = "bf16"):
    return build_device(aic_source(precision), gpu)


def read_bound(lm: LatencyModel, batch: int, context: int) -> float:
    """Seconds to read, once, the weights a decode step touches and the batch's KV: every
    weight but the input embedding table (64 tokens × top-2 of 8 experts touch all experts
    but with probability 8·(6/8)^64 ≈ 1e-7), at the GPU's nominal bandwidth."""
    a = lm.arch.llm
    embed = a.vocab * a.hidden * 2.0 / lm.tp
    return (lm.weight_bytes - embed + batch * context * lm.kv_bytes_per_token) / lm.dev.mem_bw


# --- Mixtral-8x7B: the roofline and expert parallelism --------------------------------------
@pytest.mark.parametrize("source", ["aic", "csv"])
def test_mixtral_decode_sits_between_one_and_three_rooflines(source, calibration):
    dev = aic_device("h100-80gb") if source == "aic" else build_device(calibration, "h100-80gb")
    lm = LatencyModel(model("mixtral-8x7b"), dev, tp=2)
    t, bound = float(lm.decode_step(64, 2048)), read_bound(lm, 64, 2048)
    assert bound <= t <= 3.0 * bound, (t, bound)
    # the MoE table times the experts where it has the shape; the CSV tables have none
    expect = "fused-MoE table" if source == "aic" else "grouped GEMMs"
    assert lm.composition()["moe"].startswith(expect)


def test_expert_parallelism_moves_the_experts_without_an_all_to_all():
    """At ep = tp each GPU holds tp-th of the expert weights either way (weight bytes equal),
    but whole experts: the MoE call changes from (moe_tp tp, moe_ep 1) to (1, tp) over the
    tokens the GPU holds — every GPU of the group holds every token — and the layer's TP
    all-reduce, there either way, sums the experts' outputs: no all-to-all (the engines
    dispatch by all-to-all only between attention-DP ranks). Attention and its all-reduce do
    not change. So the step and the prefill differ by exactly the MoE layers' kernel
    difference at the tokens the GPU holds (the table's num_tokens, as aiconfigurator-core's
    estimator reads it)."""
    arch, dev = model("mixtral-8x7b"), aic_device("h100-80gb")
    a = arch.llm
    for tp in (2, 4, 8):
        tpm, epm = LatencyModel(arch, dev, tp), LatencyModel(arch, dev, tp, ep=tp)
        assert epm.weight_bytes == pytest.approx(tpm.weight_bytes)
        key_tp = (a.hidden, a.moe_ffn, a.experts_per_token, a.experts, tp, 1)
        key_ep = (a.hidden, a.moe_ffn, a.experts_per_token, a.experts, 1, tp)
        for tokens in (1.0, 64.0, 512.0):
            moved = a.moe_layers * (dev.moe(key_ep, tokens) - dev.moe(key_tp, tokens))
            got = float(epm.decode_step(tokens, 2048) - tpm.decode_step(tokens, 2048))
            assert got == pytest.approx(float(moved), rel=1e-9, abs=1e-9)
        assert "all_to_all" not in epm.composition()
        assert not any(c.kind == "all_to_all" for c in epm._plans["decode"].collectives)
        moved = a.moe_layers * (dev.moe(key_ep, 8192.0) - dev.moe(key_tp, 8192.0))
        got = float(epm.prefill(1, 8192) - tpm.prefill(1, 8192))
        assert got == pytest.approx(float(moved), rel=1e-9, abs=1e-9)
    with pytest.raises(ValueError, match="ep"):
        LatencyModel(arch, dev, 2, ep=3)        # not a multiple of tp
    with pytest.raises(ValueError, match="ep"):
        LatencyModel(arch, dev, 1, ep=3)        # does not divide the 8 experts
    with pytest.raises(ValueError, match="no experts"):
        LatencyModel(model("llama-3.1-8b"), dev, 2, ep=2)


def test_attention_dp_times_one_rank_with_the_experts_over_the_group():
    """ep = n at tp 1: n attention-DP ranks, one timed. Its attention and dense layers are a
    TP-1 instance's; each GPU holds 1/n of the experts whole and runs them on every rank's
    share of its tokens — n ranks × b tokens × k / E per expert, i.e. the MoE table at
    (moe_tp 1, moe_ep n) for the n × b tokens its experts serve — plus the dispatch and
    combine all-to-all of b tokens. So against TP 1 (experts all local) the step moves by
    exactly that, the weight bytes drop by the (n − 1)/n of the experts left on other GPUs,
    the KV bytes stay."""
    arch, dev = model("mixtral-8x7b"), aic_device("h100-80gb")
    a = arch.llm
    one = LatencyModel(arch, dev, 1)
    experts = a.moe_layers * a.expert_params() * 2.0
    for n in (2, 4, 8):
        dp = LatencyModel(arch, dev, 1, ep=n)
        assert dp.dp == n and dp.kv_bytes_per_token == one.kv_bytes_per_token
        assert dp.weight_bytes == pytest.approx(one.weight_bytes - experts * (n - 1) / n)
        for b in (1.0, 16.0, 256.0):
            key_dp = (a.hidden, a.moe_ffn, a.experts_per_token, a.experts, 1, n)
            key_1 = (a.hidden, a.moe_ffn, a.experts_per_token, a.experts, 1, 1)
            a2a = 2 * dev.alltoall(n, b * a.hidden * a.experts_per_token)
            moved = a.moe_layers * (dev.moe(key_dp, n * b) - dev.moe(key_1, b) + a2a)
            got = float(dp.decode_step(b, 2048) - one.decode_step(b, 2048))
            assert got == pytest.approx(float(moved), rel=1e-9, abs=1e-9), (n, b)


def test_mixtral_profile_has_expert_parallel_variants():
    data = build_profile(model("mixtral-8x7b"), "h100-80gb")
    prof = Profile.model_validate(data)
    assert prof.tp_degrees == [2, 4, 8]
    assert all(prof.ep_degrees(tp) == [1, tp] for tp in prof.tp_degrees)
    for tp in prof.tp_degrees:
        ep = prof.for_parallel(tp, tp)
        assert ep.decode != prof.for_tp(tp).decode and ep.tp == tp
        assert ep.memory.weight_bytes == pytest.approx(prof.for_tp(tp).memory.weight_bytes)
    assert "grouped" not in data["fit"]["composition"]["moe"]
    with pytest.raises(ValueError, match="no expert-parallel variant"):
        prof.for_parallel(2, 4)
    assert sorted(prof.dp_variants) == [2, 4, 8]  # attention-DP ranks at TP 1, experts over n
    for n in (2, 4, 8):
        rank = prof.for_dp(n)
        assert rank.tp == 1 and rank.tp_degrees == [1] and rank.ep_variants == {}
        assert rank.memory.weight_bytes < prof.memory.weight_bytes * prof.tp  # 1/n of experts
    assert prof.for_dp(8).memory.weight_bytes < prof.for_dp(2).memory.weight_bytes
    with pytest.raises(ValueError, match="no attention-DP variant of 16 ranks"):
        prof.for_dp(16)


# --- DeepSeek-V3: MLA and fp8 ---------------------------------------------------------------
def test_deepseek_v3_decode_on_h200_tp8_fp8_is_plausible():
    arch = model("deepseek-v3")
    dev = aic_device("h200-141gb", "fp8")
    a = arch.llm
    for ep in (1, 8):
        lm = LatencyModel(arch, dev, 8, ep)
        assert lm.fits()
        assert lm.kv_bytes_per_token == a.layers * (a.kv_lora_rank + a.qk_rope_head_dim) * 1.0
        t = float(lm.decode_step(64, 2048))
        kv_read = 64 * 2048 * lm.kv_bytes_per_token / dev.mem_bw
        # at least the attention, shared and dense weights and the KV once; under 0.2 s
        fixed = (lm.weight_bytes - a.moe_layers * a.expert_params() / 8) / dev.mem_bw
        assert np.isfinite(t) and kv_read + fixed < t < 0.2, (t, kv_read, fixed)
        assert lm.composition()["mla"].startswith("MLA-block tables")
    bf16 = LatencyModel(arch, aic_device("h200-141gb"), 8)
    assert bf16.kv_bytes_per_token == 2 * LatencyModel(arch, dev, 8).kv_bytes_per_token
    assert not bf16.fits()           # 671B in bf16 does not fit on 8 H200s


# --- fp8 ----------------------------------------------------------------------------------
def test_fp8_prefill_is_faster_than_bf16_for_llama_70b_on_h100():
    arch = model("llama-3.1-70b")
    bf16 = LatencyModel(arch, aic_device("h100-80gb"), 4)
    fp8 = LatencyModel(arch, aic_device("h100-80gb", "fp8"), 4)
    assert float(fp8.prefill(1, 8192)) < 0.85 * float(bf16.prefill(1, 8192))
    assert float(fp8.decode_step(64, 2048)) < float(bf16.decode_step(64, 2048))
    assert fp8.weight_bytes < 0.55 * bf16.weight_bytes
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token / 2


def test_fp8_on_a_gpu_without_fp8_rows_is_one_input_error():
    with pytest.raises(InputError, match="no fp8 rows") as err:
        build_profile(model("llama-3.1-8b"), "a100-80gb", "fp8")
    assert "bf16" in err.value.fix


# --- generated properties -------------------------------------------------------------------
MODELS = ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "llama-3.1-8b", "gemma-2-9b")


@cache
def lm_at(name: str, tp: int, ep: int, precision: str) -> LatencyModel:
    gpu = "h200-141gb" if name == "deepseek-v3" else "h100-80gb"
    return LatencyModel(model(name), aic_device(gpu, precision), tp, ep)


def parallel_degrees(name: str) -> list[tuple[int, int]]:
    a = model(name).llm
    tps = [8] if name == "deepseek-v3" else [t for t in (1, 2, 4, 8) if a.supports_tp(t)]
    dp = [(1, n) for n in (2, 4, 8) if a.moe and a.supports_ep(n) and name != "deepseek-v3"]
    return [(t, e) for t in tps for e in sorted({1, t}) if e == 1 or a.supports_ep(e)] + dp


NOISE = 0.05   # measured neighbours scatter up to ~5% (DeepSeek's MLA-block rows, launch-bound)


@SLOW
@given(name=st.sampled_from(MODELS), precision=st.sampled_from(("bf16", "fp8")),
       batch=st.integers(1, 128), context=st.integers(16, 8192), pick=st.integers(0, 100))
def test_steps_grow_with_batch_and_context_at_every_tp_and_ep(name, precision, batch, context,
                                                              pick):
    """Doubling the batch or the context never makes a step faster beyond the tables' noise;
    adding sequences or context whose KV alone takes a fifth of the step to read always
    makes it slower. At every (tp, ep) the model has."""
    degrees = parallel_degrees(name)
    tp, ep = degrees[pick % len(degrees)]
    lm = lm_at(name, tp, ep, precision)
    t = float(lm.decode_step(batch, context))
    assert np.isfinite(t) and t > 0
    assert float(lm.decode_step(2 * batch, context)) >= t * (1 - NOISE)
    assert float(lm.decode_step(batch, 2 * context)) >= t * (1 - NOISE)
    kv_tokens = 0.2 * t * lm.dev.mem_bw / lm.kv_bytes_per_token
    assert float(lm.decode_step(batch, context + np.ceil(kv_tokens / batch))) > t
    assert float(lm.decode_step(batch + np.ceil(kv_tokens / context), context)) > t
    p = float(lm.prefill(1, context))
    assert np.isfinite(p) and p > 0
    assert float(lm.prefill(1, 2 * context)) >= p * (1 - NOISE)
    assert float(lm.prefill(1, 16 * context)) > p and float(lm.prefill(8, context)) > p
    assert lm.kv_bytes_per_token > 0 and lm.weight_bytes > 0


@SLOW
@given(name=st.sampled_from(MODELS), pick=st.integers(0, 100))
def test_fp8_kv_bytes_are_half_of_bf16(name, pick):
    degrees = parallel_degrees(name)
    tp, ep = degrees[pick % len(degrees)]
    bf, f8 = lm_at(name, tp, ep, "bf16"), lm_at(name, tp, ep, "fp8")
    assert f8.kv_bytes_per_token == bf.kv_bytes_per_token / 2
    assert bf.weight_bytes / 2 < f8.weight_bytes < bf.weight_bytes


def test_attention_dp_variants_take_the_engine_terms_and_are_validated():
    """The engine terms reach an attention-DP rank as every other variant (engine_terms.apply);
    a dp_variants entry whose `ep` is not its group size, or without memory, is refused."""
    from hastune import engine_terms as et

    data = build_profile(model("mixtral-8x7b"), "h100-80gb")
    prof = Profile.model_validate(data)
    t = et.terms_for("sglang", "h200-141gb", 80.0)
    on = et.apply(prof, t)
    for n in prof.dp_variants:
        base, got = prof.for_dp(n).decode, on.for_dp(n).decode
        assert got.fixed_s == pytest.approx(base.fixed_s * t.kernel_scale + t.iteration_s)
        assert got.max_batch == t.scheduler.max_seqs
    bad = {**data, "dp_variants": {2: {**data["dp_variants"][2], "ep": 4}}}
    with pytest.raises(ValueError, match="dp_variants"):
        Profile.model_validate(bad)
    bad = {**data, "dp_variants": {2: {k: v for k, v in data["dp_variants"][2].items()
                                       if k != "memory"}}}
    with pytest.raises(ValueError, match="dp_variants"):
        Profile.model_validate(bad)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b"]),
       ep=st.sampled_from([1, 8]), n=st.floats(1, 512), context=st.floats(16, 16384))
def test_a_decode_step_overlaps_the_shared_experts_with_the_routed_path(name, ep, n, context):
    """In a decode step an MoE layer's shared experts run beside its routed path (router,
    experts, all-to-all): the step is the one-after-the-other composition (the prefill's)
    less, per MoE layer, the shorter of the two; a model without shared experts is unchanged."""
    from dataclasses import replace

    arch = model(name)
    lm = LatencyModel(arch, aic_device("h200-141gb", "fp8" if name == "deepseek-v3"
                                       else "bf16"), 8, ep)
    plan, t = lm._plans["decode"], np.array([n])
    shared = sum((lm._gemm(g, t, t) for g in plan.gemms if g.name.startswith("shared_")),
                 np.zeros(1))
    routed = sum((lm._gemm(g, t, t) for g in plan.gemms if g.kind == "expert"
                  and not lm._moe_key or g.name == "router"), np.zeros(1))
    if lm._moe_key:
        routed = routed + lm.dev.moe(lm._moe_key, t)
    assert not any(c.kind == "all_to_all" for c in plan.collectives)  # ep ≤ tp here

    def total(p) -> float:
        return sum(float(g[0][0]) * k for k, g in lm._groups(p, t, t).items())

    overlapped, serial = total(plan), total(replace(plan, phase="prefill"))
    saved = plan.moe.layers * float(np.minimum(shared, routed)[0])
    assert overlapped == pytest.approx(serial - saved, rel=1e-9, abs=1e-12)
    if not arch.llm.shared_ffn:
        assert saved == 0.0
    else:
        assert saved > 0.0


def test_an_mla_block_table_holds_its_norms_rope_and_kv_write():
    """Where the MLA block is timed whole (mla_*_module tables), its q/kv norms, RoPE and KV
    write are in the table: outside it each layer adds its two fused add+norms only; timed from
    GEMMs, the block's own element-wise kernels are added too."""
    arch = model("deepseek-v3")
    a = arch.llm
    for precision, module in (("fp8", True), ("bf16", None)):
        lm = LatencyModel(arch, aic_device("h200-141gb", precision), 8, 8)
        if module is not None:
            assert lm._module is module
        t = np.array([4.0])
        _, ew, kernels = lm._groups(lm._plans["decode"], t, t)[a.layers]
        assert (ew == 8 * a.hidden and kernels == 2) == lm._module, (ew, kernels)

"""KV and weight bytes on generated architectures: KV per GPU scales 1/tp until the KV heads
replicate (then stays at one head per GPU), fp8 halves bf16, MLA's latent does not shrink with
tp; the GEMM plan holds exactly the model's weights."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.models.shapes import gemm_shapes, layer_plan, weight_params_of_plan
from hastune.models.spec import LLMArch

POW2 = st.sampled_from([1, 2, 4, 8, 16, 32])


@st.composite
def dense(draw) -> LLMArch:
    kv = draw(st.sampled_from([1, 2, 4, 8, 16]))
    heads = kv * draw(st.sampled_from([1, 2, 4, 8]))
    hd = draw(st.sampled_from([64, 80, 128, 256]))
    return LLMArch(layers=draw(st.integers(1, 96)), hidden=heads * hd, heads=heads,
                   kv_heads=kv, head_dim=hd, ffn=128 * draw(st.integers(1, 256)),
                   vocab=128 * draw(st.integers(8, 2400)),
                   qkv_bias=draw(st.booleans()), qk_norm=draw(st.booleans()),
                   tied_embeddings=draw(st.booleans()), final_norm=True)


@st.composite
def moe(draw) -> LLMArch:
    base = draw(dense())
    layers = base.layers
    experts = draw(st.sampled_from([8, 16, 60, 64, 128, 256]))
    return dataclasses.replace(
        base, experts=experts, experts_per_token=draw(st.integers(1, min(8, experts))),
        moe_ffn=128 * draw(st.integers(1, 32)), dense_layers=draw(st.integers(0, layers - 1)),
        shared_ffn=128 * draw(st.integers(0, 64)), shared_gate=draw(st.booleans()))


@st.composite
def mla(draw) -> LLMArch:
    base = draw(moe())
    return dataclasses.replace(
        base, kv_heads=base.heads, q_lora_rank=draw(st.sampled_from([0, 768, 1536])),
        kv_lora_rank=draw(st.sampled_from([256, 512])), qk_rope_head_dim=64,
        qk_nope_head_dim=128, v_head_dim=128, head_dim=192, qkv_bias=False, qk_norm=False)


@settings(max_examples=200, deadline=None)
@given(dense(), POW2)
def test_kv_bytes_scale_until_heads_replicate(a, tp):
    one = a.kv_bytes_per_token(1)
    if a.supports_tp(tp):
        got = a.kv_bytes_per_token(tp)
        if tp <= a.kv_heads:
            assert got * tp == one                    # split evenly
        else:
            assert got == one / a.kv_heads           # one (replicated) head per GPU
            assert got == a.kv_bytes_per_token(a.kv_heads)
    for t in (1, 2, 4, 8):
        assert a.kv_bytes_per_token(t, "fp8") * 2 == a.kv_bytes_per_token(t, "bf16")
        assert a.kv_bytes_per_token(2 * t) <= a.kv_bytes_per_token(t)


@settings(max_examples=100, deadline=None)
@given(mla(), POW2)
def test_mla_kv_is_the_latent_whole_on_every_gpu(a, tp):
    assert a.kv_bytes_per_token(tp) == a.layers * (a.kv_lora_rank + a.qk_rope_head_dim) * 2
    assert a.kv_bytes_per_token(tp, "fp8") * 2 == a.kv_bytes_per_token(tp)


@settings(max_examples=200, deadline=None)
@given(st.one_of(dense(), moe(), mla()), st.sampled_from([1, 2, 4, 8]))
def test_weight_bytes(a, tp):
    assert a.weight_bytes(tp) * tp == 2.0 * a.params
    fp8 = a.weight_bytes(tp, "fp8")
    assert a.weight_bytes(tp) / 2 < fp8 < a.weight_bytes(tp)
    assert fp8 * tp == a.linear_params() + 2.0 * (a.params - a.linear_params())
    assert a.active_params <= a.params
    if a.moe and a.supports_ep(tp):              # EP over the TP group: same bytes per GPU
        assert a.weight_bytes(tp, ep=tp) == a.weight_bytes(tp)


@settings(max_examples=200, deadline=None)
@given(st.one_of(dense(), moe(), mla()))
def test_the_gemm_plan_holds_the_model(a):
    plan = layer_plan(a, tp=1)
    router = a.moe_layers * (a.hidden * a.experts + (a.hidden if a.shared_gate else 0))
    lm_head = a.vocab * a.hidden
    assert weight_params_of_plan(plan) == a.linear_params() + router + lm_head
    assert len(gemm_shapes(a, 1)) == len(plan.gemms)


@settings(max_examples=100, deadline=None)
@given(st.one_of(dense(), moe()), st.sampled_from([2, 4, 8]))
def test_tp_splits_the_plan(a, tp):
    if not a.supports_tp(tp):
        return
    one = weight_params_of_plan(layer_plan(a, 1))
    split = weight_params_of_plan(layer_plan(a, tp))
    router = a.moe_layers * (a.hidden * a.experts + (a.hidden if a.shared_gate else 0))
    # everything splits but the replicated router (and KV projections once heads replicate)
    if tp <= a.kv_heads:
        assert split == (one - router) / tp + router
    else:
        assert split > (one - router) / tp + router


@settings(max_examples=100, deadline=None)
@given(moe(), st.sampled_from([2, 4, 8, 16]))
def test_expert_parallel_spreads_whole_experts(a, ep):
    if not a.supports_ep(ep):
        return
    plan = layer_plan(a, tp=1, ep=ep)
    experts = [g for g in plan.gemms if g.kind == "expert"]
    assert all(g.count == a.experts // ep for g in experts)
    assert experts[0].n == (2 if a.gated else 1) * a.moe_ffn      # not TP-split
    assert plan.moe.moe_ep == ep and plan.moe.moe_tp == 1
    assert any(c.kind == "all_to_all" for c in plan.collectives)

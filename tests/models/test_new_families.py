"""MiniMax-M2, gpt-oss and Kimi K2 / K2.5 (the MoE families of the measured runs, issue 36):
read as the families they are built like — a MiniMax-M2 or gpt-oss config is a Mixtral one
with q/k-norm, biases or sliding layers added; Kimi K2 is DeepSeek-V3's architecture — checked
on generated configs; their parameter counts against the published ones; the checkpoint
formats they ship in."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.errors import InputError
from hastune.models.hf import read_config

# abridged published configs (the keys hastune reads)
MINIMAX_M2 = {  # MiniMaxAI/MiniMax-M2.5 config.json
    "model_type": "minimax_m2", "num_hidden_layers": 62, "hidden_size": 3072,
    "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 1536, "vocab_size": 200064, "num_experts_per_tok": 8,
    "num_local_experts": 256, "use_qk_norm": True, "shared_intermediate_size": 0}
GPT_OSS = {  # openai/gpt-oss-120b and -20b config.json (20b: 24 layers, 32 experts)
    "model_type": "gpt_oss", "num_hidden_layers": 36, "hidden_size": 2880, "head_dim": 64,
    "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 2880,
    "vocab_size": 201088, "num_local_experts": 128, "num_experts_per_tok": 4,
    "sliding_window": 128, "attention_bias": True,
    "layer_types": ["sliding_attention", "full_attention"] * 18}
KIMI_K2 = {  # moonshotai/Kimi-K2-Instruct config.json
    "model_type": "kimi_k2", "num_hidden_layers": 61, "hidden_size": 7168,
    "intermediate_size": 18432, "num_attention_heads": 64, "num_key_value_heads": 64,
    "vocab_size": 163840, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128, "v_head_dim": 128, "n_routed_experts": 384,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
    "first_k_dense_replace": 1, "moe_layer_freq": 1}

# (config, total, active without the input embedding, tolerance) as published: MiniMax-M2's
# card (230B, 10B active), OpenAI's gpt-oss card (116.83B / 5.13B, 20.91B / 3.61B), Kimi K2's
# card (1T, 32B active; the Hub's safetensors 1.03T)
PUBLISHED = {
    "minimax-m2": (MINIMAX_M2, 230e9, 10e9, 0.05),
    "gpt-oss-120b": (GPT_OSS, 116.83e9, 5.13e9, 0.01),
    "gpt-oss-20b": ({**GPT_OSS, "num_hidden_layers": 24, "num_local_experts": 32,
                     "layer_types": ["sliding_attention", "full_attention"] * 12},
                    20.91e9, 3.61e9, 0.01),
    "kimi-k2": (KIMI_K2, 1.03e12, 32e9, 0.02),
}


def _read(tmp_path, cfg: dict, name: str = "m"):
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return read_config(d, name)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_parameter_counts(tmp_path, name):
    cfg, total, active, rel = PUBLISHED[name]
    m = _read(tmp_path, cfg)
    assert m.params == pytest.approx(total, rel=rel)
    assert m.llm.active_params_read == pytest.approx(active, rel=rel)


@st.composite
def moe_keys(draw) -> dict:
    kv = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv * draw(st.integers(1, 8))
    experts = draw(st.integers(2, 64))
    return {"num_hidden_layers": draw(st.integers(1, 48)),
            "hidden_size": 64 * draw(st.integers(4, 64)), "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": draw(st.sampled_from([64, 128])),
            "intermediate_size": 128 * draw(st.integers(1, 64)),
            "vocab_size": draw(st.integers(1000, 200000)), "num_local_experts": experts,
            "num_experts_per_tok": draw(st.integers(1, experts))}


@settings(max_examples=40, deadline=None)
@given(keys=moe_keys(), qk=st.booleans(), bias=st.booleans(), data=st.data())
def test_minimax_and_gpt_oss_read_as_mixtral_plus_their_extras(tmp_path_factory, keys, qk,
                                                               bias, data):
    tmp = tmp_path_factory.mktemp("f")
    mix = _read(tmp, {**keys, "model_type": "mixtral"}, "mix").llm
    mm = _read(tmp, {**keys, "model_type": "minimax_m2", "use_qk_norm": qk}, "mm").llm
    assert mm == replace(mix, qk_norm=qk)
    layers = keys["num_hidden_layers"]
    slide = data.draw(st.lists(st.booleans(), min_size=layers, max_size=layers))
    oss = _read(tmp, {**keys, "model_type": "gpt_oss", "attention_bias": bias,
                      "sliding_window": 128,
                      "layer_types": ["sliding_attention" if s else "full_attention"
                                      for s in slide]}, "oss").llm
    ids = tuple(i for i, s in enumerate(slide) if s)
    assert oss == replace(mix, qkv_bias=bias, sliding_window=128 if ids else None,
                          sliding_layers=len(ids), sliding_layer_ids=ids)
    assert oss.moe_layers == layers and oss.dense_layers == 0


@settings(max_examples=25, deadline=None)
@given(layers=st.integers(2, 64), first=st.integers(0, 3), experts=st.integers(8, 512),
       shared=st.integers(0, 2))
def test_kimi_k2_reads_as_deepseek_v3(tmp_path_factory, layers, first, experts, shared):
    tmp = tmp_path_factory.mktemp("k")
    keys = {**KIMI_K2, "num_hidden_layers": layers, "first_k_dense_replace": first,
            "n_routed_experts": experts, "n_shared_experts": shared}
    ds = _read(tmp, {**keys, "model_type": "deepseek_v3"}, "ds").llm
    kimi = _read(tmp, keys, "kimi").llm
    assert kimi == ds and kimi.mla
    # Kimi K2.5: the same LLM under text_config, its vision encoder not modelled
    k25 = _read(tmp, {"model_type": "kimi_k25", "text_config": keys}, "k25")
    assert k25.llm == ds and k25.encoder is None
    assert "not modelled" in k25.note and "text requests only" in k25.note


@pytest.mark.parametrize("qc, want", [
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
    ({"quant_method": "mxfp4"}, "mxfp4"),
    ({"quant_method": "compressed-tensors", "config_groups": {
        "g": {"weights": {"num_bits": 4, "type": "int", "group_size": 32}}}}, "int4"),
])
def test_checkpoint_formats(tmp_path, qc, want):
    assert _read(tmp_path, {**MINIMAX_M2, "quantization_config": qc}).llm \
        .checkpoint_precision == want


@pytest.mark.parametrize("qc", [
    {"quant_method": "compressed-tensors", "config_groups": {
        "g": {"weights": {"num_bits": 8, "type": "int"}}}},
    {"quant_method": "compressed-tensors"},
    {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"},
])
def test_other_formats_are_refused_by_key(tmp_path, qc):
    with pytest.raises(InputError) as info:
        _read(tmp_path, {**MINIMAX_M2, "quantization_config": qc})
    assert info.value.field == "quantization_config.quant_method"

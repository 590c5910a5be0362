"""Gated DeltaNet (Qwen3.5) in the model reader and the latency model. On generated hybrid
configs the linear-attention layers are those layer_types names (or every
full_attention_interval-th layer is full), their weights are counted, only the full-attention
layers hold KV and each request holds its recurrent and conv state; the plan's GEMMs hold
every linear projection. On generated batches and contexts a decode step's GDN layers cost
the same at any context (only the full-attention layers read a KV cache that grows), a
prefill's grow with the prompt, and a source without gdn tables is refused by name.
aiconfigurator-core (the `kernels` extra) is installed in CI: its packaged Qwen3.5 configs and
kernel tables are read, no skip."""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.calibrate.aic_profiles import aic_source, gpu_spec
from hastune.calibrate.device import build_device
from hastune.calibrate.latency import MAX_SEQS, LatencyModel
from hastune.errors import InputError
from hastune.fidelity.rows import model_dir
from hastune.models import load_model
from hastune.models.shapes import layer_plan, weight_params_of_plan

REPO = Path(__file__).resolve().parents[2]
QWEN35 = Path(model_dir("Qwen/Qwen3.5-397B-A17B", {}, REPO / "x.csv"))
SLOW = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@cache
def device(system: str = "b200_sxm", engine: str = "sglang"):
    src = aic_source("fp8", engine)
    return build_device(src, gpu_spec(system, src))


@cache
def qwen35():
    return load_model(QWEN35)


def _text(cfg: dict) -> dict:
    return cfg["text_config"]


@st.composite
def hybrid(draw):
    """A Qwen3.5-MoE text config: its layer count, interval or explicit layer_types, GDN
    heads and dims, conv taps and state dtype drawn."""
    layers = draw(st.integers(2, 64))
    kh = draw(st.sampled_from([1, 2, 4, 8, 16]))
    vh = kh * draw(st.sampled_from([1, 2, 4]))
    t = {"linear_num_key_heads": kh, "linear_num_value_heads": vh,
         "linear_key_head_dim": draw(st.sampled_from([64, 128, 256])),
         "linear_value_head_dim": draw(st.sampled_from([64, 128, 256])),
         "linear_conv_kernel_dim": draw(st.integers(2, 8)), "num_hidden_layers": layers,
         "mamba_ssm_dtype": draw(st.sampled_from(["float32", "bfloat16"]))}
    if draw(st.booleans()):
        types = draw(st.lists(st.sampled_from(["linear_attention", "full_attention"]),
                              min_size=layers, max_size=layers))
        t["layer_types"] = types
    else:
        every = draw(st.integers(1, 8))
        t["full_attention_interval"] = every
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention"
                 for i in range(layers)]
        t["layer_types"] = None
    return t, types


@SLOW
@given(h=hybrid())
def test_a_hybrid_config_reads_its_layers_weights_and_state(tmp_path, h):
    extra, types = h
    cfg = json.loads(QWEN35.read_text())
    text = _text(cfg)
    text.update({k: v for k, v in extra.items() if v is not None})
    if extra["layer_types"] is None:
        del text["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    llm = load_model(tmp_path).llm
    lin = tuple(i for i, t in enumerate(types) if t == "linear_attention")
    assert llm.linear_layer_ids == lin and llm.attn_layers == types.count("full_attention")
    kh, vh = extra["linear_num_key_heads"], extra["linear_num_value_heads"]
    dk, dv = extra["linear_key_head_dim"], extra["linear_value_head_dim"]
    conv, H = extra["linear_conv_kernel_dim"], llm.hidden
    channels = 2 * kh * dk + vh * dv
    # in_proj (q, k, v, z), in_proj_ba, conv1d, dt_bias, A_log, the gated norm, out_proj
    per_layer = H * (channels + vh * dv) + H * 2 * vh + channels * conv + 2 * vh + dv \
        + vh * dv * H
    full = dataclasses.replace(llm, linear_layer_ids=())
    assert llm.params == full.params - len(lin) * (full.attn_params() - per_layer)
    # KV on the full-attention layers only; state per request on the GDN ones
    for tp in (1, 2):
        assert llm.kv_bytes_per_token(tp, "bf16") == 2 * llm.attn_layers \
            * llm.kv_heads_per_gpu(tp) * llm.head_dim * 2
    state = {"float32": 4, "bfloat16": 2}[extra["mamba_ssm_dtype"]]
    assert llm.state_bytes_per_request(1) == len(lin) * (vh * dk * dv * state
                                                         + channels * (conv - 1) * 2)
    # the plan's GEMMs hold every linear projection's weights (at TP 1, experts TP-split)
    plan = layer_plan(llm, 1, 0, "prefill")
    router = llm.moe_layers * (H * llm.experts + (H if llm.shared_gate else 0))
    assert weight_params_of_plan(plan) == llm.linear_params() + router + llm.vocab * H


def test_the_published_sizes():
    """Qwen3.5-397B-A17B as published: 397B parameters, 17B active; 45 GDN layers of 60."""
    llm = qwen35().llm
    assert llm.linear_layers == 45 and llm.attn_layers == 15 and llm.output_gate
    assert 395e9 < llm.params < 399e9 and 16.5e9 < llm.active_params < 18e9


def test_a_missing_gdn_key_is_named(tmp_path):
    cfg = json.loads(QWEN35.read_text())
    del _text(cfg)["linear_num_value_heads"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError) as info:
        load_model(tmp_path)
    assert info.value.field == "text_config.linear_num_value_heads"
    cfg = json.loads(QWEN35.read_text())
    _text(cfg)["layer_types"][3] = "sliding_attention"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError) as info:
        load_model(tmp_path)
    assert info.value.field == "text_config.layer_types"


@SLOW
@given(n=st.integers(1, 256), c1=st.integers(16, 32768), c2=st.integers(16, 32768),
       tp=st.sampled_from([4, 8]))
def test_a_decode_steps_gdn_layers_do_not_grow_with_the_context(n, c1, c2, tp):
    """Between two contexts a decode step changes by exactly its full-attention layers'
    attention: the GDN layers' conv and recurrence read a state of fixed size."""
    lm = LatencyModel(qwen35(), device(), tp)
    a, d = lm.arch.llm, lm.dev
    h, kv = a.heads // tp, a.kv_heads_per_gpu(tp)
    step = lm.decode_step(n, c2) - lm.decode_step(n, c1)
    attn = a.attn_layers * (d.generation_attention(n, h, kv, a.head_dim, c2)
                            - d.generation_attention(n, h, kv, a.head_dim, c1))
    assert float(step) == pytest.approx(float(attn), rel=1e-9, abs=1e-12)
    gdn = lm._gdn_heads()
    assert gdn == (16 // tp, 128, 64 // tp, 128, 4)
    assert float(d.gdn("generation", n, 1.0, gdn)) > 0


@SLOW
@given(b=st.integers(1, 8), s=st.integers(64, 16384), tp=st.sampled_from([4, 8]))
def test_a_prefill_times_its_gdn_layers_from_their_tables(b, s, tp):
    """A prefill is its GEMMs, MoE and element-wise (as for any model), its full-attention
    layers' attention and, per GDN layer, the conv and the chunked recurrence at the GPU's
    heads; those grow with the prompt."""
    lm = LatencyModel(qwen35(), device(), tp)
    a, d = lm.arch.llm, lm.dev
    h, kv = a.heads // tp, a.kv_heads_per_gpu(tp)
    rest = lm._llm_dense(np.asarray(float(b * s)), np.asarray(float(b)))
    attn = a.attn_layers * d.context_attention(b, s, h, kv, a.head_dim)
    gdn = a.linear_layers * d.gdn("context", b, s, lm._gdn_heads())
    assert float(lm.prefill(b, s)) == pytest.approx(float(rest + attn + gdn), rel=1e-9)
    assert float(d.gdn("context", b, 2 * s, lm._gdn_heads())) > float(
        d.gdn("context", b, s, lm._gdn_heads()))


def test_gdn_state_is_reserved_beside_the_kv_cache():
    """The KV capacity leaves room for MAX_SEQS requests' GDN state: a recurrent state of
    no bytes (the conv's left) frees exactly that much KV."""
    lm = LatencyModel(qwen35(), device(), 4)
    llm = qwen35().llm
    light = LatencyModel(dataclasses.replace(qwen35(), llm=dataclasses.replace(
        llm, state_bytes=0)), device(), 4)
    assert lm.state_bytes == MAX_SEQS * llm.state_bytes_per_request(4)
    ssm = llm.linear_layers * llm.linear_v_heads * 128 * 128 * 4 / 4   # per GPU at TP 4
    assert lm.state_bytes - light.state_bytes == MAX_SEQS * ssm
    freed = light.kv_capacity_tokens() - lm.kv_capacity_tokens()
    assert freed == pytest.approx(MAX_SEQS * ssm / lm.kv_bytes_per_token, abs=1.0)


def test_a_source_without_gdn_tables_is_refused():
    """The CSV tables (vLLM's bf16 A100/H100 collection) have no gdn table: a GDN model on
    them is refused by name, not timed as attention."""
    from hastune.calibrate.tables import default_calibration_dir

    dev = build_device(default_calibration_dir(), "h100-80gb")
    with pytest.raises(ValueError, match="Gated DeltaNet layers need the gdn kernel tables"):
        LatencyModel(qwen35(), dev, 8)

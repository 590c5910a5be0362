"""DSA (DeepSeek Sparse Attention: GLM-5, DeepSeek-V3.2) in the model reader and the latency
model. On generated indexer shapes a config's indexer is read, its weights counted and its
fp8 key cached per layer; a missing key is named. On generated contexts and prompts the step
is the dense MLA step wherever the context fits in the top-k, and past it the MLA attention
stops growing (decode) or grows as a window of k keys (prefill) while the indexer, which
scores every earlier token, keeps growing. aiconfigurator-core (the `kernels` extra) is
installed in CI: its packaged GLM-5 config and kernel tables are read, no skip."""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.calibrate.aic_profiles import aic_source
from hastune.calibrate.device import build_device
from hastune.calibrate.latency import LatencyModel
from hastune.errors import InputError
from hastune.fidelity.rows import model_dir
from hastune.models import load_model

REPO = Path(__file__).resolve().parents[2]
GLM5 = Path(model_dir("zai-org/GLM-5", {}, REPO / "x.csv"))
SLOW = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@cache
def device(gpu: str = "h200-141gb", engine: str = "sglang"):
    return build_device(aic_source("fp8", engine), gpu)


@cache
def glm5():
    return load_model(GLM5)


def _with(arch, **dsa):
    return dataclasses.replace(arch, llm=dataclasses.replace(arch.llm, **dsa))


@SLOW
@given(topk=st.integers(1, 1 << 16), heads=st.sampled_from([8, 16, 32, 64]),
       dim=st.sampled_from([64, 128, 256]))
def test_a_dsa_config_reads_its_indexer(tmp_path, topk, heads, dim):
    cfg = json.loads(GLM5.read_text())
    cfg.update(index_topk=topk, index_n_heads=heads, index_head_dim=dim)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    llm = load_model(tmp_path).llm
    assert llm.dsa and (llm.index_topk, llm.index_heads, llm.index_head_dim) == (topk, heads,
                                                                                   dim)
    dense = dataclasses.replace(llm, index_topk=0, index_heads=0, index_head_dim=0)
    per_layer = llm.q_lora_rank * heads * dim + llm.hidden * dim + 2 * dim + llm.hidden * heads
    assert llm.params - dense.params == llm.layers * per_layer
    for precision in ("bf16", "fp8"):  # the indexer's key is fp8 with a 4-byte scale
        extra = llm.kv_bytes_per_token(8, precision) - dense.kv_bytes_per_token(8, precision)
        assert extra == llm.layers * (dim + 4)
    del cfg["index_topk"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError) as info:
        load_model(tmp_path)
    assert info.value.field == "index_topk"


@SLOW
@given(topk=st.sampled_from([256, 1024, 2048]), n=st.integers(1, 256),
       c=st.integers(16, 32768))
def test_decode_attends_to_the_top_k_and_the_indexer_to_everything(topk, n, c):
    """Against the same model with a top-k past every context (dense), a decode step is equal
    while the context fits, and past it less by exactly the latent attention over the
    context beyond k; the indexer's share grows with the whole context either way."""
    sparse = LatencyModel(_with(glm5(), index_topk=topk), device(), 8)
    dense = LatencyModel(_with(glm5(), index_topk=1 << 30), device(), 8)
    assert not sparse._module and not dense._module
    a, d = sparse.arch.llm, sparse.dev
    got, full = float(sparse.decode_step(n, c)), float(dense.decode_step(n, c))
    h, lat = a.heads // 8, a.kv_lora_rank + a.qk_rope_head_dim
    saved = a.layers * float(d.generation_attention(n, h, 1, lat, c)
                             - d.generation_attention(n, h, 1, lat, min(c, topk)))
    assert got == pytest.approx(full - saved, rel=1e-9)
    if c > 2 * topk:  # the indexer alone keeps the step growing past k
        more = float(sparse.decode_step(n, 2 * c)) - got
        index = a.layers * float(d.generation_attention(n, a.index_heads, 1, a.index_head_dim,
                                                        2 * c)
                                 - d.generation_attention(n, a.index_heads, 1,
                                                          a.index_head_dim, c))
        assert more == pytest.approx(index, rel=1e-9)


@SLOW
@given(topk=st.sampled_from([256, 1024, 2048]), b=st.integers(1, 8), s=st.integers(16, 32768))
def test_a_prefill_attends_to_a_window_of_top_k(topk, b, s):
    sparse = LatencyModel(_with(glm5(), index_topk=topk), device(), 8)
    dense = LatencyModel(_with(glm5(), index_topk=1 << 30), device(), 8)
    a, d = sparse.arch.llm, sparse.dev
    got, full = float(sparse.prefill(b, s)), float(dense.prefill(b, s))
    h, qk = a.heads // 8, a.qk_nope_head_dim + a.qk_rope_head_dim
    window = float(d.context_attention(b, min(s, topk), h, h, qk)) * (
        2 * s / topk - 1 if s > topk else 1.0)
    whole = float(d.context_attention(b, s, h, h, qk))
    assert got == pytest.approx(full - a.layers * (whole - window), rel=1e-9)
    if s <= topk:
        assert got == pytest.approx(full, rel=1e-12)


def test_dsa_is_not_timed_from_the_dense_mla_block_tables():
    """DeepSeek-V3's MLA shape with DSA (DeepSeek-V3.2) on an engine with MLA-block tables:
    the blocks time dense MLA, so the sparse block is composed from GEMMs and attention."""
    v3 = load_model(REPO / "examples" / "models" / "deepseek-v3")
    dev = build_device(aic_source("fp8", "vllm"), "h200-141gb")
    assert LatencyModel(v3, dev, 8)._module
    v32 = _with(v3, index_topk=2048, index_heads=64, index_head_dim=128)
    assert not LatencyModel(v32, dev, 8)._module

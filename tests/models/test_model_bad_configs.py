"""Broken or unsupported configs: one InputError naming the file and the key, exit 2 from the
CLI. Generated from the shipped configs by one mutation each: a required key removed, a value
of the wrong type, a negative, zero or fractional count, a NaN, an unknown model_type, an
unsupported quantization."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from hastune.errors import InputError
from hastune.models import read_config

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "models"

# keys without a default, per shipped config (dotted paths into config.json)
REQUIRED = {
    "llama-3.1-8b": ["model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "vocab_size"],
    "mixtral-8x7b": ["num_local_experts", "num_experts_per_tok", "intermediate_size"],
    "qwen3-30b-a3b": ["num_experts", "moe_intermediate_size", "num_experts_per_tok"],
    "deepseek-v3": ["kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                    "n_routed_experts", "moe_intermediate_size",
                    "quantization_config.quant_method"],
    "gemma-2-9b": ["hidden_size", "vocab_size"],
    "qwen2.5-vl-7b": ["vision_config", "vision_config.depth", "vision_config.hidden_size",
                      "vision_config.num_heads", "vision_config.out_hidden_size",
                      "vision_config.intermediate_size", "num_hidden_layers"],
    "llava-v1.6-34b": ["text_config", "vision_config", "text_config.hidden_size",
                       "text_config.num_hidden_layers", "vision_config.hidden_size",
                       "vision_config.image_size", "vision_config.patch_size",
                       "image_grid_pinpoints"],
}
# whole-number keys that are read (a bad value there must be refused by name)
COUNTS = {
    "llama-3.1-8b": ["hidden_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "intermediate_size", "vocab_size"],
    "qwen3-30b-a3b": ["num_experts", "num_experts_per_tok", "moe_intermediate_size",
                      "head_dim", "decoder_sparse_step"],
    "deepseek-v3": ["kv_lora_rank", "q_lora_rank", "v_head_dim", "n_routed_experts",
                    "moe_intermediate_size", "num_hidden_layers"],
    "gemma-2-9b": ["head_dim", "sliding_window", "num_key_value_heads"],
    "qwen2.5-vl-7b": ["vision_config.depth", "vision_config.hidden_size",
                      "vision_config.patch_size", "vision_config.spatial_merge_size",
                      "vision_config.window_size"],
    "llava-v1.6-34b": ["text_config.hidden_size", "text_config.num_attention_heads",
                       "vision_config.num_hidden_layers", "vision_config.image_size",
                       "vision_config.intermediate_size"],
}
NOT_A_COUNT = st.one_of(st.text(max_size=5), st.just(True), st.just(False), st.lists(
    st.integers(), max_size=2), st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda x: x != int(x)), st.integers(max_value=0), st.just(float("nan")),
    st.just(float("inf")), st.just({}))


def _load(name: str) -> dict:
    return json.loads((EXAMPLES / name / "config.json").read_text())


def _at(data: dict, dotted: str) -> tuple[dict, str]:
    *head, last = dotted.split(".")
    for k in head:
        data = data[k]
    return data, last


def _write(tmp: Path, data: dict) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "config.json").write_text(json.dumps(data))   # NaN / Infinity written as such
    return tmp


def _refused(path: Path, key: str) -> InputError:
    with pytest.raises(InputError) as info:
        read_config(path)
    err = info.value
    assert err.field == key or err.field.startswith(key + "["), err.message  # [i]: in a list
    assert err.file is not None and err.file.endswith("config.json")
    assert "Fix:" in err.message
    return err


CASE = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@CASE
@given(st.sampled_from([(n, k) for n, ks in REQUIRED.items() for k in ks]), st.integers(0, 9))
def test_a_missing_key_is_named(tmp_path, case, salt):
    name, key = case
    data = _load(name)
    parent, last = _at(data, key)
    del parent[last]
    _refused(_write(tmp_path / f"{name}-{salt}", data), key)


@CASE
@given(st.sampled_from([(n, k) for n, ks in COUNTS.items() for k in ks]), NOT_A_COUNT,
       st.integers(0, 9))
# a CI run found these: an [h, w] image side smaller than one patch was read (1 px), or
# refused at the anyres grid it broke instead of at itself
@example(("llava-v1.6-34b", "vision_config.image_size"), [1, 1], 0)
@example(("llava-v1.6-34b", "vision_config.image_size"), [5, 5], 0)
def test_a_bad_count_is_named(tmp_path, case, value, salt):
    name, key = case
    data = _load(name)
    parent, last = _at(data, key)
    # an image side may be given as [height, width]: two whole numbers of at least one patch
    # are a size, not a bad count (a CI run drew [14, 14], and [15, 15], refused at the anyres
    # grid its 15-px tile no longer divides)
    assume(not (last == "image_size" and isinstance(value, list) and len(value) == 2
                and all(type(v) is int and v >= parent.get("patch_size", 1) for v in value)))
    parent[last] = value
    err = _refused(_write(tmp_path / f"{name}-{salt}", data), key)
    if isinstance(value, float) and not math.isfinite(value):
        assert "finite" in err.problem


@CASE
@given(st.sampled_from(sorted(REQUIRED)), st.sampled_from(
    ["rope_theta", "rms_norm_eps", "initializer_range", "text_config.rms_norm_eps"]),
    st.sampled_from([float("nan"), float("inf"), float("-inf")]))
def test_nan_anywhere_is_named(tmp_path, name, key, value):
    data = _load(name)
    if key.startswith("text_config") and "text_config" not in data:
        key = key.split(".", 1)[1]
    parent, last = _at(data, key)
    parent[last] = value
    _refused(_write(tmp_path / name, data), key)


@CASE
@given(st.sampled_from(sorted(REQUIRED)), st.text(min_size=1, max_size=12).filter(
    lambda s: s not in ("llama", "mistral", "qwen2", "qwen3", "gemma", "phi3")))
def test_an_unknown_model_type_is_named(tmp_path, name, model_type):
    from hastune.models.hf import SUPPORTED
    if model_type in SUPPORTED:
        return
    data = _load(name)
    data["model_type"] = model_type
    err = _refused(_write(tmp_path / name, data), "model_type")
    assert "docs/models.md" in err.fix


@pytest.mark.parametrize("method", ["awq", "gptq", "bitsandbytes", "hqq", "compressed-tensors"])
def test_an_unsupported_quantization_is_named(tmp_path, method):
    data = _load("llama-3.1-8b")
    data["quantization_config"] = {"quant_method": method, "bits": 4}
    err = _refused(_write(tmp_path, data), "quantization_config.quant_method")
    assert "fp8" in err.problem


def test_unsupported_features_are_named(tmp_path):
    cases = [("llama-3.1-8b", "hidden_act", "relu", "hidden_act"),
             ("llava-v1.6-34b", "vision_feature_layer", [-2, -1], "vision_feature_layer"),
             ("llava-v1.6-34b", "vision_config.model_type", "eva_vit", "vision_config.model_type"),
             ("llava-v1.6-34b", "text_config.model_type", "gpt2", "text_config.model_type"),
             ("llava-v1.6-34b", "image_grid_pinpoints", [[300, 600]], "image_grid_pinpoints"),
             ("llama-3.1-8b", "num_key_value_heads", 5, "num_key_value_heads")]
    for i, (name, key, value, field) in enumerate(cases):
        data = copy.deepcopy(_load(name))
        parent, last = _at(data, key)
        parent[last] = value
        _refused(_write(tmp_path / str(i), data), field)


def test_not_a_config(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InputError, match="is not JSON"):
        read_config(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no config.json"):
        read_config(tmp_path / "empty")
    with pytest.raises(InputError, match="does not exist"):
        read_config(tmp_path / "nowhere")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="not a JSON object"):
        read_config(tmp_path / "list.json")


def hastune(*args) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hastune", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


@pytest.mark.parametrize("key,value", [("model_type", "gpt_bigcode"),
                                       ("num_hidden_layers", -3),
                                       ("hidden_size", float("nan")),
                                       ("quantization_config", {"quant_method": "awq"})])
def test_cli_exits_2_naming_the_key(tmp_path, key, value):
    data = _load("llama-3.1-8b")
    data[key] = value
    r = hastune("model", "inspect", _write(tmp_path, data) / "config.json")
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""

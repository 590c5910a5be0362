"""`hastune model inspect`: the --json keys and figures, shipped names, tokens per payload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hastune.cli import _register, app
from hastune.models import load_model
from hastune.models.tokens import audio_tokens, image_tokens

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
_register()


def inspect_json(*args: str) -> dict:
    r = CliRunner().invoke(app, ["model", "inspect", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()))
def test_json_keys_and_figures(name):
    s = inspect_json(str(EXAMPLES / name))
    m = load_model(EXAMPLES / name)
    for key in ("params", "active_params", "weight_bytes", "kv_bytes_per_token", "tp_degrees",
                "family", "layers", "heads", "kv_heads", "encoder"):
        assert key in s
    assert s["params"] == int(m.params) and s["active_params"] == int(m.active_params)
    assert set(s["weight_bytes"]) == {"bf16", "fp8"}
    assert s["weight_bytes"]["fp8"] < s["weight_bytes"]["bf16"]
    assert s["tp_degrees"][0] == 1 and all(m.llm.heads % tp == 0 for tp in s["tp_degrees"])
    kv = s["kv_bytes_per_token"]
    assert kv["bf16"]["1"] == m.llm.kv_bytes_per_token(1)
    assert all(kv["fp8"][t] * 2 == kv["bf16"][t] for t in kv["bf16"])
    assert ("ep_degrees" in s) == m.llm.moe
    assert (s["encoder"] is not None) == (m.encoder is not None)


def test_moe_and_mla_sections():
    s = inspect_json(str(EXAMPLES / "deepseek-v3"))
    assert s["moe"]["experts"] == 256 and s["ep_degrees"] == [1, 2, 4, 8, 16, 32, 64]
    assert s["mla"]["kv_lora_rank"] == 512
    # the latent, 61 layers × (512 + 64) × 2 bytes, whole on every GPU of the group
    assert set(s["kv_bytes_per_token"]["bf16"].values()) == {61 * 576 * 2}
    assert "vision" not in s["family"]


def test_a_shipped_name_is_accepted():
    s = inspect_json("qwen2-72b")
    assert s["source"] == "shipped" and s["tp_degrees"] == [1, 2, 4, 8, 16]
    assert s["kv_bytes_per_token"]["bf16"]["8"] == 2 * 80 * 1 * 128 * 2
    assert s["kv_bytes_per_token"]["bf16"]["16"] == 2 * 80 * 1 * 128 * 2   # replicated


def test_encoder_payloads():
    vl = inspect_json(str(EXAMPLES / "qwen2.5-vl-7b"), "--image", "1024x768")
    # smart_resize(768, 1024) to multiples of 28: 756 x 1036 → 54 x 74 patches, 2x2 merged
    assert vl["encoder"]["payload"] == {"kind": "qwen-dynamic", "image": "1024x768",
                                        "encoder_tokens": 54 * 74, "groups": 1,
                                        "llm_tokens": 54 * 74 // 4}
    llava = inspect_json(str(EXAMPLES / "llava-v1.6-34b"), "--image", "1024x768")
    # best grid 672x672 (2x2 tiles) + base; unpadded 36 x 48 features + 36 newlines + 576
    assert llava["encoder"]["payload"]["llm_tokens"] == 36 * 48 + 36 + 576
    assert llava["encoder"]["payload"]["groups"] == 5


def test_bad_image_option_exits_2():
    r = CliRunner().invoke(app, ["model", "inspect", "qwen2-72b", "--image", "big"])
    assert r.exit_code != 0


@settings(max_examples=200, deadline=None)
@given(st.integers(28, 4000), st.integers(28, 4000))
def test_qwen_dynamic_resolution_bounds(w, h):
    rule = load_model(EXAMPLES / "qwen2.5-vl-7b").encoder.payload
    t = image_tokens(rule, w, h)
    assert t.encoder_tokens * 14 * 14 <= rule.max_pixels
    assert t.encoder_tokens % 4 == 0 and t.llm_tokens * 4 == t.encoder_tokens


@settings(max_examples=200, deadline=None)
@given(st.integers(50, 3000), st.integers(50, 3000))
def test_anyres_tokens(w, h):
    rule = load_model(EXAMPLES / "llava-v1.6-34b").encoder.payload
    t = image_tokens(rule, w, h)
    assert 2 <= t.groups <= 5 and t.encoder_tokens == 577 * t.groups
    # base tile + at most the whole grid of features and one newline per row
    assert 576 < t.llm_tokens <= 576 + (t.groups - 1) * 576 + 72   # ≤ 3 tiles of 24 rows


def test_whisper_tokens_per_second(tmp_path):
    from tests.models.families import CONFIGS
    for name, per_s in (("ultravox-v0.5-llama-3.1-8b", 6.25), ("qwen2-audio-7b", 25.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(CONFIGS[name]))
        rule = load_model(tmp_path / name).encoder.payload
        assert rule.llm_per_second == per_s
        t = audio_tokens(rule, 45.0)
        assert (t.groups, t.encoder_tokens) == (2, 3000)
        assert t.llm_tokens == int(45 * per_s + 0.999)

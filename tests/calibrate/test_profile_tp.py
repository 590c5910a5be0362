"""The profile schema's tensor-parallel degree, its variants and for_tp (no calibration data)."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hastune.errors import InputError
from hastune.profile import Profile, load_profile


def _base(**over) -> dict:
    mem = {"gpu_bytes": 80e9, "weight_bytes": 40e9, "encoder_weight_bytes": 0.0,
           "kv_bytes_per_token": 2e5, "activation_bytes": 1e9}
    data = {
        "name": "m@g", "model": "m", "gpu": "g", "source": "test", "memory": mem,
        "embedding_bytes_per_token": 1e4,
        "encode": {"fixed_s": 0.0, "per_token_s": 0.0},
        "prefill": {"fixed_s": 0.02, "per_token_s": 1e-4},
        "decode": {"fixed_s": 0.03, "per_seq_s": 1e-4, "per_context_token_s": 1e-7},
    }
    data.update(over)
    return data


def _variant(scale: float, memory: dict | None = None) -> dict:
    v = {"prefill": {"fixed_s": 0.02 * scale, "per_token_s": 1e-4 * scale},
         "decode": {"fixed_s": 0.03 * scale, "per_seq_s": 1e-4 * scale,
                    "per_context_token_s": 1e-7 * scale}}
    if memory is not None:
        v["memory"] = memory
    return v


def test_old_profiles_are_tp1_without_variants(root):
    prof = load_profile(root / "profiles/a100-80gb/ultravox-v0.6-27b.yaml")
    assert prof.tp == 1
    old = Profile.model_validate(_base())
    assert old.tp == 1 and old.variants == {} and old.fit is None
    assert old.for_tp(1) is old


def test_missing_variant_is_a_clear_value_error():
    prof = Profile.model_validate(_base(variants={2: _variant(0.5)}))
    with pytest.raises(ValueError, match=r"no tensor-parallel variant tp=4 .*tp 1, 2"):
        prof.for_tp(4)


@settings(max_examples=80, deadline=None)
@given(base_tp=st.sampled_from([2, 4, 8]), want=st.sampled_from([1, 2, 4, 16]),
       weights=st.floats(1e9, 4e11), gpu=st.floats(2e10, 2e11))
def test_a_missing_degree_says_when_the_weights_cannot_fit_it(base_tp, want, weights, gpu):
    """A degree the profile lacks: where the weights split that many ways exceed the GPU's
    memory the message says so (regenerating cannot help); else it offers regeneration."""
    assume(weights / base_tp + 5e9 < 0.8 * gpu)  # the profile's own degree fits
    mem = {"gpu_bytes": gpu, "weight_bytes": weights / base_tp, "encoder_weight_bytes": 0.0,
           "kv_bytes_per_token": 2e5, "activation_bytes": 1e9}
    prof = Profile.model_validate(_base(tp=base_tp, memory=mem))
    if want == base_tp:
        return
    with pytest.raises(ValueError) as info:
        prof.for_tp(want)
    msg = str(info.value)
    assert f"no tensor-parallel variant tp={want} (it has tp {base_tp})" in msg
    if weights / want > gpu:
        assert "the weights need" in msg and "regenerate" not in msg
    else:
        assert "regenerate the profile with that degree" in msg


def test_for_tp_swaps_sections_and_round_trips():
    prof = Profile.model_validate(_base(variants={2: _variant(0.5), 4: _variant(0.25)}))
    p4 = prof.for_tp(4)
    assert p4.tp == 4 and p4.prefill.per_token_s == pytest.approx(0.25e-4)
    assert sorted(p4.variants) == [1, 2]
    # memory absent in the variant: the base's, split further
    assert p4.memory.weight_bytes == pytest.approx(10e9)
    assert p4.memory.kv_bytes_per_token == pytest.approx(5e4)
    back = p4.for_tp(2).for_tp(1)
    assert back.prefill == prof.prefill and back.decode == prof.decode
    assert back.memory == prof.memory and back.encode == prof.encode


def test_base_tp2_holds_a_model_too_big_for_one_gpu():
    # 145 GB of weights: 72.5 GB per GPU at tp 2 fits a 96 GB GPU; tp 1 could not
    mem = {"gpu_bytes": 96e9, "weight_bytes": 145e9 / 2, "encoder_weight_bytes": 0.0,
           "kv_bytes_per_token": 1.6e5, "activation_bytes": 1e9}
    prof = Profile.model_validate(_base(tp=2, memory=mem, variants={4: _variant(0.5)}))
    assert prof.tp == 2 and prof.memory_at(4).weight_bytes == pytest.approx(mem["weight_bytes"] / 2)
    with pytest.raises(ValueError, match="tp=1"):
        prof.for_tp(1)


@pytest.mark.parametrize("variants,match", [
    ({1: _variant(1.0)}, "other than the base tp 1"),
    ({2: _variant(0.5, memory={"gpu_bytes": 10e9, "weight_bytes": 20e9,
                               "encoder_weight_bytes": 0, "kv_bytes_per_token": 1e5})},
     r"variants\[2\]: the LLM weights do not fit"),
])
def test_bad_variants_name_the_problem(tmp_path, variants, match):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(_base(variants=variants)), encoding="utf-8")
    with pytest.raises(InputError, match=match) as exc:
        load_profile(path)
    assert "Fix:" in exc.value.message


def test_base_that_does_not_fit_names_tp(tmp_path):
    mem = {"gpu_bytes": 80e9, "weight_bytes": 145e9, "encoder_weight_bytes": 0.0,
           "kv_bytes_per_token": 3e5}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(_base(memory=mem)), encoding="utf-8")
    with pytest.raises(InputError, match="at tp 1.*raise tp"):
        load_profile(path)

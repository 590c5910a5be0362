"""Model configs and token counts: torch-free."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runners.model.config import PRESETS, AudioConfig, LMConfig, VisionConfig, get_config


def test_presets_are_valid_and_named():
    assert {"ref-tiny", "ref-small", "ref-base"} <= set(PRESETS)
    for name, cfg in PRESETS.items():
        assert cfg.name == name
        assert cfg.modalities == ("text", "image", "video", "audio")
    small = get_config("ref-small")
    assert small.kv_bytes_per_token == 2 * 4 * 4 * 32 * 4
    assert get_config("ref-small", seed=3).seed == 3


@pytest.mark.parametrize("make, msg", [
    (lambda: LMConfig(width=250, heads=8), "not divisible"),
    (lambda: LMConfig(heads=8, kv_heads=3), "kv_heads"),
    (lambda: VisionConfig(width=100, heads=3), "vision.heads"),
    (lambda: AudioConfig(stack=0), "stack"),
    (lambda: get_config("ref-huge"), "unknown model preset"),
    (lambda: get_config("ref-small", dtype="int8"), "dtype"),
])
def test_bad_sizes_say_the_field_and_the_fix(make, msg):
    with pytest.raises(ValueError, match=msg) as err:
        make()
    assert "Fix:" in str(err.value)


def test_documented_token_counts():
    v = VisionConfig(patch=16, merge=2)
    assert v.tokens(224, 224) == (196, 49)
    assert v.tokens(100, 64) == (8 * 4, 4 * 2)  # padded up to multiples of 32 px
    a = AudioConfig(stack=4, frames_per_second=100)
    assert a.frames(4.0) == 400 and a.tokens(400) == (200, 50)
    assert a.tokens(101) == (51, 13)


def test_config_and_hastune_stay_torch_free():
    code = ("import sys, hastune, hastune.cli, runners.model, runners.model.config; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr

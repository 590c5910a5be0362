"""The per-layer latency model and the linear fit, on predictors fitted to table subsets."""

from __future__ import annotations

import pytest

from hastune.calibrate.archs import MODELS
from hastune.calibrate.device import build_device
from hastune.calibrate.fit import fit_decode, fit_encode, fit_prefill
from hastune.calibrate.latency import LatencyModel

SUBSET_ROWS = 2000  # fit on a few thousand rows per table: fast, still ≤ 10% held out


@pytest.fixture(scope="module")
def devices(calibration):
    return {g: build_device(calibration, g, max_rows=SUBSET_ROWS)
            for g in ("a100-80gb", "h100-80gb", "a800-80gb")}


def test_architectures_match_published_sizes():
    billions = {"llava-v1.6-34b": 34.4, "qwen2.5-vl-32b": 32.8, "ultravox-v0.6-27b": 27.0,
                "llama-30b": 32.5, "codellama2-34b": 33.7, "qwen2-72b": 72.7}
    for name, b in billions.items():
        assert MODELS[name].llm.params / 1e9 == pytest.approx(b, rel=0.02), name
    assert MODELS["llama-30b"].llm.kv_bytes_per_token() == 2 * 60 * 52 * 128 * 2  # MHA
    assert MODELS["qwen2-72b"].llm.kv_bytes_per_token(2) == 2 * 80 * 4 * 128 * 2
    assert MODELS["qwen2-72b"].llm.kv_bytes_per_token(16) == 2 * 80 * 1 * 128 * 2  # replicated
    assert MODELS["llava-v1.6-34b"].encoder.params / 1e9 == pytest.approx(0.35, rel=0.05)
    assert MODELS["ultravox-v0.6-27b"].encoder.params / 1e9 == pytest.approx(0.69, rel=0.05)


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-80gb"])
@pytest.mark.parametrize("model,tp", [("llama-30b", 1), ("llama-30b", 2), ("qwen2-72b", 2),
                                      ("qwen2-72b", 4)])
def test_roofline_bounds(devices, gpu, model, tp):
    dev = devices[gpu]
    lm = LatencyModel(MODELS[model], dev, tp)
    floor = lm.weight_bytes / dev.mem_bw
    step = float(lm.decode_step(1, 512))
    assert floor <= step <= 3 * floor
    flops = 2 * MODELS[model].llm.params / tp * 2048
    pre = float(lm.prefill(1, 2048))
    assert flops / dev.peak_flops <= pre <= 3 * flops / dev.peak_flops


def test_latency_grows_with_work(devices):
    lm = LatencyModel(MODELS["ultravox-v0.6-27b"], devices["a100-80gb"])
    pre = lm.prefill(1, [64, 512, 4096])
    dec = lm.decode_step([1, 32, 128], 1024)
    enc = lm.encode([1, 4, 8], 1500, 1)
    for t in (pre, dec, enc):
        assert (t[1:] > t[:-1]).all()
    # Gemma 3's sliding-window layers: long prompts cost less than all-global attention
    assert lm.decode_step(8, 8192) < lm.decode_step(8, 1024) * 2


def test_tp_splits_memory_and_costs_all_reduce(devices):
    arch = MODELS["qwen2-72b"]
    a100, a800 = devices["a100-80gb"], devices["a800-80gb"]
    assert not LatencyModel(arch, a100, 1).fits() and LatencyModel(arch, a100, 2).fits()
    tp2, tp4 = LatencyModel(arch, a100, 2), LatencyModel(arch, a100, 4)
    assert tp4.weight_bytes == pytest.approx(tp2.weight_bytes / 2)
    assert tp4.kv_capacity_tokens() > 2 * tp2.kv_capacity_tokens()
    # A800's NVLink is 2/3 of A100's: same kernels, slower all-reduce
    slow = LatencyModel(arch, a800, 4).prefill(1, 4096)
    assert slow > tp4.prefill(1, 4096)
    assert LatencyModel(arch, a800, 4).decode_step(1, 512) > tp4.decode_step(1, 512)


def test_linear_fit_is_close_and_non_negative(devices):
    lm = LatencyModel(MODELS["llava-v1.6-34b"], devices["a100-80gb"])
    for fit in (fit_prefill(lm), fit_decode(lm), fit_encode(lm)):
        assert all(c >= 0 for c in fit.coef)
        assert fit.median_pct < 15 and fit.points >= 20
    assert fit_decode(lm).median_pct < 5

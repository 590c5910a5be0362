"""Caveats beside a result (hastune.caveats) on generated configs, engines and rates, and the
instances that stream tokens (Architecture.streams) as each simulator counts them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune import archs
from hastune.caveats import KERNELS_TTFT_BIAS_PCT, REQUEST_CEILING_RPS, caveats
from hastune.config import parse_config
from hastune.evaluate import Evaluation
from hastune.recipe import Recipe, load_recipe

ROOT = Path(__file__).resolve().parents[1]


@st.composite
def configs(draw):
    """A config of any architecture on at most 8 GPUs, one per instance."""
    arch = draw(st.sampled_from(("nodg", "padg", "fudg", "epd", "epd-static")))
    a, b = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    if arch in ("nodg", "padg"):
        key = "replicas" if arch == "nodg" else "instances"
        return parse_config({"architecture": arch, key: a + b, "tp": 1, "pp": 1})
    if arch == "fudg":
        return parse_config({"architecture": arch, "prefill_instances": a, "prefill_tp": 1,
                             "decode_instances": b, "decode_tp": 1})
    if arch == "epd":
        return parse_config({"architecture": arch, "n_E": a, "n_P": 0, "n_D": b, "B": 1,
                             "s": 0.0})
    return parse_config({"architecture": arch, "n_E": a, "n_P": 1, "n_D": min(b, 3)})


@given(cfg=configs(), engine=st.sampled_from(("vllm", "sglang", "trtllm")),
       terms=st.booleans(), pooled=st.booleans(), rate=st.floats(0.01, 1000.0))
@settings(max_examples=200, deadline=None)
def test_caveats_say_what_the_result_lies_beyond(cfg, engine, terms, pooled, rate):
    rec = {"on": terms, "engine": engine, "gpu": "a100-80gb",
           "fitted_for": "pooled" if pooled else "a100-80gb", "fitted_on": "rows"}
    out = caveats(rec, cfg, rate)
    n = archs.of(cfg).streams(cfg)
    cap = REQUEST_CEILING_RPS.get(engine)
    ceiling = [c for c in out if "per instance that streams tokens" in c]
    assert bool(ceiling) == (cap is not None and rate > cap * n)
    if ceiling:  # the rate per server and the rate the ceiling would allow
        assert f"({n})" in ceiling[0] and f"{cap * n:.1f} req/s" in ceiling[0]
    off = [c for c in out if c.startswith("engine terms off")]
    assert bool(off) == (not terms)
    if off:  # the kernels alone's measured bias, and how to turn the terms on
        assert f"{abs(KERNELS_TTFT_BIAS_PCT[engine]):.0f}% low" in off[0]
        assert f"name: {engine}, terms: true" in off[0]
    assert any("another GPU" in c for c in out) == (terms and pooled)
    assert any("miss the fidelity bar" in c for c in out) == (engine == "trtllm" and terms)
    assert any("has not been checked" in c for c in out) == (
        terms and cfg.architecture != "nodg")
    assert any("nodg only" in c for c in out) == (
        engine == "sglang" and terms and cfg.architecture != "nodg")
    if engine == "vllm" and terms and not pooled and cfg.architecture == "nodg":
        assert out == []


@pytest.fixture(scope="module")
def audio():
    return Evaluation(load_recipe(ROOT / "examples" / "audio-ultravox-8xa100.yaml"),
                      requests=60)


@given(cfg=configs())
@settings(max_examples=25, deadline=None)
def test_streams_are_the_instances_each_simulator_gives_a_front_end(audio, cfg):
    """Architecture.streams is what the simulator passes EventLoop (one API server each)."""
    import hastune.sim.common as common

    seen = []
    real = common.EventLoop.__init__

    def spy(self, *a, streams: int = 1, **k):
        seen.append(streams)
        real(self, *a, streams=streams, **k)

    mp = pytest.MonkeyPatch()
    mp.setattr(common.EventLoop, "__init__", spy)
    try:
        sim = archs.of(cfg).simulator(audio.profile, audio.recipe.cluster, cfg,
                                      audio.recipe.workload.warmup, audio.recipe.slo)
        sim.run(audio.requests, 2.0)
    finally:
        mp.undo()
    assert seen and set(seen) == {archs.of(cfg).streams(cfg)}


def test_a_measured_profile_gets_no_caveats_and_the_cli_prints_them(tmp_path):
    data = yaml.safe_load((ROOT / "examples" / "reference-cpu.yaml").read_text())
    data["engine"] = {"name": "trtllm", "terms": True}
    data["profile"] = str(ROOT / "profiles" / "cpu" / "ref-small.yaml")
    ev = Evaluation(Recipe.model_validate(data))
    cfg = parse_config({"architecture": "nodg", "replicas": 1, "tp": 1, "pp": 1})
    assert ev.caveats(cfg, 1e6) == []  # the engine it was measured on is in its numbers
    cfg1 = tmp_path / "c.yaml"
    cfg1.write_text("architecture: nodg\nreplicas: 1\ntp: 8\npp: 1\n")
    r = subprocess.run([sys.executable, "-m", "hastune", "simulate",
                        "benchmarks/trtllm-open-loop.yaml", "--config", str(cfg1), "--rate",
                        "40", "--requests", "200", "--json"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode in (0, 3), r.stderr
    out = json.loads(r.stdout)["caveats"]  # terms on, H100's own: the ceiling and the bar
    assert len(out) == 2 and "40.0 req/s per instance" in out[0]

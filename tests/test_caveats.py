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
from hastune.data import SILICON_LLAMA31
from hastune.evaluators.sim import Evaluation
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
    assert not any("fidelity bar" in c for c in out)  # every engine meets it (2026-12-05)
    assert any("has not been checked" in c for c in out) == (
        terms and cfg.architecture != "nodg")
    assert any("nodg only" in c for c in out) == (
        engine == "sglang" and terms and cfg.architecture != "nodg")
    from hastune.regimes import lookup

    mode = "agg" if cfg.architecture in ("nodg", "padg") else "disagg"
    quoted = [c for c in out if c.startswith("measured error")]
    assert bool(quoted) == (terms and lookup(engine, "a100-80gb", None, mode, None) is not None)
    if engine == "vllm" and terms and not pooled and cfg.architecture == "nodg":
        assert out == quoted


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
    # terms on, H100's own: the ceiling and the per-stream wait past the fitted clients (an
    # overloaded open loop holds thousands)
    out = json.loads(r.stdout)["caveats"]
    assert len(out) == 3 and out[0].startswith("measured error, TensorRT-LLM")
    assert "40.0 req/s per instance" in out[1]
    assert "past the 128 clients" in out[2]


@given(cfg=configs(), on=st.booleans(), wait=st.sampled_from((0.0, 3.05e-3)),
       most=st.sampled_from((0, 64, 128)), in_flight=st.none() | st.floats(0.0, 5000.0))
@settings(max_examples=200, deadline=None)
def test_a_per_stream_wait_past_the_fitted_clients_is_said(cfg, on, wait, most, in_flight):
    rec = {"on": on, "engine": "vllm", "gpu": "h200-141gb", "fitted_for": "h200-141gb",
           "fitted_on": "rows", "frontend_per_stream_s": wait, "clients_max": most}
    if not on:
        rec = {"on": False, "engine": "vllm", "why": "off"}
    out = [c for c in caveats(rec, cfg, 1.0, in_flight) if "in flight per instance" in c]
    n = archs.of(cfg).streams(cfg)
    past = on and wait > 0 and most > 0 and in_flight is not None and in_flight / n > most
    assert bool(out) == past
    if past:  # the count per server, the fitted most, the wait and what it adds
        assert f"about {in_flight / n:.0f} requests" in out[0] and f"({n})" in out[0]
        assert f"the {most} clients" in out[0] and "3.05 ms" in out[0]
        assert f"{in_flight / n * wait:.2f} s of TTFT" in out[0]


def test_the_shipped_terms_know_their_most_clients_and_the_record_carries_them():
    """clients_max of each shipped (engine, GPU) is the most clients of its measured runs."""
    from hastune import engine_terms as et
    from hastune.engine_fitted import FITTED
    from hastune.fidelity.rows import read_cases
    from hastune.model_ref import Engine
    from hastune.profile import load_profile

    path = SILICON_LLAMA31
    most: dict = {}
    for c in read_cases(path):
        most[c.group] = max(most.get(c.group, 0), c.clients)
    assert {k: row["clients_max"] for k, row in FITTED.items()} == most
    prof = load_profile(ROOT / "profiles" / "a100-80gb" / "llama-30b.yaml")
    for (engine, gpu), m in most.items():
        t = et.terms_for(engine, gpu, 80.0)
        assert t.clients_max == m
        rec = et.record(Engine(name=engine, terms=True), prof.model_copy(update={"gpu": gpu}), t)
        assert rec["clients_max"] == m


@given(st.lists(st.tuples(st.floats(0.0, 100.0), st.floats(0.01, 50.0)), min_size=1,
                max_size=50), st.integers(0, 3))
@settings(max_examples=50, deadline=None)
def test_requests_in_flight_are_those_each_measured_one_found_and_itself(audio, reqs, warm):
    """Open loop: the mean, over the requests after the warm-up, of the others sent before it
    and not yet finished when it was sent, plus itself (counted here one pair at a time);
    closed loop: the clients."""
    import numpy as np

    from hastune.runs import RunResult

    a = np.array([x for x, _ in reqs])
    f = a + np.array([d for _, d in reqs])
    run = RunResult(rate=3.0, ttft=np.zeros(len(a)), tpot=np.zeros(len(a)),
                    warmup=min(warm, len(a) - 1), arrival=a, finish=f)
    seen = [sum(1 for j in range(len(a)) if a[j] < a[i] < f[j])
            for i in range(run.warmup, len(a))]
    want = sum(seen) / len(seen) + 1.0
    got = audio.in_flight(3.0, run)
    assert got is not None and abs(got - want) <= 1e-9 * max(1.0, want)
    assert 1.0 <= got <= len(a)  # itself, and never more than the requests there were
    assert audio.in_flight(3.0, None) is None
    mp = pytest.MonkeyPatch()
    mp.setattr(audio, "closed", True)  # closed loop: the rate is the clients
    try:
        assert audio.in_flight(3.0, run) == 3.0 and audio.in_flight(7.0, None) == 7.0
    finally:
        mp.undo()


@settings(max_examples=80, deadline=None)
@given(arch=st.sampled_from(("nodg", "padg", "fudg")), tps=st.tuples(
    st.sampled_from((1, 2, 4, 8, 16)), st.sampled_from((1, 2, 4, 8, 16))),
    built=st.sampled_from(("16", "16, 32", "", None)), gpu=st.sampled_from(("gb200-186gb",
                                                                           "gb300-288gb")))
def test_a_tp_group_on_an_unmeasured_all_reduce_is_said(arch, tps, built, gpu):
    from hastune.caveats import built_tp

    if arch == "fudg":
        cfg = parse_config({"architecture": arch, "prefill_instances": 1, "prefill_tp": tps[0],
                            "decode_instances": 1, "decode_tp": tps[1]})
        used = set(tps)
    else:
        key = "replicas" if arch == "nodg" else "instances"
        cfg = parse_config({"architecture": arch, key: 1, "tp": tps[0], "pp": 1})
        used = {tps[0]}
    src = None if built is None else {"database": "aiconfigurator-core", "tp_built": built}
    out = built_tp(src, gpu, cfg)
    hit = sorted(used & {16, 32}) if built else []
    if not hit:
        assert out == []
        return
    (line,) = out
    assert line.startswith(f"TP {', '.join(map(str, hit))} on {gpu}:")
    assert "bus factor" in line and "docs/profiles.md" in line

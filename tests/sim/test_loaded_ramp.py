"""Closed-loop clients start over the loaded cycle (hastune.sim.warmup.loaded_ramp, issue 13:
closed-loop results must not depend on the run's length)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune import engine_terms as et
from hastune.archs.nodg import NoDGConfig
from hastune.cluster import Cluster
from hastune.data import SILICON_LLAMA31
from hastune.profile import load_profile
from hastune.sim import warmup
from hastune.sim.nodg import NoDGSimulator
from hastune.workload import RequestSet

ROOT = Path(__file__).resolve().parents[2]
PROFILE = load_profile(ROOT / "profiles" / "a100-80gb" / "llama-30b.yaml")
CSV = SILICON_LLAMA31


def _sim() -> NoDGSimulator:
    cfg = NoDGConfig(architecture="nodg", replicas=1, tp=2, pp=1)
    return NoDGSimulator(PROFILE, Cluster(gpu="a100-80gb", gpus=2), cfg, warmup=0.0)


def _reqs(n: int, isl: np.ndarray, osl: np.ndarray, think: float | None, ramp: float,
          steady: bool = True) -> RequestSet:
    z = np.zeros(n)
    return RequestSet(np.ones(n), z.astype(np.int64), z, z, isl.astype(float),
                      osl.astype(float), 0, None, think, None, ramp, steady)


@given(clients=st.integers(1, 40), rounds=st.integers(1, 16), think=st.floats(0.0, 2.0),
       ramp=st.floats(0.01, 30.0), seed=st.integers(0, 10_000))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_ramp_is_the_pilots_cycle_or_what_it_was(clients, rounds, think, ramp, seed):
    """On generated closed loops (random lengths, think times, ramps): with at least
    2 × PILOT_ROUNDS rounds the ramp becomes the larger of what it was and the pilot's mean
    send-to-send time (TTFT + TPOT × (output − 1) + think, rounds 1..PILOT_ROUNDS − 1 of a run of
    the first PILOT_ROUNDS rounds), computed here from the pilot's per-request results; with
    fewer rounds nothing changes. Nothing else in the request set changes."""
    rng = np.random.default_rng(seed)
    n = clients * rounds
    isl, osl = rng.integers(16, 3000, n), rng.integers(1, 200, n)
    reqs = _reqs(n, isl, osl, think, ramp)
    got = warmup.loaded_ramp(_sim(), reqs, clients)
    p = warmup.PILOT_ROUNDS
    if rounds < 2 * p:
        assert got is reqs
        return
    pilot = _sim().run(reqs.head(clients * p), clients)
    sl = slice(clients, clients * p)
    tpot = np.nan_to_num(pilot.tpot[sl], nan=0.0)
    cycle = float(np.mean(pilot.ttft[sl] + tpot * (osl[sl] - 1))) + think
    assert got.ramp_s == pytest.approx(max(ramp, cycle), rel=1e-9)
    assert got.ramp_s >= ramp
    for f in ("gaps", "prompt_tokens", "output_tokens", "seed", "think_s", "steady"):
        assert getattr(got, f) is getattr(reqs, f)


def test_open_loop_unramped_and_benchmark_runs_are_left_alone():
    n = 200
    isl, osl = np.full(n, 1024), np.full(n, 64)
    sim = _sim()
    for reqs in (_reqs(n, isl, osl, None, 1.0),          # open loop
                 _reqs(n, isl, osl, 0.0, 0.0),           # no ramp
                 _reqs(n, isl, osl, 0.0, 1.0, False)):   # a benchmark's mean (fidelity)
        assert warmup.loaded_ramp(sim, reqs, 10) is reqs


# TensorRT-LLM's terms as fitted before the front end's floor (8d34e45; hastune.fidelity.fit.
# FRONTEND_MIN_S): a front end of exactly 0, so a client's next request joins the iteration
# that starts the instant its last one finished. On that edge the two rows below run a slow
# transient, which is what the tests need to show the loaded ramp and the doubling at work;
# with the terms shipped since, both rows are flat from their first rounds (checked too).
EDGE_TERMS = {
    ("trtllm", "h100-80gb"): {"kernel_scale": 0.915253, "iteration_s": 0.000388699,
                              "per_seq_s": 3.24998e-05, "frontend_s": 0.0,
                              "frontend_per_stream_s": 0.0022054},
    ("trtllm", "h200-141gb"): {"kernel_scale": 0.770121, "iteration_s": 0.0,
                               "per_seq_s": 3.08928e-05, "frontend_s": 0.0,
                               "frontend_per_stream_s": 0.0},
}


def _on_the_edge(monkeypatch, key) -> None:
    """The shipped terms of `key` replaced by EDGE_TERMS' for the rest of the test."""
    from hastune import engine_fitted

    fitted = dict(engine_fitted.FITTED)
    fitted[key] = {**fitted[key], **EDGE_TERMS[key]}
    monkeypatch.setattr(engine_fitted, "FITTED", fitted)


def _rounds_apart(case, monkeypatch, ramp_on: bool, kv: str | None = None
                  ) -> tuple[float, float]:
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity import run as fr

    if not ramp_on:  # neither the loaded ramp nor longer runs (warmup.steady_run)
        monkeypatch.setattr(warmup, "loaded_ramp", lambda sim, reqs, rate: reqs)
        monkeypatch.setattr(warmup, "EXTEND", 1)
    means = []
    for rounds in (40, 400):
        rec = fr.recipe_for(case, {}, CSV, rounds, exact=True)
        if kv is not None:
            rec = rec.model_copy(update={"precision": rec.precision.model_copy(
                update={"kv_cache": kv})})
        prof = resolve_profile(rec, quiet=True)[0]
        t = et.terms_for(case.engine, case.gpu, prof.memory.gpu_bytes / 2**30)
        means.append(fr.simulate(case, prof, t, rec, steady=True,
                                 clients=fr.recipe_clients(t)).ttft_ms)
    return means[0], means[1]


def test_a_queued_closed_loop_settles_within_forty_rounds(monkeypatch):
    """TensorRT-LLM's H200 terms on the zero front end's edge (EDGE_TERMS), Llama-3.1-70B fp8
    on TP 2, 128 clients of 8192 + 1024 tokens (a row of the calibration file, its clients
    spread as a recipe's are): started over one zero-load lifetime (12.9 s; 98 s loaded) the
    clients take about 130 rounds to settle, and the mean TTFT of 40 rounds is 2.3× that of
    400 (1244 vs 536 ms); with the shipped terms the row is flat either way; over the
    pilot's loaded cycle the two are within 5%."""
    from hastune.fidelity.rows import read_cases

    if not CSV.is_file():
        pytest.skip("no calibration file")
    case = next(c for c in read_cases(CSV) if (c.engine, c.gpu, c.tp, c.isl, c.osl, c.clients)
                == ("trtllm", "h200-141gb", 2, 8192, 1024, 128))
    # as a recipe's closed loop: every request exactly 8192 + 1024 tokens (the measured run's
    # benchmark drew them at random, hastune.fidelity.harness, which spreads its clients)
    # and its fp8 KV cache
    case = replace(case, id="recipe")
    a, b = _rounds_apart(case, monkeypatch, True, "fp8")  # the shipped terms
    assert abs(b / a - 1) < 0.05
    _on_the_edge(monkeypatch, (case.engine, case.gpu))
    a, b = _rounds_apart(case, monkeypatch, True, "fp8")
    assert abs(b / a - 1) < 0.05
    a0, b0 = _rounds_apart(case, monkeypatch, False, "fp8")
    assert abs(b0 / a0 - 1) > 0.5  # the control: the zero-load ramp's drift


def test_a_slow_transient_is_run_past(monkeypatch):
    """TensorRT-LLM's H100 terms on the zero front end's edge (EDGE_TERMS), Llama-3.1-8B on
    TP 4, 128 clients of 2048 + 128 tokens (a row of the calibration file, clients spread as a
    recipe's are; with the shipped terms it is flat, 357 ms at 40 and 400 rounds): over the
    loaded cycle the mean TTFT still falls for ~60 rounds (352 → 307 ms), so a 40-round run,
    all of it transient, read 326 ms against 307 over 400 rounds; MSER's cut at its bound marks
    it unsettled and steady_run doubles it (hastune.sim.warmup.settled) until the two agree."""
    from hastune.fidelity.rows import read_cases

    if not CSV.is_file():
        pytest.skip("no calibration file")
    case = next(c for c in read_cases(CSV) if (c.engine, c.gpu, c.tp, c.isl, c.osl, c.clients)
                == ("trtllm", "h100-80gb", 4, 2048, 128, 128))
    a, b = _rounds_apart(case, monkeypatch, True)  # the shipped terms
    assert abs(b / a - 1) < 0.02
    _on_the_edge(monkeypatch, (case.engine, case.gpu))
    a, b = _rounds_apart(case, monkeypatch, True)
    assert abs(b / a - 1) < 0.02
    monkeypatch.setattr(warmup, "EXTEND", 1)
    a1, b1 = _rounds_apart(case, monkeypatch, True)
    assert a1 / b1 - 1 > 0.04  # the control: 40 rounds as asked, still in the transient

from __future__ import annotations

import numpy as np
import pytest

from hastune.goodput import search_goodput
from hastune.recipe import SLO
from hastune.sim.result import RunResult

SLO_ = SLO(ttft_s=1.0, tpot_s=0.1)


def fake_run(threshold: float):
    """A deployment whose P90 TTFT crosses the SLO exactly at `threshold` req/s."""
    calls = []

    def run(rate: float) -> RunResult:
        calls.append(rate)
        ttft = np.full(100, 0.5 if rate <= threshold else 2.0)
        return RunResult(rate=rate, ttft=ttft, tpot=np.full(100, 0.05))

    return run, calls


@pytest.mark.parametrize("threshold,start", [(7.3, 1.0), (0.4, 5.0), (130.0, 2.0), (1.0, 1.0)])
def test_bracket_then_bisect_finds_the_threshold(threshold, start):
    run, calls = fake_run(threshold)
    res = search_goodput(run, SLO_, start_rate=start, tolerance=0.02)
    assert res.goodput_rps <= threshold
    assert res.goodput_rps >= threshold * (1 - 0.02) - 1e-12
    assert len(calls) == len(res.probes) <= 30
    passed = [p.rate for p in res.probes if p.passed]
    failed = [p.rate for p in res.probes if not p.passed]
    assert max(passed) == res.goodput_rps and min(failed) > threshold


def test_never_passing_gives_zero():
    run, _ = fake_run(0.0)
    res = search_goodput(run, SLO_, start_rate=1.0, min_rate=0.01)
    assert res.goodput_rps == 0.0 and not res.bracketed


def test_attainment_criterion():
    slo = SLO(ttft_s=1.0, tpot_s=0.1, criterion="attainment", attainment=0.9)
    ttft = np.array([0.5] * 85 + [5.0] * 15)
    run = RunResult(rate=1.0, ttft=ttft, tpot=np.full(100, 0.05))
    assert run.attainment(slo) == pytest.approx(0.85)
    assert not run.passes(slo)
    assert run.passes(SLO(ttft_s=1.0, tpot_s=0.1, percentile=80))


def test_warmup_requests_are_not_measured():
    ttft = np.array([9.0] * 10 + [0.1] * 90)
    run = RunResult(rate=1.0, ttft=ttft, tpot=np.full(100, 0.05), warmup=10)
    assert run.percentile("ttft", 99) == pytest.approx(0.1)


def test_simulated_goodput_is_a_passing_rate_below_a_failing_one(audio_eval, epd_config):
    res = audio_eval.goodput(epd_config)
    slo = audio_eval.recipe.slo
    assert res.goodput_rps > 0
    assert audio_eval.run(epd_config, res.goodput_rps).passes(slo)
    fails = [p.rate for p in res.probes if not p.passed]
    assert fails and min(fails) <= res.goodput_rps * (1 + 2 * audio_eval.recipe.evaluator.tolerance)


def test_epd_beats_static_split_on_audio(audio_recipe, epd_config, static_config, root):
    from hastune.config import EPDStaticConfig, load_config
    from hastune.evaluate import Evaluation

    ev = Evaluation(audio_recipe)
    tuned = load_config(root / "examples/configs/audio-epd-3-2-3.yaml")
    assert tuned.gpus == static_config.gpus == 8 and 0 < tuned.s < 1
    epd = ev.goodput(tuned).goodput_rps
    # the static split with its own best allocations (the top of its 63-config grid is 2-3-3)
    statics = [EPDStaticConfig(architecture="epd-static", n_E=e, n_P=p, n_D=d, batch=b)
               for e, p, d in ((2, 3, 3), (2, 2, 4), (1, 3, 4), (3, 2, 3)) for b in (1, 4)]
    best_static = max(ev.goodput(c).goodput_rps for c in statics)
    assert epd > 1.15 * best_static
    # same allocation, shipped configs: local prefill turns idle encode GPUs into prefill
    assert ev.goodput(epd_config).goodput_rps > 1.15 * ev.goodput(static_config).goodput_rps


def test_incumbent_stops_a_losing_search_early():
    run, calls = fake_run(5.0)
    res = search_goodput(run, SLO_, start_rate=1.0, tolerance=0.02, incumbent=8.0)
    assert res.early_stopped and len(calls) <= 5
    assert calls[0] == pytest.approx(8.0)
    assert 0 < res.goodput_rps <= 5.0
    # a deployment that beats the incumbent gets the full search
    run, calls = fake_run(12.0)
    res = search_goodput(run, SLO_, start_rate=1.0, tolerance=0.02, incumbent=8.0)
    assert not res.early_stopped and res.goodput_rps >= 12.0 * 0.98

"""Workload presets (EcoServe's datasets), rate schedules, closed loop, context limits."""

from __future__ import annotations

import numpy as np
import pytest

from hastune.errors import InputError
from hastune.evaluators.sim import Evaluation
from hastune.recipe import PRESETS, Recipe
from hastune.workload import sample_requests
from tests.sim.replica_recipes import recipe


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_means_and_slos_are_the_papers(name):
    rec = recipe(name)
    reqs = sample_requests(rec.workload, 40_000, seed=3)
    want_in, want_out = PRESETS[name]["means"]
    assert reqs.prompt_tokens.mean() == pytest.approx(want_in, rel=0.03)
    assert reqs.output_tokens.mean() == pytest.approx(want_out, rel=0.03)
    assert (rec.slo.ttft_s, rec.slo.tpot_s) == (PRESETS[name]["slo"]["ttft_s"], 0.1)


def test_explicit_values_beat_the_preset():
    rec = recipe("sharegpt", slo={"ttft_s": 1.0, "tpot_s": 0.05},
                 workload={"preset": "sharegpt", "output_tokens": 7})
    assert rec.slo.ttft_s == 1.0
    assert rec.workload.output_tokens.mean == 7
    assert rec.workload.prompt_tokens.mean == PRESETS["sharegpt"]["prompt_tokens"]["mean"]


def test_a_recipe_without_slo_or_preset_is_refused():
    with pytest.raises(Exception, match="slo"):
        Recipe.model_validate({"model": "codellama2-34b", "cluster": {"gpu": "a800-80gb",
                                                                      "gpus": 8}})


def test_max_context_cuts_prompts_not_outputs():
    rec = recipe("longbench", workload={"preset": "longbench", "max_context": 2048})
    reqs = sample_requests(rec.workload, 5000, seed=0)
    free = sample_requests(recipe("longbench").workload, 5000, seed=0)
    assert np.all(reqs.prompt_tokens + reqs.output_tokens <= 2048)
    assert np.array_equal(reqs.output_tokens, free.output_tokens)
    assert reqs.prompt_tokens.mean() < free.prompt_tokens.mean()


@pytest.mark.parametrize("shape", ["step", "linear"])
def test_rate_schedule_scales_the_arrival_rate(shape):
    pts = [[0, 1.0], [100, 3.0], [200, 3.0]]
    rec = recipe("alpaca", workload={"preset": "alpaca",
                                     "rate_schedule": {"shape": shape, "points": pts}})
    reqs = sample_requests(rec.workload, 20_000, seed=1)
    a = reqs.arrivals(10.0)
    assert np.all(np.diff(a) >= 0)
    first = ((a >= 0) & (a < 100)).sum()
    last = ((a >= 150) & (a < 200)).sum() / 50
    assert last == pytest.approx(30.0, rel=0.1)  # rate × 3 on the plateau
    # step: 10/s for the first 100 s; linear: the ramp averages 20/s
    assert first / 100 == pytest.approx(10.0 if shape == "step" else 20.0, rel=0.1)
    plain = sample_requests(recipe("alpaca").workload, 20_000, seed=1)
    assert np.array_equal(plain.output_tokens, reqs.output_tokens)  # same requests


def test_closed_loop_keeps_the_concurrency():
    rec = recipe("sharegpt", 400, workload={"preset": "sharegpt", "requests": 400,
                                            "arrival": {"process": "closed", "think_s": 0.0}})
    ev = Evaluation(rec)
    from hastune.config import parse_config

    for arch in ({"architecture": "nodg", "tp": 1, "replicas": 8},
                 {"architecture": "padg", "tp": 1, "instances": 8},
                 {"architecture": "fudg", "prefill_instances": 3, "decode_instances": 5}):
        cfg = parse_config(arch)
        run = ev.simulator(cfg).run(ev.requests, 16)
        assert run.completed == 400 and np.isfinite(run.ttft).all()
        assert run.extra["max_in_flight"] == 16, arch
        assert run.extra["throughput_rps"] > 0
    # epd has no closed-loop mode: a clear error, not a wrong answer
    epd = parse_config({"architecture": "epd", "n_E": 1, "n_P": 1, "n_D": 6, "B": 1, "s": 0.5})
    with pytest.raises(InputError, match="closed-loop"):
        ev.check(epd)

"""Behaviour of the padg (EcoServe) simulator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hastune.config import parse_config
from hastune.evaluators.sim import Evaluation
from tests.sim.replica_recipes import recipe


def padg(**kw):
    return parse_config({"architecture": "padg", "tp": 1, "instances": 8, **kw})


@pytest.fixture(scope="module")
def share_eval():
    return Evaluation(recipe("sharegpt", 600))


@pytest.fixture(scope="module")
def tight_eval():
    # TPOT SLO just above a decode step: slack builds up slowly
    return Evaluation(recipe("sharegpt", 600, slo={"ttft_s": 5.0, "tpot_s": 0.06}))


def test_kv_never_leaves_its_instance(share_eval):
    sim = share_eval.simulator(padg(tp=2, instances=4))
    run = sim.run(share_eval.requests_at(20.0), 20.0)
    home, dec = np.array(sim.last["home"]), np.array(sim.last["decoded_on"])
    assert run.completed == len(home) and run.rejected == 0
    assert (home >= 0).all() and np.array_equal(home, dec)
    assert run.extra["network_GB"] == 0.0
    # deterministic
    again = sim.run(share_eval.requests_at(20.0), 20.0)
    assert np.array_equal(run.ttft, again.ttft)


def test_ttft_waits_for_the_phase_switch():
    """A window's requests all get their first token when it closes (one timestamp each):
    the engine's, so without the front end's waits after it (engine terms off)."""
    ev = Evaluation(recipe("sharegpt", 600, engine={"name": "vllm", "terms": False}))
    sim = ev.simulator(padg())
    reqs = ev.requests_at(20.0)
    run = sim.run(reqs, 20.0)
    first = np.round(run.ttft + reqs.arrivals(20.0), 9)
    assert len(np.unique(first)) == run.extra["windows"]
    assert run.extra["mean_window_requests"] > 2
    prof = ev.profile
    L = reqs.prefill_tokens
    assert np.all(run.ttft >= prof.prefill.latency(L, L * L) - 1e-9)


def test_rolling_activation_cycles(share_eval):
    sim = share_eval.simulator(padg())
    sim.run(share_eval.requests_at(20.0, 2000), 20.0)  # short: no burst makes it skip one
    acts = sim.last["macros"][0].rolling.activations
    assert len(acts) > 16 and set(acts) == set(range(8))
    assert np.all(np.diff(acts) % 8 == 1)  # 0, 1, 2, …, 7, 0, 1, …: nobody skipped


def test_admission_refuses_when_slack_is_short(share_eval, tight_eval):
    loose = share_eval.simulator(padg()).run(share_eval.requests_at(20.0), 20.0)
    sim = tight_eval.simulator(padg())
    tight = sim.run(tight_eval.requests_at(20.0), 20.0)
    assert tight.extra["refused_slack"] > 100 * max(loose.extra["refused_slack"], 1)
    assert tight.extra["mean_window_s"] < 0.5 * loose.extra["mean_window_s"]
    acts = np.array(sim.last["macros"][0].rolling.activations)
    assert np.any(np.diff(acts) % 8 > 1)  # instances short of slack were skipped
    # the stricter statistic refuses more and keeps TPOT lower
    strict = tight_eval.simulator(padg(slack="min")).run(tight_eval.requests_at(5.0), 5.0)
    mean = tight_eval.simulator(padg(slack="mean")).run(tight_eval.requests_at(5.0), 5.0)
    assert strict.extra["refused_slack"] > mean.extra["refused_slack"]
    assert strict.percentile("tpot", 90) < mean.percentile("tpot", 90)


def test_goodput_search_runs(share_eval):
    res = share_eval.goodput(padg(tp=2, instances=4))
    assert res.bracketed and res.goodput_rps > 5
    assert res.best_run.utilisation["gpus"] <= 1.0 + 1e-9


def test_mitosis_grows_splits_and_drains():
    """Load ×4 at 30 s, ×0.5 at 80 s: the group grows one instance at a time, splits past
    N_u = 3, then drains (slowly: a drained instance first finishes its long outputs) and
    merges back."""
    sched = {"shape": "step", "points": [[0, 1.0], [30, 4.0], [80, 0.5]]}
    rec = recipe("sharegpt", 3000, workload={"preset": "sharegpt", "requests": 3000,
                                             "rate_schedule": sched})
    ev = Evaluation(rec)
    cfg = padg(instances=2, mitosis=True, max_instances=8, n_lower=1, n_upper=3,
               scale_interval_s=2.0)
    sim = ev.simulator(cfg)
    run = sim.run(ev.requests, 5.0)
    assert run.completed == len(ev.requests)
    tl = np.array(sim.last["timeline"])  # (t, active, macro-instances, draining)
    events = [e for _, e in sim.last["scaling"]]
    assert tl[0, 1] == 2 and tl[:, 1].max() >= 5 and tl[:, 2].max() >= 2
    assert {"grow", "split", "shrink", "merge"} <= set(events)
    before = tl[(tl[:, 0] > 40) & (tl[:, 0] < 80)]
    after = tl[tl[:, 0] > 150]
    assert after[:, 1].mean() < before[:, 1].mean()
    assert (tl[:, 3] > 0).any() and after[-1, 3] == 0  # drained ones finally left


@pytest.mark.parametrize("slo", [0.03, 0.05, 0.2])
def test_first_boundary_where_slack_covers_a_need(slo):
    """The closed-form re-offer time agrees with stepping boundary by boundary."""
    from hastune.profile import DecodeSpec
    from hastune.sim.instance import ReplicaDecode

    d = ReplicaDecode(DecodeSpec(fixed_s=0.02, per_seq_s=1e-4, per_context_token_s=2e-6))
    d.t0, d.step = 3.0, 40
    for i, (ctx, out) in enumerate([(500, 300), (2000, 400), (100, 500)]):
        d.join(i, ctx, out, ctx + out)
    key = 3.0 - 39 * slo  # a request that joined at step 40, t = 3
    for need in (0.0, 0.05, 0.3, 2.0):
        for t in (3.0, 3.5):
            got = d.first_boundary_where(slo, key, need, t)
            want = float("inf")
            for m in range(1, 400):
                tb = d.time_of(m)
                if d.step + m > d.running[0][0]:
                    break
                if tb >= t - 1e-12 and (d.step + m) * slo - tb + key >= need - 1e-9:
                    want = tb
                    break
            assert got == pytest.approx(want), (need, t)


@pytest.mark.parametrize("pp", [1, 2])
def test_estimates_are_the_per_request_floats(audio_recipe, pp):
    """The run computes its per-request estimates as arrays: exactly the floats one call per
    request gives (the simulator's output must not move)."""
    from hastune.sim.instance import InstanceTiming
    from hastune.sim.padg.run import estimates

    ev = Evaluation(audio_recipe, requests=300)
    enc_tok = ev.requests.encoder_tokens.copy()
    enc_tok[::3] = 0  # some text requests among the audio ones
    reqs = dataclasses.replace(ev.requests, encoder_tokens=enc_tok)
    tm = InstanceTiming(ev.profile, 1, pp, audio_recipe.cluster)
    enc, est, need = estimates(reqs, tm)
    want_enc = [tm.encode_latency(1, x, x * x) if x > 0 else 0.0
                for x in reqs.encoder_tokens.tolist()]
    L, out = reqs.prefill_tokens.tolist(), reqs.output_tokens.astype(np.int64).tolist()
    assert any(x > 0 for x in want_enc) and any(x == 0 for x in want_enc)
    assert enc == want_enc
    assert est == [e + tm.prefill_stage(n, n * n) for e, n in zip(want_enc, L)]
    assert need == [n + o for n, o in zip(L, out)]


def test_pump_offers_in_the_rolling_order():
    """padg's macro scheduler walks RollingActivation's candidates as two slices of the
    members: the same order for every cursor (one past the end included) and after removals."""
    from hastune.policies import RollingActivation

    ra = RollingActivation([4, 7, 1, 3, 0])
    for gone in (7, 0, None):
        for cursor in range(len(ra.members) + 1):
            ra.cursor = cursor
            c = ra.cursor
            assert ra.members[c:] + ra.members[:c] == list(ra.candidates())
        if gone is not None:
            ra.remove(gone)

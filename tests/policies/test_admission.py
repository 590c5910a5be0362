"""EcoServe's admission checks and the saved-TPOT statistic."""

from __future__ import annotations

import math
import random

import pytest

from hastune.policies import Admission, SlackTracker, Verdict


@pytest.mark.parametrize("statistic", ["mean", "min", "quantile"])
def test_saved_tpot_matches_its_definition(statistic):
    slo = 0.1
    rng = random.Random(1)
    tr = SlackTracker(slo, statistic, q=0.25)
    live: dict[int, tuple[float, int, float]] = {}  # id -> (t_first, join step, key)
    for i in range(300):
        if live and rng.random() < 0.4:
            k = rng.choice(list(live))
            tr.remove(live.pop(k)[2])
        else:
            tf, j = rng.uniform(0, 50), rng.randrange(0, 500)
            key = tr.key(tf, j)
            tr.add(key)
            live[i] = (tf, j, key)
        steps, t = 600, 60.0
        # saved = tokens_out × SLO − (t − t_first), tokens_out = steps − join + 1
        saved = sorted((steps - j + 1) * slo - (t - tf) for tf, j, _ in live.values())
        got = tr.saved(steps, t)
        if not saved:
            assert got == math.inf
            continue
        want = {"mean": sum(saved) / len(saved), "min": saved[0],
                "quantile": saved[int(0.25 * (len(saved) - 1))]}[statistic]
        assert got == pytest.approx(want, abs=1e-6)
        assert tr.mean_saved(steps, t) == pytest.approx(sum(saved) / len(saved), abs=1e-6)


def test_min_sees_the_request_the_mean_hides():
    adm = Admission(ttft_slo=5.0)
    trackers = {s: SlackTracker(0.1, s) for s in ("mean", "min")}
    for tr in trackers.values():
        tr.add(tr.key(0.0, 0))     # joined at step 0, t = 0: 201 tokens by step 200, t = 15
        tr.add(tr.key(14.9, 190))  # joined at step 190, t = 14.9: 11 tokens
    mean, low = (trackers[s].saved(200, 15.0) for s in ("mean", "min"))
    assert mean == pytest.approx((5.1 + 1.0) / 2) and low == pytest.approx(1.0)
    # a 2 s prefill: the mean admits it, though it would break the new request's TPOT
    assert adm.check(0.0, 0.0, 2.0, mean, 1e6, 1, 1) == 0
    assert adm.check(0.0, 0.0, 2.0, low, 1e6, 1, 1) == 2


def test_each_check_fails_on_its_own():
    adm = Admission(ttft_slo=1.0)
    ok = dict(window_s=0.1, pending_s=0.2, new_s=0.1, saved_s=1.0, kv_free=1000, kv_need=100,
              seats_free=4)
    assert adm.check(**ok) is Verdict.ADMIT
    assert adm.check(**{**ok, "window_s": 0.8}) is Verdict.TTFT    # 0.8 + 0.2 + 0.1 > 1
    assert adm.check(**{**ok, "saved_s": 0.25}) is Verdict.TPOT    # slack 0.25 < 0.2 + 0.1
    assert adm.check(**{**ok, "kv_need": 1001}) is Verdict.MEMORY  # KV
    assert adm.check(**{**ok, "seats_free": 0}) is Verdict.MEMORY  # batch seats
    # a prompt longer than the TTFT SLO may still open an empty window
    assert adm.check(0.0, 0.0, 2.0, math.inf, 1000, 100, 4, empty=True) == 0
    assert adm.check(0.0, 0.0, 2.0, math.inf, 1000, 100, 4, empty=False) == 1

"""Rolling activation order and mitosis decisions."""

from __future__ import annotations

from hastune.policies import GROW, HOLD, SHRINK, Mitosis, RollingActivation


def test_rolling_starts_at_the_last_taker_and_cycles():
    ra = RollingActivation([0, 1, 2, 3])
    assert list(ra.candidates()) == [0, 1, 2, 3]
    ra.took(0)
    ra.took(0)
    ra.took(2)  # 0 refused, 1 refused, 2 took it
    assert list(ra.candidates()) == [2, 3, 0, 1]
    ra.took(3)
    ra.took(0)
    assert ra.activations == [0, 2, 3, 0]
    ra.remove(3)  # a drained instance leaves the order; the cursor stays on 0
    assert list(ra.candidates()) == [0, 1, 2]
    ra.add(7)
    assert list(ra.candidates()) == [0, 1, 2, 7]


def test_mitosis_decisions():
    m = Mitosis(n_lower=2, n_upper=11, ttft_slo=5.0, tpot_slo=0.1)
    assert m.decide(4, mean_ttft=6.0, mean_saved=0.0) == GROW
    assert m.decide(4, mean_ttft=None, mean_saved=0.0, queued_all_interval=True) == GROW
    assert m.decide(4, mean_ttft=3.0, mean_saved=10.0) == HOLD   # TTFT not low enough
    assert m.decide(4, mean_ttft=0.5, mean_saved=0.5) == HOLD    # not enough slack
    assert m.decide(4, mean_ttft=0.5, mean_saved=2.0) == SHRINK  # 2.0 ≥ 10×0.1×4/3
    assert m.decide(1, mean_ttft=0.5, mean_saved=99.0) == HOLD   # never below one
    # the paper's run: the 12th instance splits a group with N_u = 11 into 6 + 6
    assert m.split(11) is None and m.split(12) == (6, 6)
    assert m.can_merge(1, 5) and not m.can_merge(1, 11) and not m.can_merge(3, 4)

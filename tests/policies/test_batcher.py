from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hastune.policies import PoissonGapBatcher, TimeoutBatcher, poisson_gap_kappa


def test_kappa_matches_fill_probability():
    # P(all B-1 gaps ≤ g) with g = κ/λ must equal p for Poisson arrivals
    for B in (2, 4, 8):
        for p in (0.3, 0.6, 0.9):
            k = poisson_gap_kappa(B, p)
            assert (1 - math.exp(-k)) ** (B - 1) == pytest.approx(p)


@given(st.integers(2, 64), st.floats(0.05, 0.95), st.floats(0.01, 1e4))
def test_gap_inversely_proportional_to_rate(B, p, lam):
    a = PoissonGapBatcher(B, p, rate_hint=lam)
    b = PoissonGapBatcher(B, p, rate_hint=2 * lam)
    assert a.gap == pytest.approx(poisson_gap_kappa(B, p) / lam)
    assert b.gap == pytest.approx(a.gap / 2)


@given(st.lists(st.floats(0, 10), min_size=1, max_size=50))
def test_batch_of_one_never_waits(gaps):
    b = PoissonGapBatcher(1, 0.6, rate_hint=5.0)
    t = 0.0
    for i, g in enumerate(gaps):
        t += g
        assert b.add(t, i) == [i]
        assert b.deadline() is None


def test_batch_leaves_at_bound_or_after_gap():
    b = PoissonGapBatcher(3, 0.6, rate_hint=10.0)
    assert b.add(0.0, "a") is None
    assert b.add(0.01, "b") is None
    assert b.add(0.02, "c") == ["a", "b", "c"]
    assert b.add(1.0, "d") is None
    d = b.deadline()
    assert d == pytest.approx(1.0 + b.gap)
    assert b.poll(d - 1e-9) is None
    assert b.poll(d) == ["d"]
    assert b.deadline() is None


def test_online_rate_estimate_tracks_load():
    rng = np.random.default_rng(1)
    b = PoissonGapBatcher(4, 0.6, rate_hint=1.0)
    t = 0.0
    for g in rng.exponential(1 / 50.0, 4000):
        t += g
        b.add(t, None)
    assert b.rate == pytest.approx(50.0, rel=0.3)
    # the gap tightened as load rose (hint was 1 req/s)
    assert b.gap < poisson_gap_kappa(4, 0.6) / 10


def test_max_gap_caps_the_wait():
    b = PoissonGapBatcher(8, 0.6, rate_hint=0.1, max_gap=0.05)
    b.add(0.0, 1)
    assert b.deadline() == pytest.approx(0.05)


def test_timeout_batcher():
    b = TimeoutBatcher(2, 0.02)
    assert b.add(0.0, 1) is None
    assert b.deadline() == pytest.approx(0.02)
    assert b.add(0.005, 2) == [1, 2]
    b.add(1.0, 3)
    assert b.poll(1.01) is None
    assert b.poll(1.02) == [3]

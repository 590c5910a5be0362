from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hastune.policies import SEED_SM_TABLE, SMPartitioner
from hastune.profile import interp_curve, load_profile


@st.composite
def curves(draw):
    n = draw(st.integers(2, 8))
    shares = sorted(set(draw(st.lists(st.floats(0.02, 0.98), min_size=n - 1, max_size=n - 1))))
    rels = sorted(draw(st.lists(st.floats(1.0, 10.0), min_size=len(shares),
                                max_size=len(shares))), reverse=True)
    return [(s, r) for s, r in zip(shares, rels)] + [(1.0, 1.0)]


@given(curves(), st.floats(0.01, 1.0))
def test_share_meets_budget_and_is_minimal(curve, budget):
    part = SMPartitioner(lambda b: curve, budget=budget)
    f = part.encode_share(4)
    assert 0 < f <= 1
    assert interp_curve(curve, f) <= (1 + budget) * (1 + 1e-9)
    if f > 1e-3:
        assert interp_curve(curve, f * (1 - 1e-6)) > (1 + budget) * (1 - 1e-6)
    assert part.prefill_share(4) == pytest.approx(1 - f)


def test_fallback_is_the_seed_table():
    part = SMPartitioner(None)
    assert [part.encode_share(b) for b in (1, 2, 3, 4, 5, 6, 7, 8, 16)] == [
        0.2, 0.3, 0.3, 0.4, 0.4, 0.6, 0.6, 0.75, 0.75]


def test_starter_curves_reproduce_seed_table(root):
    prof = load_profile(root / "profiles/a100-80gb/ultravox-v0.6-27b.yaml")
    part = SMPartitioner(prof.encode.curve_for, budget=0.2)
    for batch, share in SEED_SM_TABLE.items():
        # within 5 points: the curve is tabulated every 10% and capped at full share (batch 8)
        assert part.encode_share(batch) == pytest.approx(share, abs=0.05)

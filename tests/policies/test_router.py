from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.policies import DeficitRouter


@settings(max_examples=300)
@given(st.floats(0.0, 1.0, allow_nan=False), st.integers(1, 3000))
def test_remote_count_within_one_of_target(s, k):
    r = DeficitRouter(s)
    c = 0
    exact = Fraction(s)
    for i in range(1, k + 1):
        c += r.route()
        assert abs(c - i * exact) < 1


def test_float_accumulation_trap():
    # ten additions of 0.1 stay below 1.0 in floating point; the router must still send one
    r = DeficitRouter(0.1)
    assert sum(r.route() for _ in range(10)) == 1


def test_extremes():
    assert not any(DeficitRouter(0.0).route() for _ in range(100))
    assert all(DeficitRouter(1.0).route() for _ in range(100))

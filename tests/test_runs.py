"""hastune.runs: per-request latencies from timestamps, shared by simulator and engine."""

from __future__ import annotations

import math

import numpy as np

from hastune.runs import latencies


def test_latencies_from_timestamps():
    arrival = np.array([0.0, 1.0, 2.0, 3.0])
    first = np.array([0.5, 1.25, 2.5, math.nan])
    last = np.array([2.5, 1.25, 4.5, math.nan])
    tokens = np.array([5, 1, 3, 4])
    ttft, tpot = latencies(arrival, first, last, tokens, {3: "worker died"})
    assert ttft.tolist() == [0.5, 0.25, 0.5, math.inf]
    assert tpot[0] == 0.5 and math.isnan(tpot[1]) and tpot[2] == 1.0 and tpot[3] == math.inf
    # float token counts (the simulator's) give the same numbers
    ttft_f, tpot_f = latencies(arrival, first, last, tokens.astype(float), [3])
    np.testing.assert_array_equal(ttft, ttft_f)
    np.testing.assert_array_equal(tpot, tpot_f)

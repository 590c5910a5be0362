"""The kernels-alone TTFT bias each engine's caveat quotes (hastune.caveats.
KERNELS_TTFT_BIAS_PCT) is what `hastune fidelity` measures on the calibration file."""

from __future__ import annotations

import pytest

from hastune.caveats import KERNELS_TTFT_BIAS_PCT
from hastune.data import SILICON_LLAMA31
from hastune.fidelity import score

CSV = SILICON_LLAMA31


@pytest.mark.parametrize("engine", sorted(KERNELS_TTFT_BIAS_PCT))
def test_the_caveats_kernel_bias_is_the_scorecards(engine):
    assert CSV.is_file(), f"{CSV}: the calibration file hastune ships is missing"
    # the kernels' simulations come before any fit: no refinement needed for them
    card = score.run(CSV, only=lambda c: c.engine == engine, refine=0)
    bias = score.aggregate(card)["engine"][engine]["kernels"]["ttft"]["bias_pct"]
    assert bias == pytest.approx(KERNELS_TTFT_BIAS_PCT[engine], abs=0.5)

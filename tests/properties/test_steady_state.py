"""Item 2 of issue 9: goodput does not depend on the probe length. For random recipes of every
architecture (Poisson and Gamma arrivals), a configuration's goodput with the recipe's request
count and with 4× that count agree within the search tolerance + 3%."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

from hastune.evaluate import Evaluation
from hastune.prune import Bounds
from tests.generated import EPD_FAMILY, REPLICAS, recipes, space


def _config(rec, seed: int):
    """A feasible configuration of the recipe's small space, chosen by the recipe's seed."""
    ev = Evaluation(rec)
    b = Bounds(rec, ev.profile, ev.requests)
    cfgs = [c for c in space(rec.architecture).configs(rec.cluster.gpus) if b.memory_ok(c)]
    return cfgs[seed % len(cfgs)] if cfgs else None


@settings(max_examples=24)
@given(rec=recipes(EPD_FAMILY + REPLICAS, requests=(500, 3000)))
def test_goodput_does_not_depend_on_the_request_count(rec):
    cfg = _config(rec, rec.seed)
    if cfg is None:
        return
    short = Evaluation(rec).goodput(cfg).goodput_rps
    long = Evaluation(rec, requests=4 * rec.workload.requests).goodput(cfg).goodput_rps
    tol = rec.evaluator.tolerance + 0.03
    assert abs(short - long) <= tol * max(short, long) + 1e-12, (
        rec.name, cfg.model_dump(), short, long)
    if max(short, long) > 0:
        assert np.isfinite(short) and np.isfinite(long)

"""The fitted front ends stay off the edge at exactly zero (hastune.fidelity.fit.FRONTEND_MIN_S):
at 0 a closed-loop client's next request joins the iteration that starts the instant its last
one finished, at any positive value it waits for the next one, and a lockstep closed loop
settles in another state. A fit must not land on that edge, and the shipped terms must not sit
on it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune import engine_terms as et
from hastune.data import SILICON_LLAMA31
from hastune.engine_fitted import FITTED
from hastune.fidelity import fit as F

CSV = SILICON_LLAMA31


def test_every_shipped_front_end_is_at_least_the_floor():
    for key, row in FITTED.items():
        assert row["frontend_s"] >= F.FRONTEND_MIN_S * (1 - 1e-6), key
    assert F.LOWER[F.NAMES.index("frontend_s")] == F.FRONTEND_MIN_S
    assert F.START[F.NAMES.index("frontend_s")] == F.FRONTEND_MIN_S
    assert F.PRIOR[F.NAMES.index("frontend_s")] == 0.0  # the kernels alone keep none


@given(st.integers(6, 30), st.integers(0, 10_000), st.floats(0.6, 2.0), st.floats(0, 5e-3))
@settings(max_examples=25, deadline=None)
def test_a_fit_whose_best_front_end_is_zero_returns_the_floor(n, seed, k, it):
    """Measurements made with no front end at all (or one below the floor): the fit gives
    the floor, not 0 or a hair above it, and reproduces them within what the floor adds."""
    rng = np.random.default_rng(seed)
    theta = np.array([k, it, 0.0, 0.0, 0.0, 1.0])
    forms = []
    for _ in range(n):
        c = rng.integers(1, 128)
        forms.append(F.Form(np.array([rng.uniform(20, 2000), rng.uniform(500, 3000), 1000 * c,
                                      1e3, 1e3 * (c - 1), 0.0]),
                            np.array([rng.uniform(3, 80), 1000.0, 1000.0 * c, 0, 0, 0])))
    mt = np.array([f.ttft @ theta for f in forms])
    mp = np.array([f.tpot @ theta for f in forms])
    th = F.fit(forms, mt, mp)
    assert th[3] >= F.FRONTEND_MIN_S
    pred = np.array([f.predict(th) for f in forms])
    np.testing.assert_allclose(pred[:, 0], mt, rtol=2e-3)


def _ttft(case, prof, terms, rec, request_s: float) -> float:
    """The case's simulated mean TTFT with the front end's constant at `request_s`."""
    from hastune.fidelity.run import simulate

    fe = replace(terms.frontend, request_s=request_s)
    return simulate(case, prof, replace(terms, frontend=fe), rec).ttft_ms


def test_the_shipped_terms_are_not_on_the_edge():
    """TensorRT-LLM's H200 rows (clients together, lockstep: where the edge showed) with the
    shipped terms: the front end nudged by a microsecond either way moves no simulated TTFT by
    more than 1%, where setting it to exactly 0 moves some by far more (the edge exists)."""
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity.rows import read_cases
    from hastune.fidelity.run import recipe_for

    assert CSV.is_file(), f"{CSV}: the calibration file hastune ships is missing"
    cases = [c for c in read_cases(CSV) if (c.engine, c.gpu) == ("trtllm", "h200-141gb")]
    assert len(cases) >= 40
    prof = None
    moved_by_zero = 0
    for c in cases:
        rec = recipe_for(c, {}, CSV)
        if prof is None:
            prof = resolve_profile(rec, quiet=True)[0]
            sched = et.scheduler_defaults(c.engine, prof.memory.gpu_bytes / 2**30, c.gpu)
            terms = F.shipped(c.engine, c.gpu, sched, c)
        fe = terms.frontend.request_s
        base = _ttft(c, prof, terms, rec, fe)
        for v in (fe + 1e-6, max(fe - 1e-6, F.FRONTEND_MIN_S / 2)):
            assert _ttft(c, prof, terms, rec, v) == pytest.approx(base, rel=0.01), (c.id, v)
        moved_by_zero += abs(_ttft(c, prof, terms, rec, 0.0) / base - 1) > 0.05
    assert moved_by_zero > 0

"""A recipe's closed loop of clients with their own jitter (SGLang's front-end waits vary:
hastune.engine_terms.jittered) starts them together, as benchmark tools do, and runs until its
steady mean is known (hastune.sim.warmup.known, doubling up to EXTEND times), so its mean TTFT
does not depend on the rounds asked (issue 13: < 5% between 40 and 400 rounds per client).
Rows of the calibration file, each with the control that fails without the change."""

from __future__ import annotations

from pathlib import Path

import pytest

from hastune import engine_terms as et
from hastune.data import SILICON_LLAMA31
from hastune.sim import warmup

ROOT = Path(__file__).resolve().parents[2]
CSV = SILICON_LLAMA31


def _case(tp: int, isl: int, osl: int, clients: int):
    from hastune.fidelity.rows import read_cases

    if not CSV.is_file():
        pytest.fail(f"{CSV} is missing: the calibration data ships in hastune/data/calibration")
    return next(c for c in read_cases(CSV) if (c.engine, c.gpu, c.tp, c.isl, c.osl, c.clients)
                == ("sglang", "h200-141gb", tp, isl, osl, clients))


def _run(case, rounds: int, clients: str | None = None):
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity import run as fr

    rec = fr.recipe_for(case, {}, CSV, rounds, exact=True)
    prof = resolve_profile(rec, quiet=True)[0]
    t = et.terms_for(case.engine, case.gpu, prof.memory.gpu_bytes / 2**30)
    assert fr.recipe_clients(t) == "together-after-two"  # SGLang's waits vary
    return fr.simulate(case, prof, t, rec, steady=True, clients=clients or fr.recipe_clients(t))


def test_clients_started_together_are_run_until_their_mean_is_known(monkeypatch):
    """TP 1, 64 clients of 8000 + 1000 tokens, started together: they peel apart over
    hundreds of rounds (mean TTFT 715 ms over the first 100, 440 from round 800 on), and a
    40-round run is known after 2,560 rounds; the 40- and 400-round means agree within 5%.
    With the cap at 16 times and a run taken on its own standard error, the 40-round run
    stopped unsettled at 640 rounds, 13% over the 400-round one."""
    case = _case(1, 8000, 1000, 64)
    a, b = _run(case, 40), _run(case, 400)
    assert abs(b.ttft_ms / a.ttft_ms - 1) < 0.05 and a.settled and b.settled
    monkeypatch.setattr(warmup, "EXTEND", 16)
    monkeypatch.setattr(warmup, "known", lambda run, clients, before:
                        warmup.settled(run, clients))
    a1, b1 = _run(case, 40), _run(case, 400)
    assert a1.ttft_ms / b1.ttft_ms - 1 > 0.08 and not a1.settled  # the control


def test_a_short_run_that_looks_settled_must_agree_with_its_first_half(monkeypatch):
    """TP 4, 48 clients of 8000 + 100 tokens, started at random over the loaded cycle: at 80
    rounds MSER cuts 37, and the 43 left have a standard error of 1.4% (under PRECISION) on a
    mean 7% under the long run's, a swing of clumped clients that a few dozen rounds see
    once. Taken alone (`settled`), the 40-round run stops there; made to agree with the run
    half its length (`known`), it runs on and the two lengths agree within 5%."""
    case = _case(4, 8000, 100, 48)
    a, b = _run(case, 40, "random"), _run(case, 400, "random")
    assert abs(b.ttft_ms / a.ttft_ms - 1) < 0.05
    monkeypatch.setattr(warmup, "known", lambda run, clients, before:
                        warmup.settled(run, clients))
    a1, b1 = _run(case, 40, "random"), _run(case, 400, "random")
    assert abs(b1.ttft_ms / a1.ttft_ms - 1) > 0.05  # the control: one run's own error


def test_kv_bound_clients_keep_how_they_started():
    """TP 4, 512 clients of 2000 + 1000 tokens (KV-bound): started together they hold about
    twice the TTFT of clients started at random or spread over the loaded cycle, each a
    steady state (known within 40 rounds), and the measured run (clients started together by
    the benchmark tool) is near the first — why a recipe starts jittered clients together."""
    case = _case(4, 2000, 1000, 512)
    together, rand, spread = (_run(case, 20, m) for m in
                              ("together-after-two", "random", "spread"))
    assert together.settled and rand.settled and spread.settled
    assert together.ttft_ms > 1.6 * max(rand.ttft_ms, spread.ttft_ms)
    assert abs(together.ttft_ms / case.ttft_ms - 1) < abs(rand.ttft_ms / case.ttft_ms - 1)

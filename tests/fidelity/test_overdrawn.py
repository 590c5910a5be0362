"""A measured run that needs more prefill than its kernels can do (hastune.fidelity.run.overdrawn):
its clients' completions (Little's law) × the least a prompt's prefill costs on the kernels,
past one second a second per prefilling instance.

- Sound: on generated runs (engine, client, TP, concurrency, lengths), a simulation on the
  kernels — which prefills every prompt in full — is never flagged when its own mean TTFT and
  TPOT are taken as the measurement.
- Complete: the same run measured `f` times faster, with f past the bound's margin, is flagged,
  and the reason names its clients and prompt length; attention-DP ranks and prefill workers
  each take their share.
- `--shipped` and the fit leave a flagged row out with why (test_shipped's SPOIL "overdrawn").
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.data import SILICON_LLAMA31
from hastune.evaluators.profile import resolve_profile
from hastune.fidelity.harness import harness
from hastune.fidelity.rows import Case, Pools
from hastune.fidelity.run import PREFILL_BUSY_MAX, overdrawn, prefill_of, recipe_for, simulate
from hastune.fidelity.shipped import cause

MODEL = "meta-llama/Llama-3.1-70B"


def _case(engine: str, isl: int, osl: int, clients: int, tp: int, dated: bool) -> Case:
    rid = (f"2026_04_06_llama_3_1_70b_h200_sxm_{engine}_fp8_agg_{isl}x{osl}_c{clients}_tp{tp}"
           if dated else f"meta_llama_{engine}_{isl}x{osl}_c{clients}_tp{tp}")
    return Case(rid, engine, "", MODEL, "h200-141gb", "fp8", isl, osl, clients, tp, 1.0, 1.0, 2)


@cache
def _profile(engine: str, kv: str):
    c = _case(engine, 1024, 128, 4, 1, kv == "fp8")
    return resolve_profile(recipe_for(c, {}, SILICON_LLAMA31), quiet=True)[0]


def _prof(c: Case):
    return _profile(c.engine, "fp8" if harness(c).kv_fp8 else "bf16")


def _mean(c: Case) -> float:
    r = harness(c).range_ratio
    return ((int(c.isl * r) if r < 1 else c.isl) + c.isl) / 2


def _busy(c: Case) -> float:
    """overdrawn's figure, recomputed: requests/s × the least prefill per prompt / instances."""
    pre, n = prefill_of(c, _prof(c))
    r = harness(c).range_ratio
    lo = int(c.isl * r) if r < 1 else c.isl
    mean, sq = (lo + c.isl) / 2, (lo * lo + lo * c.isl + c.isl ** 2) / 3
    rate = c.clients / ((c.ttft_ms + (c.osl - 1) * c.tpot_ms) / 1e3)
    return rate * (pre.prefill.per_token_s * mean + pre.prefill.per_token_sq_s * sq) / n


cases = st.builds(_case, st.sampled_from(["vllm", "trtllm", "sglang"]),
                  st.sampled_from([512, 2048, 8192]), st.sampled_from([2, 64, 512]),
                  st.sampled_from([4, 16, 64, 128]), st.sampled_from([1, 2, 4, 8]),
                  st.booleans())


@settings(max_examples=14, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(c=cases)
def test_a_simulation_of_full_prefills_is_never_overdrawn(c):
    prof = _prof(c)
    s = simulate(c, prof, None, recipe_for(c, {}, SILICON_LLAMA31, rounds=6))
    as_measured = replace(c, ttft_ms=s.ttft_ms, tpot_ms=s.tpot_ms)
    assert overdrawn(as_measured, prof) is None, (c.id, _busy(as_measured))


@settings(max_examples=40, deadline=None)
@given(c=cases, ttft=st.floats(1.0, 5e4), tpot=st.floats(0.5, 200.0),
       f=st.floats(1.001, 50.0))
def test_a_run_past_the_bound_is_flagged_and_says_why(c, ttft, tpot, f):
    c = replace(c, ttft_ms=ttft, tpot_ms=tpot)
    busy = _busy(c)
    why = overdrawn(c, _prof(c))
    assert (why is not None) == (busy > PREFILL_BUSY_MAX)
    # the same run measured so much faster that it needs f × the bound: flagged, saying so
    k = busy / (f * PREFILL_BUSY_MAX)
    fast = replace(c, ttft_ms=ttft * k, tpot_ms=tpot * k)
    why = overdrawn(fast, _prof(c))
    assert why is not None
    assert f"{c.clients} clients" in why and "cannot have prefilled every prompt" in why
    assert f"a {_mean(c):.0f}-token prompt" in why
    # counted under one cause, whatever its figures (`--shipped`'s unsupported_by)
    assert cause(why) == "measured: faster than the kernels prefill its prompts"


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_instances_that_prefill_side_by_side_each_take_their_share(workers):
    """Prefill workers of a disaggregated run split the rate: k workers of the same TP bear
    1/k of one's busy time each, so k × the rate is flagged exactly when the rate is on one."""
    one = Case("x", "vllm", "", MODEL, "h200-141gb", "fp8", 4096, 256, 64, 8, 1.0, 1.0, 2,
               pools=Pools(1, 2, False, 1, 2, False))
    many = replace(one, clients=64 * workers, pools=Pools(workers, 2, False, 1, 2, False))
    prof = _profile("vllm", "bf16")
    assert prefill_of(many, prof)[1] == workers * prefill_of(one, prof)[1]
    for ttft in (5.0, 50.0, 500.0):
        a, b = replace(one, ttft_ms=ttft), replace(many, ttft_ms=ttft)
        assert (overdrawn(a, prof) is None) == (overdrawn(b, prof) is None)


def test_the_fit_leaves_a_flagged_row_out_or_refuses_it():
    """The fit (`--write`, the scorecard, `--cv`) never fits on a flagged row: left out with
    why where rows may be (`--cv`: strict=False), refused naming its line otherwise."""
    from hastune.errors import InputError
    from hastune.fidelity.rows import read_cases
    from hastune.fidelity.score import Fitter

    cases = read_cases(SILICON_LLAMA31)[:6]
    fast = replace(cases[2], ttft_ms=0.01, tpot_ms=1e-4)
    mixed = [*cases[:2], fast, *cases[3:]]
    f = Fitter(mixed, {}, SILICON_LLAMA31, strict=False)
    assert [c.line for c in f.cases] == [c.line for c in mixed if c is not fast]
    assert "cannot have prefilled every prompt" in f.unsupported[fast.line]
    with pytest.raises(InputError) as exc:
        Fitter(mixed, {}, SILICON_LLAMA31)
    assert f"line {fast.line}" in exc.value.field

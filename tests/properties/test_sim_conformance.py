"""Simulator conformance, over the architecture registry: every registered architecture's
simulator, on generated recipes and a configuration drawn from a small space, is deterministic
for a seed, accounts for every request (completed or rejected), reports utilisations in
[0, 1], keeps a defined order for same-time events (a burst of simultaneous arrivals runs the
same twice, on the real event core, which refuses time running backwards), and its goodput does
not rise when the cluster's links slow down or the SLOs tighten.

A new architecture in hastune/archs/ is tested here with no change but one line in SPACES of
tests/generated.py (its small search space)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune import archs
from hastune.evaluators.sim import Evaluation
from hastune.sim.stoprule import StopRule
from tests.generated import SPACES, random_recipe, space

QUICK = {"min_span": 5.0, "min_requests": 300, "extend": 2.0, "max_probes": 30}


def test_every_registered_architecture_is_covered():
    assert set(SPACES) == set(archs.NAMES), "add a small space to tests/generated.SPACES"


def _setup(arch: str, seed: int):
    rec = random_recipe(seed, (arch,), requests=(150, 300), evaluator=QUICK)
    ev = Evaluation(rec)
    cfgs = [c for c in space(arch).configs(rec.cluster.gpus) if ev.runnable(c)]
    if not cfgs:
        return None
    cfg = cfgs[int(np.random.default_rng(seed).integers(len(cfgs)))]
    return rec, ev, cfg


def _fingerprint(run) -> tuple:
    """Everything a run reports, exactly (NaN-safe)."""
    return (run.ttft.tobytes(), run.tpot.tobytes(), run.completed, run.rejected, run.events,
            run.sim_time_s, repr(sorted(run.utilisation.items())), repr(sorted(run.extra.items())))


def _check_run(run, n: int) -> None:
    assert run.completed + run.rejected == n, (
        f"{n} requests, {run.completed} completed + {run.rejected} rejected")
    for k, u in run.utilisation.items():
        assert -1e-9 <= u <= 1 + 1e-9, f"utilisation {k} = {u}"


@pytest.mark.parametrize("arch", archs.NAMES)
@settings(max_examples=5)
@given(seed=st.integers(0, 2**31 - 1), load=st.floats(0.3, 1.5))
def test_runs_are_deterministic_complete_and_bounded(arch, seed, load):
    got = _setup(arch, seed)
    if got is None:
        return
    rec, ev, cfg = got
    rate = load * ev.start_rate(cfg)
    reqs = ev.requests
    runs = []
    for _ in range(2):
        sim = ev.simulator(cfg)
        sim.stop_rule = None  # the whole run: every request must be accounted for
        runs.append(sim.run(reqs, rate))
    _check_run(runs[0], len(reqs))
    assert _fingerprint(runs[0]) == _fingerprint(runs[1]), "two runs of one seed differ"


@pytest.mark.parametrize("arch", archs.NAMES)
@settings(max_examples=3)
@given(seed=st.integers(0, 2**31 - 1), every=st.integers(2, 6))
def test_simultaneous_arrivals_run_in_a_defined_order(arch, seed, every):
    """Arrivals in groups of `every` at one instant (zero gaps): same-time events at each
    step, taken in the core's defined order — so the run is complete and repeats exactly."""
    got = _setup(arch, seed)
    if got is None:
        return
    rec, ev, cfg = got
    reqs = ev.requests
    i = np.arange(len(reqs))
    burst = dataclasses.replace(reqs, gaps=np.where(i % every == 0, reqs.gaps * every, 0.0))
    rate = 0.5 * ev.start_rate(cfg)
    runs = []
    for _ in range(2):
        sim = ev.simulator(cfg)
        sim.stop_rule = None
        runs.append(sim.run(burst, rate))
    _check_run(runs[0], len(burst))
    assert _fingerprint(runs[0]) == _fingerprint(runs[1]), "same-time events ran differently"


@pytest.mark.parametrize("arch", archs.NAMES)
@settings(max_examples=4)
@given(seed=st.integers(0, 2**31 - 1), load=st.floats(0.3, 1.5), share=st.floats(0.2, 0.8),
       settle=st.booleans())
def test_a_continued_probe_is_the_head_of_one_long_run(arch, seed, load, share, settle):
    """A probe that may be lengthened is one run, continued (StopRule.windows): when its first
    window is settled it ends there, and its requests are exactly the first ones of the same
    run left to go on — the requests after them change nothing already done; when no window
    settles it is that whole run. Every request of the window has left (completed or
    rejected). The stop rule here never fires (SLOs no run misses)."""
    got = _setup(arch, seed)
    if got is None or ev_closed(got[1]):
        return
    rec, ev, cfg = got
    rate = load * ev.start_rate(cfg)
    reqs = ev.requests
    w = max(1, int(share * len(reqs)))
    never = StopRule(1e12, 1e12, 0.9, False, rec.workload.warmup)
    runs = []
    for rule in (None, dataclasses.replace(never, windows=(w,), judge=lambda run: settle)):
        sim = ev.simulator(cfg)
        sim.stop_rule = rule
        runs.append(sim.run(reqs, rate))
    whole, part = runs
    if not settle or "window" not in part.extra:
        assert _fingerprint(part)[:2] == _fingerprint(whole)[:2]
        # a window is judged at checks between arrivals: missed only when its last request
        # left after all but the last few arrivals (one check's worth)
        fin = whole.finish[:w]
        left = float(np.max(np.where(np.isfinite(fin), fin, whole.arrival[:w])))
        assert not settle or (whole.arrival > left).sum() <= max(16, w // 64) + 1
        return
    assert part.ttft.size == w and part.extra["window"] == w
    assert part.completed + part.rejected == w
    assert np.array_equal(part.ttft, whole.ttft[:w], equal_nan=True)
    assert np.array_equal(part.tpot, whole.tpot[:w], equal_nan=True)


def ev_closed(ev) -> bool:
    return ev.closed


def _slower_links(rec, factor: float):
    c = rec.cluster
    slow = {k: getattr(c, k).model_copy(update={
        "bandwidth_GBps": getattr(c, k).bandwidth_GBps / factor,
        "latency_us": getattr(c, k).latency_us * factor}) for k in ("intra_node", "inter_node")}
    return rec.model_copy(update={"cluster": c.model_copy(update=slow)})


def _tighter_slo(rec, factor: float):
    s = rec.slo
    return rec.model_copy(update={"slo": s.model_copy(update={"ttft_s": s.ttft_s * factor,
                                                              "tpot_s": s.tpot_s * factor})})


@pytest.mark.parametrize("arch", archs.NAMES)
@settings(max_examples=3)
@given(seed=st.integers(0, 2**31 - 1), factor=st.floats(2.0, 20.0),
       tighten=st.floats(0.5, 0.9))
def test_goodput_falls_as_links_slow_or_slos_tighten(arch, seed, factor, tighten):
    got = _setup(arch, seed)
    if got is None:
        return
    rec, ev, cfg = got
    tol = rec.evaluator.tolerance
    base = ev.goodput(cfg).goodput_rps
    for worse, what in ((_slower_links(rec, factor), f"links {factor:.1f}× slower"),
                        (_tighter_slo(rec, tighten), f"SLOs × {tighten:.2f}")):
        g = Evaluation(worse).goodput(cfg).goodput_rps
        # one grid step either way is the search's own resolution
        assert g <= base * (1 + tol) ** 2 + 1e-9, f"{what}: goodput rose {base:.4g} → {g:.4g}"

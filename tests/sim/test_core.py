"""The compiled core (hastune.sim._core, issue 34) against the Python reference path
(hastune/sim/epd.py's, fudg.py's and nodg/paged.py's handlers with the worker and policy
classes): the same simulation, so on generated recipes, configurations, loads, same-time
bursts and paged pools that preempt, both give exactly the same run — every request's TTFT
and TPOT to the last bit, the rejected, the events, the utilisations and the extras — and
the same goodput search, probe for probe, with the stop rule and the continued probes'
windows on. EPD runs (epd, epd-static), open-loop fudg runs and open-loop nodg runs without
batch waiting (paged; reserved KV as the event-by-event run, `Run.ahead` off: the default
run but for its events) take the core."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.cluster import Cluster
from hastune.config import parse_config
from hastune.engine_terms import FrontEnd
from hastune.evaluators.sim import Evaluation
from hastune.model_ref import Engine
from hastune.recipe import load_recipe
from hastune.sim import compiled
from hastune.sim.epd import EPDSimulator
from hastune.sim.fudg import FuDGSimulator
from hastune.sim.nodg import NoDGSimulator
from hastune.sim.nodg.run import Run as NoDGRun
from hastune.sim.stoprule import StopRule
from tests.generated import EPD_FAMILY, random_recipe, space
from tests.sim.paged_kv import profile_with_kv, random_requests

ROOT = Path(__file__).resolve().parents[2]
QUICK = {"min_span": 5.0, "min_requests": 300, "extend": 2.0, "max_probes": 30}
def SETTINGS(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_the_compiled_core_is_built():
    """The README's install builds it (setup.py; a C compiler is needed): without it EPD runs
    take the reference path, several times slower."""
    assert compiled.core is not None, (
        "hastune/sim/_core.pyx is not built: pip install -e . (needs a C compiler), or "
        "python setup.py build_ext --inplace")


def test_a_core_built_from_another_source_is_not_used(monkeypatch, tmp_path):
    """A checkout whose _core.pyx changed since its last build (a pull without a reinstall)
    runs the Python path, with a warning that says how to rebuild, rather than a stale core;
    the one built from the _core.pyx beside it is used."""
    assert compiled.core is not None and compiled.core.BUILT_FROM  # built by setup.py
    assert compiled._load() is compiled.core
    changed = tmp_path / "_core.pyx"
    changed.write_bytes(compiled.SOURCE.read_bytes() + b"\n# changed\n")
    monkeypatch.setattr(compiled, "SOURCE", changed)
    with pytest.warns(RuntimeWarning, match="pip install -e ."):
        assert compiled._load() is None


def test_the_environment_chooses_the_reference(monkeypatch):
    monkeypatch.setenv("HASTUNE_SIM_CORE", "python")
    assert compiled.core_name() == "python"
    assert compiled.core_name("compiled") == "compiled"  # a simulator's own choice first
    monkeypatch.delenv("HASTUNE_SIM_CORE")
    assert compiled.core_name() == "compiled"
    assert compiled.core_name("python") == "python"


def fingerprint(run) -> tuple:
    """Everything a run reports, exactly (NaN-safe), but its wall time."""
    return (run.ttft.tobytes(), run.tpot.tobytes(), run.completed, run.rejected, run.events,
            run.sim_time_s, run.warmup, run.arrival.tobytes(), run.finish.tobytes(),
            repr(sorted(run.utilisation.items())), repr(sorted(run.extra.items())))


def both(make, reqs, rate: float) -> tuple:
    """The run of a fresh simulator from `make()` on each path."""
    out = []
    for core in ("python", "compiled"):
        sim = make()
        sim.core = core
        out.append(sim.run(reqs, rate))
    return tuple(out)


KEEP = object()  # the evaluator's own stop rule


def same_runs(ev, cfg, every: int, stop: bool, load: float) -> None:
    """Both paths run `ev`'s requests, arriving in same-time groups of `every`, on `cfg` at
    `load` × its start rate (with the evaluator's stop rule, or none): the same run."""
    reqs = ev.requests
    if every > 1:
        i = np.arange(len(reqs))
        reqs = dataclasses.replace(reqs, gaps=np.where(i % every == 0, reqs.gaps * every, 0.0))
    ref, fast = both(sims(ev, cfg, KEEP if stop else None), reqs, load * ev.start_rate(cfg))
    assert fingerprint(fast) == fingerprint(ref)


def sims(ev, cfg, rule=KEEP):
    """A factory of `ev`'s simulator of `cfg`, with stop rule `rule` (KEEP: the evaluator's)."""
    def make():
        sim = ev.simulator(cfg)
        if rule is not KEEP:
            sim.stop_rule = rule
        return sim
    return make


def _setup(seed: int):
    rec = random_recipe(seed, EPD_FAMILY, requests=(150, 400), evaluator=QUICK)
    ev = Evaluation(rec)
    cfgs = [c for c in space(rec.architecture).configs(rec.cluster.gpus) if ev.runnable(c)]
    if not cfgs:
        return None
    cfg = cfgs[int(np.random.default_rng(seed).integers(len(cfgs)))]
    return rec, ev, cfg


@SETTINGS(100)
@given(seed=st.integers(0, 2**31 - 1), load=st.floats(0.2, 2.0), every=st.integers(1, 5),
       stop=st.booleans(), knob=st.sampled_from([None, "sm_split", "max_gap_ms"]))
def test_compiled_runs_are_the_reference_runs(seed, load, every, stop, knob):
    """Generated recipes (epd and epd-static; text and multimodal mixes, Poisson and Gamma
    arrivals, every profile of tests/generated.py with its engine terms, paged KV with vLLM's),
    a configuration of their small space (EAServe's with a fixed SM split or a capped batch
    gap), light to overloaded, arrivals in same-time groups of `every`, with the evaluator's
    stop rule (it ends a run that has failed) or without."""
    got = _setup(seed)
    if got is None:
        return
    rec, ev, cfg = got
    if knob is not None and cfg.architecture == "epd":
        cfg = cfg.model_copy(update={knob: 0.4 if knob == "sm_split" else 5.0})
    same_runs(ev, cfg, every, stop, load)


@SETTINGS(40)
@given(seed=st.integers(0, 2**31 - 1), kv=st.integers(1_500, 40_000), d=st.integers(1, 3),
       load=st.floats(0.5, 3.0), paged=st.booleans(), s=st.sampled_from([0.0, 0.5, 1.0]),
       out_max=st.integers(3, 600))
def test_paged_pools_that_preempt_run_the_same(seed, kv, d, load, paged, s, out_max):
    """Decode pools with little KV (paged: preempting and recomputing; reserved: waiting;
    both rejecting what can never fit), TP 2 decode, a remote prefill pool and a co-resident
    one (s)."""
    ref, fast = both(_paged_case(paged, kv, d, s), random_requests(300, seed, out_max), load)
    assert fingerprint(fast) == fingerprint(ref)


def _paged_case(paged: bool, kv: int, d: int, s: float):
    prof = profile_with_kv(paged, kv)
    cfg = parse_config({"architecture": "epd", "n_E": 1, "n_P": 1, "n_D": d, "tp_D": 2,
                        "B": 4, "s": s})
    cluster = Cluster(gpu="a100-80gb", gpus=8)
    return lambda: EPDSimulator(prof, cluster, cfg, warmup=0.0)


def test_the_small_pools_preempt_and_reject():
    """What the test above draws reaches the paths it is there for: a paged pool of 2,000
    tokens preempts and recomputes, and both kinds reject requests that can never fit."""
    reqs = random_requests(300, 1, 600)
    for paged in (True, False):
        ref, fast = both(_paged_case(paged, 2_000, 2, 0.5), reqs, 3.0)
        assert fingerprint(fast) == fingerprint(ref)
        assert ref.rejected > 0
        assert not paged or ref.extra["preemptions"] > 0


@SETTINGS(20)
@given(seed=st.integers(0, 2**31 - 1), share=st.floats(0.2, 0.8), settle=st.booleans())
def test_windows_of_a_continued_probe_are_the_same(seed, share, settle):
    """A probe judged at a window (StopRule.windows): the core calls the loop's checkpoint at
    the same arrival counts, so it ends at the same window with the same requests."""
    got = _setup(seed)
    if got is None:
        return
    rec, ev, cfg = got
    w = max(1, int(share * len(ev.requests)))
    rule = dataclasses.replace(StopRule(1e12, 1e12, 0.9, False, rec.workload.warmup),
                               windows=(w,), judge=lambda run: settle)

    ref, fast = both(sims(ev, cfg, rule), ev.requests, 0.8 * ev.start_rate(cfg))
    assert fingerprint(fast) == fingerprint(ref)


def _probes(res) -> list:
    return [(p.rate, p.ttft_p, p.tpot_p, p.passed, p.requests, p.phase,
             None if p.stability is None else p.stability.reason) for p in res.probes]


@pytest.mark.parametrize("recipe,config", [
    ("examples/audio-ultravox-8xa100.yaml", "examples/configs/epd-2-2-4.yaml"),
    ("examples/image-llava-8xa100.yaml", "examples/configs/epd-static-2-2-4.yaml"),
    ("examples/audio-ultravox-8xa100.yaml",
     {"architecture": "fudg", "prefill_instances": 3, "decode_instances": 5}),
    ("examples/audio-ultravox-8xa100.yaml",
     {"architecture": "nodg", "tp": 1, "replicas": 8, "chunk_tokens": 512}),
])
def test_a_goodput_search_is_the_same_probe_for_probe(monkeypatch, recipe, config):
    """The whole steady-state search (scouts, continued full probes, the stop rule) on a
    shipped recipe, with a short workload: the same probes, the same goodput (EPD configs
    of examples/configs, a fudg deployment, and sim_speed's nodg one: paged, with audio
    encoded inline)."""
    from hastune.config import load_config

    rec = load_recipe(ROOT / recipe)
    rec = rec.model_copy(update={"evaluator": rec.evaluator.model_copy(update=QUICK)})
    cfg = parse_config(config) if isinstance(config, dict) else load_config(ROOT / config)
    got = []
    for core in ("python", "compiled"):
        monkeypatch.setenv("HASTUNE_SIM_CORE", core)
        res = Evaluation(rec, requests=600).goodput(cfg)
        got.append((res.goodput_rps, _probes(res)))
    assert got[1] == got[0]


def test_pools_on_two_gpu_types_run_the_same():
    """The mixed-GPU example: pools on L40S and H100 nodes (the network remapped to where each
    pool's GPUs sit, hastune.sim.network.Remapped)."""
    rec = load_recipe(ROOT / "examples/mixed-l40s-h100.yaml")
    ev = Evaluation(rec, requests=400)
    cfg = parse_config({"architecture": "epd", "n_E": 2, "n_P": 1, "n_D": 2, "tp_E": 2,
                        "tp_P": 2, "tp_D": 1, "B": 4, "s": 0.5, "gpu_E": "l40s-48gb",
                        "gpu_P": "l40s-48gb", "gpu_D": "h100-80gb"})
    assert ev.runnable(cfg)

    ref, fast = both(sims(ev, cfg, None), ev.requests, 0.7 * ev.start_rate(cfg))
    assert fingerprint(fast) == fingerprint(ref)


# -- fudg -----------------------------------------------------------------------------------

@SETTINGS(60)
@given(seed=st.integers(0, 2**31 - 1), load=st.floats(0.2, 2.0), every=st.integers(1, 5),
       stop=st.booleans(), tp=st.sampled_from([(1, 1), (2, 1), (1, 2), (2, 2)]),
       placement=st.sampled_from(["interleaved", "grouped"]), gpn=st.sampled_from([1, 2, 8]),
       counts=st.tuples(st.integers(1, 3), st.integers(1, 3)))
def test_compiled_fudg_runs_are_the_reference_runs(seed, load, every, stop, tp, placement,
                                                    gpn, counts):
    """Generated fudg recipes (text and multimodal: the encode inline in prefill; Poisson and
    Gamma arrivals; every profile with its engine terms, paged KV with vLLM's), prefill and
    decode pools of 1–3 instances at TP 1 or 2 (a KV cache sent shard by shard inside a node,
    whole over the NICs between nodes), both placements, 1, 2 or 8 GPUs per node, light to
    overloaded, same-time bursts, with the stop rule or without."""
    rec = random_recipe(seed, ("fudg",), requests=(150, 400), evaluator=QUICK)
    cfg = parse_config({"architecture": "fudg", "prefill_instances": counts[0],
                        "prefill_tp": tp[0], "decode_instances": counts[1], "decode_tp": tp[1],
                        "placement": placement})
    rec = rec.model_copy(update={"cluster": rec.cluster.model_copy(
        update={"gpus": cfg.gpus, "gpus_per_node": gpn})})
    ev = Evaluation(rec)
    if not ev.runnable(cfg):
        return
    same_runs(ev, cfg, every, stop, load)


def _fudg_paged_case(paged: bool, kv: int, d: int):
    prof = profile_with_kv(paged, kv)
    cfg = parse_config({"architecture": "fudg", "prefill_instances": 1, "prefill_tp": 2,
                        "decode_instances": d, "decode_tp": 2})
    cluster = Cluster(gpu="a100-80gb", gpus=8)
    return lambda: FuDGSimulator(prof, cluster, cfg, warmup=0.0)


@SETTINGS(30)
@given(seed=st.integers(0, 2**31 - 1), kv=st.integers(1_500, 40_000), d=st.integers(1, 3),
       load=st.floats(0.5, 3.0), paged=st.booleans(), out_max=st.integers(3, 600))
def test_fudg_pools_that_preempt_run_the_same(seed, kv, d, load, paged, out_max):
    """Instances with little KV: prefill batches that wait for transfers to free KV, decode
    pools that preempt and recompute (paged) or wait (reserved), requests rejected."""
    ref, fast = both(_fudg_paged_case(paged, kv, d), random_requests(300, seed, out_max), load)
    assert fingerprint(fast) == fingerprint(ref)


def test_the_small_fudg_pools_preempt_and_reject():
    """What the test above draws reaches the paths it is there for."""
    reqs = random_requests(300, 1, 600)
    for paged in (True, False):
        ref, fast = both(_fudg_paged_case(paged, 2_000, 2), reqs, 3.0)
        assert fingerprint(fast) == fingerprint(ref)
        assert ref.rejected > 0
        assert not paged or ref.extra["preemptions"] > 0


def test_closed_loop_fudg_runs_take_the_python_path(monkeypatch):
    """Benchmark clients (closed loop, fidelity's disaggregated rows) are not the core's: a
    run with think_s set never calls it; an open-loop one does."""
    from hastune.sim import fudg

    real, called = fudg.core, []

    def run_fudg(run):
        called.append(run)
        real.run_fudg(run)  # type: ignore[union-attr]

    monkeypatch.setattr(fudg, "core", type("C", (), {"run_fudg": staticmethod(run_fudg)}))
    sim = _fudg_paged_case(False, 40_000, 1)()
    sim.core = "compiled"
    closed = dataclasses.replace(random_requests(50, 3, 20), think_s=0.0)
    assert sim.run(closed, 4).completed > 0
    assert called == []
    assert sim.run(random_requests(50, 3, 20), 1.0).completed > 0
    assert len(called) == 1


# -- nodg -----------------------------------------------------------------------------------

@SETTINGS(60)
@given(seed=st.integers(0, 2**31 - 1), load=st.floats(0.2, 2.0), every=st.integers(1, 5),
       stop=st.booleans(), engine=st.sampled_from(["vllm", "sglang"]),
       par=st.sampled_from([(1, 1), (2, 1), (1, 2)]), gpn=st.sampled_from([1, 8]),
       replicas=st.integers(1, 3), chunk=st.sampled_from([None, 256, 512]))
def test_compiled_nodg_runs_are_the_reference_runs(seed, load, every, stop, engine, par, gpn,
                                                   replicas, chunk):
    """Generated nodg recipes (text and multimodal: the encode inline in the iteration that
    starts a prompt; Poisson and Gamma arrivals) with vLLM's or SGLang's engine terms (paged
    KV; SGLang's front end passes every token on at a cost: Delivery), 1–3 replicas at TP 2
    or PP 2 (with one GPU per node, the stages hop over the NIC), chunked or not, light to
    overloaded, same-time bursts, with the stop rule or without."""
    rec = random_recipe(seed, ("nodg",), requests=(150, 400), evaluator=QUICK)
    cfg = parse_config({"architecture": "nodg", "tp": par[0], "pp": par[1],
                        "replicas": replicas, "chunk_tokens": chunk})
    cluster = rec.cluster.model_copy(update={"gpus": cfg.gpus, "gpus_per_node": gpn})
    rec = rec.model_copy(update={"engine": Engine(name=engine), "cluster": cluster})
    ev = Evaluation(rec)
    if not ev.runnable(cfg):
        return
    assert ev.simulator(cfg).compiled(ev.requests)  # paged, open loop: the core's
    same_runs(ev, cfg, every, stop, load)


def _nodg_paged_case(kv: int, replicas: int, chunk: int | None, paged: bool = True):
    prof = profile_with_kv(paged, kv)
    cfg = parse_config({"architecture": "nodg", "tp": 2, "replicas": replicas,
                        "chunk_tokens": chunk})
    cluster = Cluster(gpu="a100-80gb", gpus=8)
    return lambda: NoDGSimulator(prof, cluster, cfg, warmup=0.0)


def _delivered(reqs):
    """reqs through a front end that passes every token on at SGLang's cost (Delivery)."""
    return dataclasses.replace(reqs, frontend=FrontEnd(per_output_token_s=50e-6,
                                                       per_made_token_s=15e-9))


@SETTINGS(30)
@given(seed=st.integers(0, 2**31 - 1), kv=st.integers(800, 40_000), r=st.integers(1, 3),
       load=st.floats(0.5, 3.0), out_max=st.integers(3, 600),
       chunk=st.sampled_from([None, 128, 512]), deliver=st.booleans())
def test_nodg_replicas_that_preempt_run_the_same(seed, kv, r, load, out_max, chunk, deliver):
    """Replicas with little KV: preempted requests recompute their prompt and the tokens
    they had made (their first token keeps its time), requests that can never fit are
    rejected; with and without a front end that passes tokens on at a cost."""
    reqs = random_requests(300, seed, out_max)
    if deliver:
        reqs = _delivered(reqs)
    ref, fast = both(_nodg_paged_case(kv, r, chunk), reqs, load)
    assert fingerprint(fast) == fingerprint(ref)


def test_the_small_nodg_replicas_preempt_and_reject():
    """What the test above draws reaches the paths it is there for."""
    reqs = random_requests(300, 1, 600)
    for chunk in (None, 512):
        for rq in (reqs, _delivered(reqs)):
            ref, fast = both(_nodg_paged_case(1_000, 2, chunk), rq, 3.0)
            assert fingerprint(fast) == fingerprint(ref)
            assert ref.rejected > 0 and ref.extra["preemptions"] > 0


def _reserved_runs(make, reqs, rate: float) -> tuple:
    """A reserved-KV nodg run of a fresh simulator from `make()`: compiled, Python event by
    event (`Run.ahead` off) and Python with its shortcuts (the default). The compiled run is
    the event-by-event one bit for bit, events included, and the default one but for its
    (fewer) events."""
    out = []
    for core, ahead in (("compiled", True), ("python", False), ("python", True)):
        sim = make()
        sim.core = core
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(NoDGRun, "ahead", ahead)
            out.append(sim.run(reqs, rate))
    fast, slow, dflt = out
    f = fingerprint(fast)
    assert f == fingerprint(slow)
    assert f[:4] + f[5:] == (lambda g: g[:4] + g[5:])(fingerprint(dflt))  # (4: events)
    return fast, slow, dflt


@SETTINGS(60)
@given(seed=st.integers(0, 2**31 - 1), load=st.floats(0.2, 3.0), every=st.integers(1, 5),
       stop=st.booleans(), terms=st.booleans(), par=st.sampled_from([(1, 1), (2, 1), (1, 2)]),
       gpn=st.sampled_from([1, 8]), replicas=st.integers(1, 3),
       chunk=st.sampled_from([None, 256, 512]))
def test_compiled_reserved_nodg_runs_are_the_event_by_event_runs(seed, load, every, stop,
                                                                terms, par, gpn, replicas,
                                                                chunk):
    """Generated nodg recipes (text and multimodal: the encode inline; Poisson and Gamma
    arrivals) with TensorRT-LLM's engine terms or with the terms off (KV for prompt + output
    reserved at admission), 1–3 replicas at TP 2 or PP 2, chunked or not, light to
    overloaded, same-time bursts, with the stop rule or without: the compiled run is `Run`
    with `ahead` off bit for bit, and the default run but for its events."""
    rec = random_recipe(seed, ("nodg",), requests=(150, 400), evaluator=QUICK)
    cfg = parse_config({"architecture": "nodg", "tp": par[0], "pp": par[1],
                        "replicas": replicas, "chunk_tokens": chunk})
    cluster = rec.cluster.model_copy(update={"gpus": cfg.gpus, "gpus_per_node": gpn})
    eng = Engine(name="trtllm") if terms else Engine(name=rec.engine.name, terms=False)
    rec = rec.model_copy(update={"engine": eng, "cluster": cluster})
    ev = Evaluation(rec)
    if not ev.runnable(cfg):
        return
    reqs = ev.requests
    if every > 1:
        i = np.arange(len(reqs))
        reqs = dataclasses.replace(reqs, gaps=np.where(i % every == 0, reqs.gaps * every, 0.0))
    sim = ev.simulator(cfg)
    assert not sim.profile.kv_on_demand and sim.compiled(reqs)  # reserved, open loop: the core's
    _reserved_runs(sims(ev, cfg, KEEP if stop else None), reqs, load * ev.start_rate(cfg))


@SETTINGS(30)
@given(seed=st.integers(0, 2**31 - 1), kv=st.integers(800, 40_000), r=st.integers(1, 3),
       load=st.floats(0.5, 3.0), out_max=st.integers(3, 600),
       chunk=st.sampled_from([None, 128, 512]))
def test_reserved_nodg_replicas_short_of_kv_run_the_same(seed, kv, r, load, out_max, chunk):
    """Reserved-KV replicas with little KV: requests wait for KV to free, and those whose
    prompt + output can never fit are rejected."""
    reqs = random_requests(300, seed, out_max)
    _reserved_runs(_nodg_paged_case(kv, r, chunk, paged=False), reqs, load)


def test_the_small_reserved_nodg_replicas_reject():
    """What the test above draws reaches the rejections and the queueing for KV."""
    reqs = random_requests(300, 1, 600)
    for chunk in (None, 512):
        fast, _, _ = _reserved_runs(_nodg_paged_case(1_500, 2, chunk, paged=False), reqs, 3.0)
        assert 0 < fast.rejected < 300 and "preemptions" not in fast.extra


def test_which_nodg_runs_take_the_core(monkeypatch):
    """Closed-loop runs (benchmark clients) and TensorRT-LLM's batch waiting stay on the
    Python path; open-loop paged and reserved-KV runs take the core; HASTUNE_SIM_CORE=python
    (or `core`) keeps it off."""
    from hastune.sim.nodg import run as nodg_run

    real, called = nodg_run.core, []

    def run_nodg(run):
        called.append(run)
        real.run_nodg(run)  # type: ignore[union-attr]

    monkeypatch.setattr(nodg_run, "core", type("C", (), {"run_nodg": staticmethod(run_nodg)}))
    sim = _nodg_paged_case(40_000, 1, 512)()
    closed = dataclasses.replace(random_requests(50, 3, 20), think_s=0.0)
    assert sim.run(closed, 4).completed > 0
    assert called == []
    monkeypatch.setenv("HASTUNE_SIM_CORE", "python")
    assert sim.run(random_requests(50, 3, 20), 1.0).completed > 0
    assert called == []
    monkeypatch.delenv("HASTUNE_SIM_CORE")
    assert sim.run(random_requests(50, 3, 20), 1.0).completed > 0
    assert len(called) == 1
    reserved = _nodg_paged_case(40_000, 1, 512, paged=False)()
    assert reserved.run(random_requests(50, 3, 20), 1.0).completed > 0
    assert len(called) == 2 and called[0].paged and not called[1].paged
    assert reserved.run(closed, 4).completed > 0
    reserved.core = "python"
    assert reserved.run(random_requests(50, 3, 20), 1.0).completed > 0
    assert len(called) == 2
    for s in (sim, reserved):
        s.core = None
        assert s.compiled(random_requests(50, 3, 20))
        s.profile = s.profile.model_copy(update={"batch_wait": (4, 0.5)})
        assert not s.compiled(random_requests(50, 3, 20))
        assert s.run(random_requests(50, 3, 20), 1.0).completed > 0
    assert len(called) == 2

"""Expert parallelism as a knob of the replica architectures (issue 12): `expert_parallel` (nodg,
padg) and `prefill_expert_parallel` / `decode_expert_parallel` (fudg) time an instance from
the profile's expert-parallel sections (ep = tp) where the profile is a MoE model's, are refused
by name where it is not, leave every config without them keyed as before, and drop out of a
search space for a dense model's profile.

The MoE profiles here are made from a shipped dense profile by giving it expert-parallel
sections whose prefill and decode forms are the TP sections' scaled by generated factors, so
the direction each knob must move the simulated latencies is known exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune import archs
from hastune.config import config_dict, knob_items, parse_config, trial_key
from hastune.errors import InputError
from hastune.evaluators.sim import Evaluation
from hastune.profile import TPVariant, find_profile, load_profile
from hastune.prune import prune
from hastune.recipe import Recipe
from hastune.space import SearchSpace, space_for
from hastune.tune.params import Parametrization

DENSE = load_profile(find_profile("codellama2-34b", "h100-80gb"))
EP_FIELDS = {"nodg": ("expert_parallel",), "padg": ("expert_parallel",),
             "fudg": ("prefill_expert_parallel", "decode_expert_parallel")}


def moe_profile(prefill_x: float, decode_x: float):
    """DENSE with expert-parallel sections at every TP degree ≥ 2: the TP variant's prefill
    and decode coefficients × prefill_x / decode_x, its memory."""
    eps = {}
    for tp in DENSE.tp_degrees:
        if tp < 2:
            continue
        v = DENSE.for_tp(tp)
        pre = v.prefill.model_copy(update={
            "fixed_s": v.prefill.fixed_s * prefill_x,
            "per_token_s": v.prefill.per_token_s * prefill_x,
            "per_token_sq_s": v.prefill.per_token_sq_s * prefill_x})
        dec = v.decode.model_copy(update={
            "fixed_s": v.decode.fixed_s * decode_x, "per_seq_s": v.decode.per_seq_s * decode_x,
            "per_context_token_s": v.decode.per_context_token_s * decode_x})
        eps[tp] = {tp: TPVariant(prefill=pre, decode=dec, memory=v.memory, ep=tp)}
    return DENSE.model_copy(update={"ep_variants": eps, "name": "codellama2-34b-moe-test"})


def recipe(arch: str, closed: bool = False, requests: int = 120) -> Recipe:
    arrival = {"process": "closed", "think_s": 0.0} if closed else {"process": "poisson"}
    return Recipe.model_validate({
        "kind": "recipe", "name": f"ep-{arch}", "model": "codellama2-34b",
        "cluster": {"gpu": "h100-80gb", "gpus": 8, "gpus_per_node": 8,
                    "intra_node": "nvlink-h100", "inter_node": "ib-400g"},
        "workload": {"requests": requests, "warmup": 0.0, "arrival": arrival,
                     "prompt_tokens": {"dist": "lognormal", "mean": 400, "cv": 0.5, "min": 8,
                                       "max": 2048},
                     "output_tokens": {"dist": "lognormal", "mean": 40, "cv": 0.5, "min": 2,
                                       "max": 256}},
        "slo": {"ttft_s": 2.0, "tpot_s": 0.1}, "architecture": arch, "seed": 0,
        "evaluator": {"min_span": 5.0, "min_requests": 300, "extend": 2.0, "max_probes": 30}})


def config(arch: str, tp: int, n: int, ep: bool, prefill_ep: bool = False, **knobs) -> dict:
    if arch == "fudg":
        return {"architecture": "fudg", "prefill_tp": tp, "prefill_instances": 1,
                "decode_tp": tp, "decode_instances": n, "prefill_expert_parallel": prefill_ep,
                "decode_expert_parallel": ep, **knobs}
    count = "replicas" if arch == "nodg" else "instances"
    return {"architecture": arch, "tp": tp, count: n, "expert_parallel": ep, **knobs}


def _knobs(arch: str, draw) -> dict:
    if arch == "nodg":
        return {"chunk_tokens": draw(st.sampled_from([None, 256, 2048]))}
    if arch == "padg":
        return {"slack": draw(st.sampled_from(["mean", "min"]))}
    return {"placement": draw(st.sampled_from(["interleaved", "grouped"]))}


factor = st.one_of(st.floats(0.4, 0.85), st.floats(1.2, 2.5))


@st.composite
def ep_cases(draw):
    arch = draw(st.sampled_from(sorted(EP_FIELDS)))
    tp = draw(st.sampled_from([2, 4]))
    return arch, tp, draw(factor), draw(factor), _knobs(arch, draw)


def _mean_latencies(ev: Evaluation, cfg) -> tuple[float, float, object]:
    """Mean TTFT and TPOT of one client sending one request after another: every request is
    alone on the deployment, so its latencies are the profile's forms at its lengths."""
    sim = ev.simulator(cfg)
    sim.stop_rule = None
    run = sim.run(ev.requests, 1.0)
    return float(np.nanmean(run.ttft)), float(np.nanmean(run.tpot)), run


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=ep_cases())
def test_expert_parallel_moves_latency_the_way_the_profile_says(case):
    """On a MoE profile, a config with expert parallelism runs (every request accounted for,
    finite latencies) and, alone on the deployment, its requests' TTFT and TPOT are above or
    below those of the same config with experts TP-split exactly as the expert-parallel
    sections' prefill and decode forms are above or below the TP ones."""
    arch, tp, px, dx, knobs = case
    prof = moe_profile(px, dx)
    ev = Evaluation(recipe(arch, closed=True, requests=40), profile=prof)
    n = 8 // tp - (1 if arch == "fudg" else 0)
    on = parse_config(config(arch, tp, n, True, prefill_ep=True, **knobs))
    off = parse_config(config(arch, tp, n, False, **knobs))
    assert knob_items(on) != knob_items(off)
    ttft_on, tpot_on, run = _mean_latencies(ev, on)
    ttft_off, tpot_off, _ = _mean_latencies(ev, off)
    assert run.completed == len(ev.requests) and run.rejected == 0
    assert all(map(math.isfinite, (ttft_on, tpot_on)))
    # the prefill sections scale every prefill cost; fudg adds the same KV transfer to both
    assert (ttft_on > ttft_off) == (px > 1), (ttft_on, ttft_off, px)
    assert (tpot_on > tpot_off) == (dx > 1), (tpot_on, tpot_off, dx)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=ep_cases(), load=st.floats(0.3, 1.5))
def test_expert_parallel_runs_under_load_are_complete_and_finite(case, load):
    arch, tp, px, dx, knobs = case
    ev = Evaluation(recipe(arch), profile=moe_profile(px, dx))
    cfg = parse_config(config(arch, tp, 8 // tp - (1 if arch == "fudg" else 0), True,
                              prefill_ep=True, **knobs))
    ev.check(cfg)
    sim = ev.simulator(cfg)
    sim.stop_rule = None
    run = sim.run(ev.requests, load * ev.start_rate(cfg))
    assert run.completed + run.rejected == len(ev.requests)
    done = ~np.isnan(run.ttft)
    assert done.any() and np.isfinite(run.ttft[done]).all()
    spec, kv = archs.of(cfg).decode_timing(ev, cfg)
    # the expert-parallel section's decode form, as the evaluation's profile has it (with
    # the engine's terms on it)
    assert spec.fixed_s == pytest.approx(ev.profile.for_parallel(tp, tp).decode.fixed_s)
    assert kv > 0


@pytest.mark.parametrize("arch", sorted(EP_FIELDS))
@settings(max_examples=6, deadline=None)
@given(tp=st.sampled_from([2, 4, 8]), which=st.integers(0, 1))
def test_dense_profile_refuses_expert_parallel_naming_the_field(arch, tp, which):
    fields = EP_FIELDS[arch]
    field = fields[which % len(fields)]
    if arch == "fudg":
        tp = min(tp, 4)  # a prefill and a decode instance in 8 GPUs
    n = 8 // tp - (1 if arch == "fudg" else 0)
    d = config(arch, tp, n, False)
    d[field] = True
    ev = Evaluation(recipe(arch), profile=DENSE)
    with pytest.raises(InputError) as exc:
        ev.check(parse_config(d), "cfg.yaml")
    assert exc.value.field == field
    assert "expert-parallel" in exc.value.problem and f"{field}: false" in exc.value.fix
    assert not ev.runnable(parse_config(d))


def test_moe_profile_without_that_tp_degree_names_what_it_has():
    prof = moe_profile(1.0, 1.2)
    prof = prof.model_copy(update={"ep_variants": {2: prof.ep_variants[2]}})
    ev = Evaluation(recipe("nodg"), profile=prof)
    with pytest.raises(InputError) as exc:
        ev.check(parse_config(config("nodg", 4, 2, True)))
    assert exc.value.field == "expert_parallel" and "tp = 4" in exc.value.problem
    assert "use tp 2" in exc.value.fix
    ev.check(parse_config(config("nodg", 2, 4, True)))  # the degree it has


@pytest.mark.parametrize("arch", sorted(EP_FIELDS))
def test_one_gpu_tp_group_has_no_expert_parallelism(arch):
    for field in EP_FIELDS[arch]:
        d = config(arch, 1, 2, False)
        d[field] = True
        with pytest.raises(InputError) as exc:
            parse_config(d, "cfg.yaml")
        assert exc.value.field == field and "tp ≥ 2" in exc.value.fix


@pytest.mark.parametrize("arch", ["nodg", "padg"])
def test_engine_refuses_expert_parallel(arch):
    cfg = parse_config(config(arch, 2, 4, True))
    with pytest.raises(InputError) as exc:
        archs.of(cfg).engine_check(cfg, "cfg.yaml")
    assert exc.value.field == "expert_parallel"


# keys of configs without the knob, as HEAD before it (372b987) made them
BEFORE = {
    "nodg": ({"architecture": "nodg", "tp": 2, "replicas": 4},
             '{"architecture": "nodg", "chunk_tokens": 512, "pp": 1, "replicas": 4, "tp": 2}'),
    "fudg": ({"architecture": "fudg", "prefill_instances": 3, "decode_instances": 5},
             '{"architecture": "fudg", "decode_instances": 5, "decode_pp": 1, "decode_tp": 1, '
             '"placement": "interleaved", "prefill_instances": 3, "prefill_pp": 1, '
             '"prefill_tp": 1}'),
}


@pytest.mark.parametrize("arch", sorted(BEFORE))
def test_config_without_the_knob_keys_as_before(arch):
    d, key = BEFORE[arch]
    cfg = parse_config(d)
    assert trial_key(cfg) == key
    off = parse_config({**d, **dict.fromkeys(EP_FIELDS[arch], False)})
    assert off == cfg and trial_key(off) == key and knob_items(off) == knob_items(cfg)


@settings(max_examples=40, deadline=None)
@given(arch=st.sampled_from(sorted(EP_FIELDS)), tp=st.sampled_from([1, 2, 4]),
       pp=st.sampled_from([1, 2]), n=st.integers(1, 64), data=st.data())
def test_generated_configs_without_the_knob_never_show_it(arch, tp, pp, n, data):
    if arch == "fudg":
        d = {"architecture": arch, "prefill_tp": tp, "prefill_pp": pp, "prefill_instances": n,
             "decode_tp": tp, "decode_instances": n}
    else:
        d = config(arch, tp, n, False, pp=pp)
        del d["expert_parallel"]
        d.update(_knobs(arch, data.draw))
    cfg = parse_config(d)
    dumped = config_dict(cfg)
    assert not set(EP_FIELDS[arch]) & set(dumped)
    assert set(dumped) == set(type(cfg).model_fields) - {"kind", "name", *EP_FIELDS[arch],
                                                         *type(cfg).type_knobs}
    assert parse_config(dumped) == cfg
    ep = {**d, **dict.fromkeys(EP_FIELDS[arch], tp >= 2)}
    if tp >= 2:  # on: in the key, and round-trips
        on = parse_config(ep)
        assert set(EP_FIELDS[arch]) <= set(config_dict(on))
        assert parse_config(json.loads(trial_key(on))) == on


@pytest.mark.parametrize("arch", sorted(EP_FIELDS))
def test_dense_search_unchanged_moe_search_grows(arch):
    """The shipped space lists the switches; for the dense profile it searches exactly the
    configurations of the space without them (same count, same pruning), for a MoE profile
    the expert-parallel ones too (tp 1's are structurally invalid)."""
    rec = recipe(arch)
    shipped = space_for(arch)
    assert set(EP_FIELDS[arch]) <= set(shipped.params)
    without = SearchSpace.model_validate({
        "architecture": arch, "budget": shipped.budget,
        "params": {k: v for k, v in shipped.params.items() if k not in EP_FIELDS[arch]}})
    dense = shipped.for_profile(DENSE)
    G = rec.cluster.gpus
    assert [knob_items(c) for c in dense.configs(G)] == [knob_items(c) for c in without.configs(G)]
    ev = Evaluation(rec, profile=DENSE)
    a, b = prune(rec, DENSE, ev.requests, dense), prune(rec, DENSE, ev.requests, without)
    assert (a.total, a.removed) == (b.total, b.removed)
    assert [c.as_dict() for c in a.kept] == [c.as_dict() for c in b.kept]
    pa, pb = Parametrization({arch: dense}, G), Parametrization({arch: without}, G)
    assert pa.params == pb.params  # the sampler sees the same parameters
    assert pa.fixed[arch] == {**pb.fixed[arch], **dict.fromkeys(EP_FIELDS[arch], False)}
    moe = moe_profile(0.8, 1.3)
    assert shipped.for_profile(moe) is shipped
    rep = prune(rec, moe, Evaluation(rec, profile=moe).requests, shipped)
    assert rep.total > a.total and rep.removed["structural"] > 0
    kept_ep = [c for c in rep.kept if any(getattr(c.config, f) for f in EP_FIELDS[arch])]
    assert kept_ep, "no expert-parallel config survived pruning on the MoE profile"


def test_mixtral_expert_parallel_follows_its_profile(tmp_path, monkeypatch):
    """Mixtral-8x7B on H100 (its profile built from aiconfigurator-core's tables: the kernels
    extra, installed in CI): at each TP degree a lone replica's TPOT with expert parallelism
    is above or below the TP-split one as the profile's decode step at batch 1 is."""
    from hastune.evaluators.profile import resolve_profile
    from hastune.recipe import load_recipe

    monkeypatch.setenv("HASTUNE_CACHE", str(tmp_path))
    root = Path(__file__).resolve().parents[2]
    rec = load_recipe(root / "examples" / "mixtral-8x7b-h100.yaml")
    prof, _ = resolve_profile(rec)
    rec = rec.model_copy(update={"workload": rec.workload.model_copy(update={
        "requests": 30, "arrival": rec.workload.arrival.model_copy(
            update={"process": "closed", "think_s": 0.0})})})
    ev = Evaluation(rec, profile=prof)
    ctx = float(np.mean(ev.requests.prefill_tokens))
    for tp in (2, 4, 8):
        assert prof.ep_degrees(tp) == [1, tp]
        steps = [prof.for_parallel(tp, e).decode.step(1, ctx) for e in (1, tp)]
        tpots = [_mean_latencies(ev, parse_config(config("nodg", tp, 1, on)))[1]
                 for on in (False, True)]
        if abs(steps[1] / steps[0] - 1) > 0.02:
            assert (tpots[1] > tpots[0]) == (steps[1] > steps[0]), (tp, steps, tpots)

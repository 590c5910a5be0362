"""Pools on several GPU types (issue 37): on generated two-type inventories, pruning keeps the
exhaustive optimum — and every configuration within the search tolerance of it — of the
recipe's objective (goodput, or goodput per dollar), with each pool on the type its knob
names; a configuration on one type is simulated exactly as the same recipe with that type
alone."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune import archs
from hastune.cluster import Cluster
from hastune.cost import Objective
from hastune.evaluators.sim import Evaluation
from hastune.prune import TypedBounds, prune
from tests.conftest import QUICK
from tests.generated import GPUS, random_recipe, space


def _mixed(seed: int, objective: str):
    """A generated recipe (epd, fudg or nodg) on its GPU and another, 1–2 GPUs of each, with
    prices from the types' order."""
    rng = np.random.default_rng(seed)
    rec = random_recipe(seed, ("epd", "fudg", "nodg"), requests=(150, 300), evaluator=QUICK)
    first = rec.cluster.gpu
    other = str(rng.choice([g for g in GPUS if g != first]))
    n1, n2 = (int(x) for x in rng.integers(1, 3, size=2))
    cluster = Cluster.model_validate({"inventory": [
        {"gpu": first, "nodes": 1, "gpus_per_node": n1,
         "price_per_gpu_hour": float(rng.uniform(0.5, 4.0))},
        {"gpu": other, "nodes": 1, "gpus_per_node": n2,
         "price_per_gpu_hour": float(rng.uniform(0.5, 4.0))}], "inter_node": "ib-200g"})
    rec = rec.model_copy(update={"cluster": cluster, "objective": objective})
    sp = space(rec.architecture).with_knobs(
        {k: [None, other] for k in archs.get(rec.architecture).config.type_knobs})
    return rec, sp.model_copy(update={"budget": "at_most"}), other


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1),
       objective=st.sampled_from(["goodput", "goodput_per_dollar"]))
def test_prune_keeps_the_optimum_of_the_objective_on_two_gpu_types(seed, objective):
    rec, sp, _ = _mixed(seed, objective)
    ev = Evaluation(rec)
    obj = Objective(rec)
    bounds = TypedBounds(rec, ev)
    values = {}
    for c in sp.configs(rec.cluster.gpus):
        if not ev.runnable(c):
            continue
        b = bounds(c)
        if b is None or b.memory_ok(c):
            values[c.model_dump_json()] = ev.goodput(c).goodput_rps * obj.scale(c)
    report = prune(rec, ev.profile, ev.requests, sp,
                   evaluate=lambda c: values[c.model_dump_json()] / obj.scale(c),
                   scale=obj.scale if obj.per_cost else None, bounds=bounds,
                   fits=ev.runnable)
    assert sum(report.removed.values()) + len(report.kept) == report.total
    best = max(values.values(), default=0.0)
    if best <= 0:
        return
    kept = {c.config.model_dump_json() for c in report.kept}
    near = [k for k, v in values.items() if v >= (1 - rec.evaluator.tolerance) * best]
    lost = [k for k in near if k not in kept]
    assert not lost, (rec.name, best, lost, report.as_dict(top=5))
    # the space mixes the types wherever the architecture has several pools
    mixes = any(len({t for t, n in c.pool_gpus(rec.cluster.gpu) if n}) > 1
                for c in sp.configs(rec.cluster.gpus))
    assert mixes == (len(archs.get(rec.architecture).config.type_knobs) > 1
                     and rec.cluster.gpus >= 2)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1))
def test_a_config_on_one_type_runs_as_on_that_type_alone(seed):
    """All pools on the second type: the same run, request for request, as the recipe whose
    cluster is that type alone (its profile, its nodes). (Goodputs may differ slightly: a
    recipe's probes are as long as its first type's request lifetime says.)"""
    rec, sp, other = _mixed(seed, "goodput")
    ev = Evaluation(rec)
    alone = Evaluation(rec.model_copy(update={"cluster": rec.cluster.only(other)}))
    knobs = archs.get(rec.architecture).config.type_knobs
    on_other = [c for c in sp.configs(rec.cluster.gpus)
                if all(getattr(c, k) == other or getattr(c, k) is None and n == 0
                       for k, (_, n) in zip(knobs, c.pool_gpus(rec.cluster.gpu)))
                and ev.runnable(c)]
    for c in on_other[:3]:
        plain = c.model_copy(update=dict.fromkeys(knobs))
        rate = alone.start_rate(plain)
        reqs = alone.requests_at(rate, 300)
        a, b = ev.simulator(c).run(reqs, rate), alone.simulator(plain).run(reqs, rate)
        assert np.array_equal(a.ttft, b.ttft) and np.array_equal(a.tpot, b.tpot,
                                                                 equal_nan=True), c

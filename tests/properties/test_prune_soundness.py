"""Item 3 of issue 9: pruning is sound on recipes nobody picked. Every configuration of a random
small-budget recipe is simulated: its goodput never exceeds its capacity bound by more than the
derived margin, and `prune` keeps the exhaustive optimum and every configuration within the
search tolerance of it. Short probes (QUICK): the bound holds whatever the evaluator's window,
since a probe that passes was stable at its own length."""

from __future__ import annotations

from hypothesis import given, settings

from hastune.evaluators.sim import Evaluation
from hastune.prune import Bounds, prune
from tests.conftest import QUICK
from tests.generated import recipes, space


def _exhaustive(rec):
    ev = Evaluation(rec)
    sp = space(rec.architecture)
    b = Bounds(rec, ev.profile, ev.requests)
    goodputs = {}
    for c in sp.configs(rec.cluster.gpus):
        if b.memory_ok(c):
            goodputs[c.model_dump_json()] = ev.goodput(c).goodput_rps
    return ev, sp, goodputs


@settings(max_examples=45)
@given(rec=recipes(("epd", "nodg", "padg", "fudg"), requests=(150, 400), evaluator=QUICK))
def test_prune_keeps_the_optimum_and_every_bound_holds(rec):
    ev, sp, goodputs = _exhaustive(rec)
    report = prune(rec, ev.profile, ev.requests, sp,
                   evaluate=lambda c: goodputs[c.model_dump_json()])
    assert sum(report.removed.values()) + len(report.kept) == report.total
    # the bound of every configuration pruning ranked holds against its simulated goodput
    unranked = prune(rec, ev.profile, ev.requests, sp)
    for c in unranked.kept:
        g = goodputs[c.config.model_dump_json()]
        assert g <= c.bound * report.margin + 1e-9, (rec.name, c.as_dict(), g)
    best = max(goodputs.values(), default=0.0)
    if best <= 0:
        return
    kept = {c.config.model_dump_json() for c in report.kept}
    near = [k for k, g in goodputs.items() if g >= (1 - rec.evaluator.tolerance) * best]
    lost = [k for k in near if k not in kept]
    assert not lost, (rec.name, best, lost, report.as_dict(top=5))


@settings(max_examples=12)
@given(rec=recipes(("epd-static",), requests=(150, 400), evaluator=QUICK))
def test_prune_keeps_the_static_optimum(rec):
    ev, sp, goodputs = _exhaustive(rec)
    report = prune(rec, ev.profile, ev.requests, sp,
                   evaluate=lambda c: goodputs[c.model_dump_json()])
    best = max(goodputs.values(), default=0.0)
    kept = {c.config.model_dump_json(): goodputs[c.config.model_dump_json()]
            for c in report.kept}
    assert max(kept.values(), default=0.0) == best

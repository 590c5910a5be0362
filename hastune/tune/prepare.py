"""Stage 1 inside a study: prune each space, rank the survivors, choose the warm start.

Run by one process per study (hastune.tune.claims: the prepare trial); its result is three
study user attributes every process reads: `prune_report`, `survivors` (ranked, best first)
and `warm_start` (the survivors to evaluate first, as configurations).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import optuna

from hastune.config import AnyConfig, parse_config, trial_key
from hastune.prune import RULES, keeps, prune

if TYPE_CHECKING:
    from hastune.tune.runner import Tuner

Config = AnyConfig


def prune_study(tuner: Tuner, study: optuna.Study, record: Callable[[Config], float],
                done: Callable[[], set[str]],
                record_many: Callable[[list[Config]], list[float]] | None = None) -> None:
    """Prune, rank, and store the result on `study`. `record(cfg)` evaluates a probe as a
    trial (or reads its goodput back), `record_many` several at once (in parallel where the
    command has processes); `done()` the keys evaluated so far."""
    opts = tuner.opts
    # the objective's units: bounds and the lower bound in req/s, or (goodput per dollar)
    # requests per dollar, each configuration's bound scaled by its cost (prune's `scale`)
    obj = tuner.objective
    scale = obj.scale if obj.per_cost else None
    lb_key = "lower_bound_per_dollar" if obj.per_cost else "lower_bound_rps"
    cands: list[tuple[float, Config]] = []
    report: dict[str, Any] = {"total": 0, "kept": 0, "rules": dict.fromkeys(RULES, 0),
                              lb_key: 0.0, "pruned": opts.prune,
                              **({"objective": obj.name} if obj.per_cost else {})}
    # plan --objective cost: a configuration is worth evaluating if it could sustain the rate,
    # however far below the best goodput (a cheaper one may be the answer): no probes, the
    # capacity rule compares each bound with the rate
    sustain = opts.sustain_rps if opts.prune else None
    # several architectures share one lower bound: a goodput any of them reached bounds the
    # optimum of all (splitting probe_top between them was tried: no better)
    for space in tuner.spaces.values():
        if opts.prune:
            rep = prune(tuner.recipe, tuner.simulation.profile, tuner.simulation.requests, space,
                        evaluate=record if sustain is None else None,
                        evaluate_many=record_many if sustain is None else None,
                        probe_top=opts.probe_top, margin=tuner.margin,
                        lower_bound=report[lb_key],
                        runnable=None if tuner.evaluator is tuner.simulation else tuner.runnable,
                        deployable=tuner.deployable if opts.target else None, scale=scale,
                        bounds=tuner.bounds,
                        fits=tuner.simulation.runnable if tuner.simulation.multi else None)
            cands += [(c.bound * (scale(c.config) if scale else 1.0), c.config)
                      for c in rep.kept]
            for r, n in rep.removed.items():
                report["rules"][r] += n
            report["total"] += rep.total
            report[lb_key] = max(report[lb_key], rep.lower_bound)
        else:
            for c in space.configs(tuner.recipe.cluster.gpus):
                report["total"] += 1
                if tuner.evaluator is not tuner.simulation and not tuner.runnable(c):
                    report["rules"]["engine"] += 1
                elif opts.target and not tuner.deployable(c):
                    report["rules"]["target"] += 1
                elif tuner.simulation.multi and not tuner.simulation.runnable(c):
                    report["rules"]["structural"] += 1
                elif tuner.feasible(c):
                    cands.append((0.0, c))
                else:
                    report["rules"]["memory"] += 1
    if sustain is not None:
        from hastune.cost import cost_per_hour

        keep = [(b, c) for b, c in cands if b * tuner.margin >= sustain]
        report["rules"]["capacity"] += len(cands) - len(keep)
        report["sustain_rps"] = sustain
        # the cheapest first (then the best bound): the warm start tries the likeliest answers
        cands = sorted(keep, key=lambda bc: (cost_per_hour(tuner.recipe.cluster, bc[1]) or 0.0,
                                             -bc[0]))
    elif opts.prune:
        # the final lower bound also applies to the spaces pruned before it was reached
        lb = report[lb_key]
        probed = done()
        keep = [(b, c) for b, c in cands
                if keeps(tuner.recipe, b, tuner.margin, lb) or trial_key(c) in probed]
        report["rules"]["capacity"] += len(cands) - len(keep)
        cands = diversified(tuner, keep)
    # without pruning, no bound ranking either: plain BO from the space's own order
    ranked = [json.loads(trial_key(c)) for _, c in cands]
    report["kept"] = len(ranked)
    evaluated = done()
    warm: list[dict] = []
    for d in ranked:  # warm start: the best-bounded survivors not yet evaluated
        if len(warm) >= opts.warm_start or not opts.prune:
            break
        if trial_key(parse_config(d)) not in evaluated:
            warm.append(d)
    study.set_user_attr("prune_report", report)
    study.set_user_attr("warm_start", warm)
    study.set_user_attr("survivors", ranked)  # last: its presence says the rest is there


def diversified(tuner: Tuner, cands: list[tuple[float, Config]]) -> list[tuple[float, Config]]:
    """Best bound first, across architectures, one configuration per GPU allocation per
    round: every allocation's best-bounded variant comes before any allocation's second.
    A capacity bound says nothing about the knobs it does not depend on (B, p, …), so its
    ties are broken towards allocations not yet tried rather than spending the warm start
    and the fall-backs on variants of one allocation."""
    order = sorted(range(len(cands)), key=lambda i: -cands[i][0])  # stable: space order
    seen: dict[tuple, int] = {}
    rounds: dict[int, int] = {}
    for i in order:
        cfg = cands[i][1]
        space = tuner.spaces[cfg.architecture]
        alloc = (cfg.architecture, *(getattr(cfg, k) for k in space.gpu_knobs()))
        rounds[i] = seen.get(alloc, 0)
        seen[alloc] = rounds[i] + 1
    return [cands[i] for i in sorted(order, key=lambda i: rounds[i])]

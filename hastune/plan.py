"""`hastune plan`: the fewest GPUs (or the cheapest deployment) that sustains a rate within
the SLOs.

A GPU count g ≤ cluster.gpus is searched as the recipe copied with `cluster.gpus = g`: its
search space, pruning, tuner and study are exactly those of `hastune tune` on that copy (one
study per count, `<study>-g<g>`, all in one storage, so running the same command again
resumes every count and re-evaluates nothing).

Before any simulation each count gets a ceiling from pruning's analytic rules: the largest
capacity bound of its surviving configurations × the derived margin, which no goodput exceeds
(hastune.prune.derived_margin; tests/test_prune_soundness.py). A count with no surviving
configuration, or whose ceiling is below the rate, is ruled out unsimulated. The rest are
tuned in increasing order until one sustains the rate (`up`: the fewest that the tuner finds,
whatever the shape of goodput in g), or by bisection (`bisect`: fewer tunes, assumes goodput
grows with the GPU count). The answer is only as good as the tuner's search at each count:
with `trials` at least the number of survivors the search is exhaustive.

Each count is tuned for goodput, whatever the recipe's objective: a count sustains the rate
if its best goodput does. `objective` says which deployment answers: `gpus` the best of the
fewest GPUs that sustain the rate; `cost` (every GPU type priced) the cheapest configuration
evaluated, at any count tuned, whose goodput sustains it (ties: the most goodput). With one
GPU type cost grows with the GPUs, so the counts are searched the same way. On several GPU
types it does not: each count's study keeps every configuration whose capacity bound × margin
could sustain the rate (not only those near its best goodput: a cheaper one may answer; one
study per rate), and counts above the fewest that sustain it are tuned while the count times
the cheapest type's price is at most the cheapest answer found (a count's new configurations
use exactly that many GPUs, so none beyond can be cheaper). With prices,
every configuration evaluated is a point of $/h against goodput, and the plan reports the
points no other beats on both (`cost_pareto`, plan_pareto.csv, plan_cost.png).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hastune import interrupt
from hastune.config import parse_config
from hastune.errors import EXIT_NO_CONFIG, InputError
from hastune.recipe import Recipe

SEARCHES = ("up", "bisect")
OBJECTIVES = ("gpus", "cost")  # what the answer minimises
# a step's status: how its count was settled
INFEASIBLE = "infeasible"   # no configuration survives the analytic rules at this count
BOUND = "bound"             # the ceiling is below the rate: cannot sustain it
TUNED = "tuned"
SKIPPED = "not searched"    # above the answer (up) or outside the bisection's path


@dataclass
class Step:
    gpus: int
    status: str
    ceiling_rps: float | None = None      # None: infeasible; inf: no bound (real evaluator)
    goodput_rps: float | None = None      # the tuned best (TUNED only)
    config: dict | None = None
    evaluations: int = 0
    study: str | None = None
    wall_s: float = 0.0
    reason: str | None = None
    recipe_sha256: str | None = None      # of the recipe at this count (its study's identity)
    cost_per_hour: float | None = None    # of `config`, where every GPU type is priced
    # every configuration its study evaluated: {config, gpus, goodput_rps, cost_per_hour?}
    points: list[dict] = field(default_factory=list)

    def sustains(self, rate: float) -> bool:
        return self.goodput_rps is not None and self.goodput_rps >= rate

    def as_dict(self, rate: float) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("gpus", "status", "ceiling_rps", "goodput_rps",
                                             "config", "evaluations", "study", "wall_s",
                                             "reason", "cost_per_hour")}
        if d["ceiling_rps"] is not None and math.isinf(d["ceiling_rps"]):
            d["ceiling_rps"] = None
        d["goodput_per_gpu"] = (self.goodput_rps / self.gpus
                                if self.goodput_rps is not None else None)
        d["sustains"] = self.sustains(rate)
        return d


@dataclass
class PlanResult:
    recipe: str
    rate: float
    search: str
    max_gpus: int
    steps: list[Step]
    wall_s: float = 0.0
    storage: str = ""
    caveats: list[str] = field(default_factory=list)  # the answer's (hastune.caveats)
    files: list[Path] = field(default_factory=list)   # what hastune.plan.run wrote
    objective: str = "gpus"

    @property
    def answer(self) -> Step | None:
        """The step of the answer: the fewest GPUs that sustain the rate (objective gpus), or
        the count whose study holds the cheapest configuration that does (cost)."""
        if self.objective == "cost":
            c = self.cheapest
            return next(s for s in self.steps if s.study == c["study"]) if c else None
        ok = [s for s in self.steps if s.sustains(self.rate)]
        return min(ok, key=lambda s: s.gpus) if ok else None

    @property
    def points(self) -> list[dict]:
        """Every configuration evaluated at every count tuned, with its study."""
        return [{**p, "study": s.study} for s in self.tuned for p in s.points]

    @property
    def cheapest(self) -> dict | None:
        """The cheapest evaluated configuration whose goodput sustains the rate (the most
        goodput among equals, then the fewest GPUs); None if none does or a price is
        missing."""
        ok = [p for p in self.points if p.get("cost_per_hour") is not None
              and p["goodput_rps"] >= self.rate]
        return min(ok, key=lambda p: (p["cost_per_hour"], -p["goodput_rps"], p["gpus"]),
                   default=None)

    def cost_pareto(self) -> list[dict]:
        """The evaluated configurations no other beats on both cost per hour and goodput
        (cheapest first), priced ones only; each with its goodput per dollar."""
        pts = sorted((p for p in self.points if p.get("cost_per_hour") is not None
                      and p["goodput_rps"] > 0),
                     key=lambda p: (p["cost_per_hour"], -p["goodput_rps"]))
        out: list[dict] = []
        for p in pts:
            if not out or p["goodput_rps"] > out[-1]["goodput_rps"]:
                out.append({**p, "goodput_per_dollar": p["goodput_rps"] * 3600.0
                            / p["cost_per_hour"]})
        return out

    @property
    def answer_config(self) -> tuple[dict | None, float | None, float | None]:
        """(config, goodput_rps, cost_per_hour) of the answer."""
        if self.objective == "cost":
            c = self.cheapest
            return (c["config"], c["goodput_rps"], c["cost_per_hour"]) if c else (None, None,
                                                                                  None)
        a = self.answer
        return (a.config, a.goodput_rps, a.cost_per_hour) if a else (None, None, None)

    @property
    def tuned(self) -> list[Step]:
        return [s for s in self.steps if s.status == TUNED]

    @property
    def best(self) -> Step | None:
        """The tuned count with the most goodput (fewest GPUs among equals)."""
        return max(self.tuned, key=lambda s: (s.goodput_rps or 0.0, -s.gpus), default=None)

    def pareto(self) -> list[int]:
        """Tuned counts whose goodput beats that of every tuned count with fewer GPUs."""
        out, top = [], -1.0
        for s in sorted(self.tuned, key=lambda s: s.gpus):
            if (s.goodput_rps or 0.0) > top:
                out.append(s.gpus)
                top = s.goodput_rps or 0.0
        return out

    @property
    def exit_code(self) -> int:
        return 0 if self.answer is not None else EXIT_NO_CONFIG

    def as_dict(self) -> dict[str, Any]:
        a, b = self.answer, self.best
        cfg, goodput, cost = self.answer_config
        out: dict[str, Any] = {
            "recipe": self.recipe, "rate_rps": self.rate, "search": self.search,
            "objective": self.objective, "max_gpus": self.max_gpus,
            "gpus": (_gpus(cfg) if self.objective == "cost" else a.gpus) if a else None,
            "config": cfg, "goodput_rps": goodput, "cost_per_hour": cost,
            "searched": [s.gpus for s in self.tuned],
            "ruled_out": {str(s.gpus): s.status for s in self.steps
                          if s.status in (INFEASIBLE, BOUND)},
            "pareto": self.pareto(),
            "best_gpus": b.gpus if b else None,
            "best_goodput_rps": b.goodput_rps if b else 0.0,
            "steps": [s.as_dict(self.rate) for s in self.steps],
            "cost_pareto": self.cost_pareto(),
            "storage": self.storage, "wall_s": self.wall_s, "exit_code": self.exit_code,
        }
        if a is None:
            out["no_config_reason"] = self.why_not()
        else:
            out["caveats"] = self.caveats
        return out

    def why_not(self) -> str:
        b = self.best
        if b is not None:
            return (f"no GPU count up to {self.max_gpus} sustains {self.rate:g} req/s: the "
                    f"most goodput reached is {b.goodput_rps:.3f} req/s on {b.gpus} GPUs")
        tops = [s.ceiling_rps for s in self.steps if s.ceiling_rps is not None]
        if not tops:
            return (f"no configuration of the search space survives pruning at any count up "
                    f"to {self.max_gpus} GPUs (memory, zero-load latency)")
        return (f"no GPU count up to {self.max_gpus} can sustain {self.rate:g} req/s: the "
                f"largest capacity bound × margin is {max(tops):.3f} req/s")


def _gpus(config: dict | None) -> int | None:
    from hastune.config import parse_config

    return parse_config(config).gpus if config else None


def budget_recipe(rec: Recipe, gpus: int) -> Recipe:
    """The recipe with `gpus` GPUs (the same path, so its relative files resolve)."""
    return rec.model_copy(update={"cluster": rec.cluster.model_copy(update={"gpus": gpus})})


def ceilings(rec: Recipe, bounded: bool = True) -> dict[int, float | None]:
    """Per GPU count 1..cluster.gpus: None if no configuration survives pruning's analytic
    rules there, else the most goodput any could reach (inf when not `bounded`)."""
    from hastune.evaluators.sim import Evaluation
    from hastune.prune import TypedBounds, derived_margin, prune
    from hastune.space import on_types, space_for

    ev = Evaluation(rec)
    margin = derived_margin(rec)
    types = [t.gpu for t in rec.cluster.types]
    # as the tuner and grid see them: each pool on any of the cluster's types, each bounded
    # by its type's profile (several types on one configuration: unbounded)
    spaces = [on_types(space_for(a, rec.path, rec.search_space, ev.profile), types)
              for a in rec.architectures]
    fits = ev.runnable if ev.multi else None
    out: dict[int, float | None] = {}
    for g in range(1, rec.cluster.gpus + 1):
        rg = budget_recipe(rec, g)
        bounds = TypedBounds(rg, ev)
        kept = [c for sp in spaces
                for c in prune(rg, ev.profile, ev.requests, sp, bounds=bounds, fits=fits).kept]
        out[g] = None if not kept else (
            max(c.bound for c in kept) * margin if bounded else math.inf)
    return out


@dataclass
class Planner:
    """Plans `recipe` for `rate` req/s; `tune` is the tuner's options (trials per count,
    sampler, evaluator, storage, out, …; its `study` is the base of each count's name)."""
    recipe: Recipe
    rate: float
    tune: Any  # hastune.tune.runner.TuneOptions
    search: str = "up"
    steps: dict[int, Step] = field(default_factory=dict)
    objective: str = "gpus"

    def __post_init__(self) -> None:
        if isinstance(self.rate, bool) or not (math.isfinite(self.rate) and self.rate > 0):
            raise InputError(None, "--rate", f"must be a finite rate > 0 req/s (got "
                             f"{self.rate})", "give the load to sustain, e.g. --rate 120")
        if self.search not in SEARCHES:
            raise InputError(None, "--search", f"unknown search {self.search!r}",
                             f"use one of {', '.join(SEARCHES)}")
        if self.objective not in OBJECTIVES:
            raise InputError(None, "--objective", f"unknown objective {self.objective!r}",
                             f"use one of {', '.join(OBJECTIVES)}")
        missing = self.recipe.cluster.unpriced()
        if self.objective == "cost" and missing:
            f = self.recipe.cluster.price_field(missing[0])
            raise InputError(self.recipe.path, f, f"plan --objective cost needs a price for "
                             f"every GPU type, and {missing[0]} has none", f"give {f} (what "
                             "one GPU costs per hour), or plan --objective gpus")
        base = self.tune.study or f"{self.recipe.name}-{'+'.join(self.recipe.architectures)}"
        self.base_study = base

    @property
    def by_cost(self) -> bool:
        """Cost on several GPU types: cost is not the GPU count, so each count keeps every
        configuration that could sustain the rate (TuneOptions.sustain_rps), not only those
        near its best goodput, and the counts are searched while one could still be cheaper."""
        return self.objective == "cost" and len(self.recipe.cluster.types) > 1

    def study_name(self, gpus: int) -> str:
        # a cost study's survivors depend on the rate: one study per rate
        return f"{self.base_study}-g{gpus}" + (f"-r{self.rate:.6g}" if self.by_cost else "")

    def tune_at(self, gpus: int, on_trial: Callable | None = None) -> Step:
        """Tune the recipe at `gpus` GPUs in its own study (resumed if it exists)."""
        from hastune.cost import cost_fields
        from hastune.tune.outputs import best_trial
        from hastune.tune.runner import Tuner, evaluated_trials, trial_goodput

        t0 = time.perf_counter()
        # tuned for goodput: a count sustains the rate if its best goodput does
        rec = budget_recipe(self.recipe, gpus).model_copy(update={"objective": "goodput"})
        tuner = Tuner(rec, replace(self.tune, study=self.study_name(gpus),
                                   sustain_rps=self.rate if self.by_cost else None))
        st = tuner.open_study(0)
        tuner.prepare(st, on_trial=on_trial)
        tuner.work(st, 0, on_trial=on_trial)
        bt = best_trial(st)
        step = self.steps[gpus]
        step.status = TUNED
        step.study = tuner.study_name
        step.recipe_sha256 = tuner.recipe_sha256
        evals = evaluated_trials(st)
        step.evaluations = len(evals)
        step.goodput_rps = trial_goodput(bt) if bt else 0.0
        step.config = bt.user_attrs["config"] if bt and (bt.value or 0.0) > 0 else None
        step.cost_per_hour = cost_fields(rec.cluster, parse_config(step.config), 0.0).get(
            "cost_per_hour") if step.config else None
        step.points = []
        for t in sorted(evals, key=lambda t: t.number):
            cfg = parse_config(t.user_attrs["config"])
            g = trial_goodput(t)
            step.points.append({"config": t.user_attrs["config"], "gpus": cfg.gpus,
                                "goodput_rps": g, **{k: v for k, v in cost_fields(
                                    rec.cluster, cfg, g).items() if k == "cost_per_hour"}})
        step.wall_s = time.perf_counter() - t0
        return step

    def result(self, wall_s: float = 0.0) -> PlanResult:
        """The plan as its steps stand now."""
        return PlanResult(self.recipe.name, self.rate, self.search, self.recipe.cluster.gpus,
                          [self.steps[g] for g in sorted(self.steps)], wall_s,
                          self.tune.storage or f"{self.tune.out}/study.db",
                          objective=self.objective)

    def run(self, on_step: Callable[[Step], None] | None = None,
            on_trial: Callable | None = None) -> PlanResult:
        t0 = time.perf_counter()
        bounded = self.tune.evaluator == "sim"  # the bounds are the simulator's
        tops = ceilings(self.recipe, bounded)
        cands = []
        for g, top in tops.items():
            if top is None:
                self.steps[g] = Step(g, INFEASIBLE, reason="no configuration survives "
                                     "pruning (memory, zero-load latency, structure)")
            elif top < self.rate:
                self.steps[g] = Step(g, BOUND, ceiling_rps=top, reason=f"capacity bound × "
                                     f"margin {top:.3f} < {self.rate:g} req/s")
            else:
                self.steps[g] = Step(g, SKIPPED, ceiling_rps=top)
                cands.append(g)

        def tune(g: int) -> bool:
            interrupt.check()
            if on_step:
                on_step(self.steps[g])  # about to tune
            ok = self.tune_at(g, on_trial).sustains(self.rate)
            if on_step:
                on_step(self.steps[g])
            return ok

        if self.search == "up":
            for g in cands:
                if tune(g):
                    break
        elif cands and tune(cands[-1]):  # bisect: the largest first; none sustains if not
            lo, hi = 0, len(cands) - 1   # cands[hi] sustains; below lo none is known to
            while lo < hi:
                mid = (lo + hi) // 2
                if tune(cands[mid]):
                    hi = mid
                else:
                    lo = mid + 1
        if self.by_cost:  # a larger count holds only configurations of more GPUs: stop
            # once the cheapest GPU times the count costs more than the cheapest answer
            # (below the fewest that sustain it, none does: searched, or bisect's assumption)
            price = min(t.price_per_gpu_hour or 0.0 for t in self.recipe.cluster.types)
            found = min((g for g in cands if self.steps[g].status == TUNED
                         and self.steps[g].sustains(self.rate)), default=None)
            for g in cands if found is not None else []:
                if g <= found or self.steps[g].status == TUNED:
                    continue
                best = self.result().cheapest  # found sustains the rate: one does, priced
                if best is None or g * price > best["cost_per_hour"]:
                    break
                tune(g)
        res = self.result(time.perf_counter() - t0)
        a = res.answer
        cfg, goodput, _ = res.answer_config
        if a is not None and bounded:  # the simulator's answer: what it lies beyond
            from hastune.evaluators.sim import Evaluation

            ev = Evaluation(budget_recipe(self.recipe, a.gpus), requests=1)
            res.caveats = ev.caveats(parse_config(cfg), float(goodput or 0.0))
        return res


def run(recipe: str | Path | Recipe, rate: float, *, search: str = "up", plots: bool = True,
        on_step: Callable[[Step], None] | None = None, objective: str = "gpus",
        **options: Any) -> PlanResult:
    """`hastune plan` from Python: the fewest GPUs whose best configuration sustains `rate`
    req/s (`objective` gpus), or the cheapest configuration that does (cost), with plan.json,
    plan.csv, plan.png (with prices plan_pareto.csv and plan_cost.png) and the answer's
    best_config.yaml in `out` (`result.files`). `options` are hastune.tune.TuneOptions'
    fields (trials per count,
    sampler, evaluator, storage, study, out="plan-out", seed, prune, force). Bad input raises
    InputError before any work; Ctrl-C raises KeyboardInterrupt (finished trials are kept)."""
    import optuna

    from hastune.recipe import load_recipe
    from hastune.tune.runner import TuneOptions
    from hastune.tune.samplers import make_sampler
    from hastune.tune.storage import check_out, check_storage
    from hastune.worklimit import check_tune_work

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    opts = TuneOptions(**{"out": "plan-out", **options})
    check_storage(opts.storage, Path(opts.out))
    check_out(Path(opts.out))
    make_sampler(opts.sampler, 0)  # unknown sampler / missing torch: fail before any work
    rec = recipe if isinstance(recipe, Recipe) else load_recipe(Path(recipe))
    if opts.evaluator == "sim":
        check_tune_work(rec, opts.prune, "plan")
    res = Planner(rec, rate, opts, search=search, objective=objective).run(on_step=on_step)
    from hastune.plan_outputs import write_outputs

    a = res.answer
    res.files = write_outputs(res, budget_recipe(rec, a.gpus) if a else rec, Path(opts.out),
                              plots)
    return res

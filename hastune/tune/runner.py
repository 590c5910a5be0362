"""Stage 2 of Hybrid Auto Selection: Bayesian optimisation over the survivors of pruning.

The optuna study is the record. `prepare` runs once per study (pruning, its probes recorded as
trials, the warm start enqueued, the survivors stored on the study); every worker — this
process, K local processes, or processes on other machines sharing the storage — then loops
ask → evaluate → tell until the study holds `trials` evaluations. Re-running the same command
resumes: finished trials are read back, never repeated.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna

from hastune.config import AnyConfig, config_dict, parse_config
from hastune.errors import InputError
from hastune.evaluate import Evaluation
from hastune.evaluators import Evaluator, EvaluatorOptions, make_evaluator
from hastune.prune import RULES, Bounds, derived_margin, keeps, prune
from hastune.recipe import Recipe, load_recipe
from hastune.space import space_for
from hastune.tune.params import Parametrization
from hastune.tune.samplers import CONSTRAINT, SkoptProposer, make_sampler
from hastune.tune.storage import fail_dead_trials, open_storage, settle, worker_id

log = logging.getLogger(__name__)
Config = AnyConfig
COMPLETE = optuna.trial.TrialState.COMPLETE
# Suggestions in a row that evaluate nothing (duplicates, invalid, pruned) before the next
# unevaluated survivor is enqueued. With pruning the survivors are ranked by bound, so an idle
# sampler is better replaced soon; without pruning the fall-back is the space's own order (no
# better than a guess), so the sampler gets longer.
IDLE_LIMIT = {True: 3, False: 10}


@dataclass
class TuneOptions:
    trials: int = 40
    sampler: str = "tpe"
    evaluator: str = "sim"
    storage: str | None = None
    study: str | None = None
    workers: int = 1
    out: str = "tune-out"
    seed: int | None = None
    prune: bool = True
    probe_top: int = 3
    margin: float | None = None     # capacity-rule margin; None: derived (prune.derived_margin)
    early_stop: bool = False        # a trial failing at the incumbent gets a coarse value
    warm_start: int = 5
    backend: str = "local"          # the engine's, with evaluator real
    ray_address: str | None = None


def config_key(cfg: Config) -> str:
    return json.dumps(config_dict(cfg), sort_keys=True)


def evaluated_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=(COMPLETE,))
            if t.user_attrs.get("evaluated")]


@dataclass
class Prepared:
    survivors: list[dict]          # ranked by bound, best first
    report: dict[str, Any]
    configs: list[Config] = field(default_factory=list)  # the survivors, parsed once
    keys: list[str] = field(default_factory=list)        # and their config keys
    allowed: set[str] = field(init=False)                # the keys, for membership tests

    def __post_init__(self) -> None:
        self.allowed = set(self.keys)


class Tuner:
    def __init__(self, recipe: Recipe, opts: TuneOptions, evaluator: Evaluator | None = None):
        """`evaluator`: what measures each trial (default: `opts.evaluator` from the registry,
        hastune.evaluators); pruning always works from the recipe's profile."""
        if opts.backend == "ray" and opts.workers > 1 and not (
                opts.ray_address or os.environ.get("RAY_ADDRESS")):
            raise InputError(None, "--ray-address", "K tune workers with --backend ray would "
                             "start K local Ray clusters", "start one with `ray start --head` "
                             "and pass its address with --ray-address")
        if opts.trials < 1:
            raise InputError(None, "--trials", f"must be ≥ 1 (got {opts.trials})",
                             "give the number of evaluations to run")
        if opts.workers < 1:
            raise InputError(None, "--workers", f"must be ≥ 1 (got {opts.workers})",
                             "give the number of worker processes")
        self.recipe = recipe
        self.opts = opts
        self.seed = recipe.seed if opts.seed is None else opts.seed
        if evaluator is None:
            evaluator = make_evaluator(opts.evaluator, recipe, EvaluatorOptions(
                backend=opts.backend, ray_address=opts.ray_address))
        self.evaluator: Evaluator = evaluator
        # the profile and requests pruning works from (the simulator's, whatever measures)
        self.ev = evaluator if isinstance(evaluator, Evaluation) else Evaluation(recipe)
        self.spaces = {a: space_for(a, recipe.path, recipe.search_space)
                       for a in recipe.architectures}
        for space in self.spaces.values():  # before any work: each can run something
            self.ev.check_space(space, space.source)
        self.pz = Parametrization(self.spaces, recipe.cluster.gpus)
        self.bounds = Bounds(recipe, self.ev.profile, self.ev.requests)
        self.margin = derived_margin(recipe) if opts.margin is None else opts.margin
        self.study_name = opts.study or f"{recipe.name}-{'+'.join(recipe.architectures)}"
        self.prepared: Prepared | None = None

    # -- the study ------------------------------------------------------------------------
    def open_study(self, worker: int = 0) -> optuna.Study:
        storage = open_storage(self.opts.storage, Path(self.opts.out))
        sampler = make_sampler(self.opts.sampler, self.seed + worker)
        return optuna.create_study(storage=storage, study_name=self.study_name,
                                   direction="maximize", sampler=sampler, load_if_exists=True)

    def feasible(self, cfg: Config) -> bool:
        return self.bounds.memory_ok(cfg)

    def runnable(self, cfg: Config) -> bool:
        """Whether the evaluator can measure `cfg` (the simulator: anything the recipe can
        run; the engine: one device per worker, no mitosis, …)."""
        return self.evaluator.runnable(cfg)

    def prepare(self, study: optuna.Study,
                on_trial: Callable[[optuna.trial.FrozenTrial], None] | None = None) -> Prepared:
        """Prune once per study; later calls (resumes, workers) read the stored result."""
        attrs = study.user_attrs
        if "survivors" not in attrs:
            cands: list[tuple[float, Config]] = []
            report: dict[str, Any] = {"total": 0, "kept": 0, "rules": dict.fromkeys(RULES, 0),
                                      "lower_bound_rps": 0.0, "pruned": self.opts.prune}
            # several architectures share one lower bound: a goodput any of them reached bounds
            # the optimum of all (splitting probe_top between them was tried: no better)
            for space in self.spaces.values():
                if self.opts.prune:
                    rep = prune(self.recipe, self.ev.profile, self.ev.requests, space,
                                evaluate=lambda c: self._record(study, c, on_trial),
                                probe_top=self.opts.probe_top, margin=self.margin,
                                lower_bound=report["lower_bound_rps"],
                                runnable=None if self.evaluator is self.ev
                                else self.runnable)
                    cands += [(c.bound, c.config) for c in rep.kept]
                    for r, n in rep.removed.items():
                        report["rules"][r] += n
                    report["total"] += rep.total
                    report["lower_bound_rps"] = max(report["lower_bound_rps"], rep.lower_bound)
                else:
                    for c in space.configs(self.recipe.cluster.gpus):
                        report["total"] += 1
                        if self.evaluator is not self.ev and not self.runnable(c):
                            report["rules"]["engine"] += 1
                        elif self.feasible(c):
                            cands.append((0.0, c))
                        else:
                            report["rules"]["memory"] += 1
            if self.opts.prune:
                # the final lower bound also applies to the spaces pruned before it was reached
                lb = report["lower_bound_rps"]
                probed = {t.user_attrs.get("key") for t in evaluated_trials(study)}
                keep = [(b, c) for b, c in cands
                        if keeps(self.recipe, b, self.margin, lb) or config_key(c) in probed]
                report["rules"]["capacity"] += len(cands) - len(keep)
                cands = self._diversified(keep)
            # without pruning, no bound ranking either: plain BO from the space's own order
            ranked = [json.loads(config_key(c)) for _, c in cands]
            report["kept"] = len(ranked)
            study.set_user_attr("prune_report", report)
            study.set_user_attr("survivors", ranked)
            done = {t.user_attrs.get("key") for t in evaluated_trials(study)}
            n = 0
            for d in ranked:  # warm start: the best-bounded survivors not yet evaluated
                if n >= self.opts.warm_start or not self.opts.prune:
                    break
                cfg = parse_config(d)
                if config_key(cfg) in done:
                    continue
                study.enqueue_trial(self.pz.to_params(cfg), skip_if_exists=True)
                n += 1
        survivors = study.user_attrs["survivors"]
        configs = [parse_config(d) for d in survivors]
        self.prepared = Prepared(survivors, study.user_attrs["prune_report"], configs,
                                 [config_key(c) for c in configs])
        if survivors:
            self.pz = self.pz.narrowed(configs)
        return self.prepared

    def _diversified(self, cands: list[tuple[float, Config]]) -> list[tuple[float, Config]]:
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
            space = self.spaces[cfg.architecture]
            alloc = (cfg.architecture, *(getattr(cfg, k) for k in space.gpu_knobs()))
            rounds[i] = seen.get(alloc, 0)
            seen[alloc] = rounds[i] + 1
        return [cands[i] for i in sorted(order, key=lambda i: rounds[i])]

    def _record(self, study: optuna.Study, cfg: Config,
                on_trial: Callable[[optuna.trial.FrozenTrial], None] | None) -> float:
        """Evaluate one configuration as a trial of the study (used for pruning's probes)."""
        key = config_key(cfg)
        for t in evaluated_trials(study):
            if t.user_attrs.get("key") == key:
                return float(t.value or 0.0)
        study.enqueue_trial(self.pz.to_params(cfg))
        trial = study.ask()
        got = self.pz.suggest(trial)
        assert got is not None and config_key(got) == key
        return self._evaluate_and_tell(study, trial, got, on_trial, incumbent=None,
                                       source="prune-probe")

    # -- one trial ----------------------------------------------------------------------------
    def _evaluate_and_tell(self, study: optuna.Study, trial: optuna.Trial, cfg: Config,
                           on_trial: Callable[[optuna.trial.FrozenTrial], None] | None,
                           incumbent: float | None, source: str = "sampler") -> float:
        t0 = time.perf_counter()
        trial.set_user_attr("worker", worker_id())
        try:
            res = self.evaluator.goodput(cfg, incumbent=incumbent,
                                         early_stop=self.opts.early_stop)
        except BaseException:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        attrs = {
            "config": json.loads(config_key(cfg)), "key": config_key(cfg), "evaluated": True,
            "source": source, "probes": len(res.probes), "early_stopped": res.early_stopped,
            "wall_s": time.perf_counter() - t0, "gpus": cfg.gpus,
        }
        for k, v in attrs.items():
            trial.set_user_attr(k, v)
        trial.set_constraint(CONSTRAINT, 0.0)
        study.tell(trial, res.goodput_rps)
        if on_trial:
            on_trial(_frozen(study, trial.number))
        return res.goodput_rps

    def work(self, study: optuna.Study, worker: int = 0,
             on_trial: Callable[[optuna.trial.FrozenTrial], None] | None = None) -> None:
        """ask → evaluate → tell until the study holds `trials` evaluations (or the space is
        exhausted)."""
        prep = self.prepared or self.prepare(study, on_trial)
        skopt = (SkoptProposer(self.pz, self.seed + worker,
                               lambda c: config_key(c) in prep.allowed)
                 if self.opts.sampler == "skopt" else None)
        try:
            self._loop(study, prep, skopt, on_trial)
        finally:
            settle(study)

    def _loop(self, study: optuna.Study, prep: Prepared, skopt: SkoptProposer | None,
              on_trial: Callable[[optuna.trial.FrozenTrial], None] | None) -> None:
        idle = 0
        limit = IDLE_LIMIT[self.opts.prune]
        while True:
            fail_dead_trials(study)
            evals = evaluated_trials(study)
            if len(evals) >= self.opts.trials:
                return
            done = {t.user_attrs["key"]: float(t.value or 0.0) for t in evals}
            if len(done) >= len(prep.allowed):
                return  # every surviving configuration has been evaluated
            waiting = study.get_trials(deepcopy=False,
                                       states=(optuna.trial.TrialState.WAITING,))
            if skopt is not None and not waiting and idle < limit:
                params = skopt.propose(study, done)
                if params is not None:
                    study.enqueue_trial(params)
                else:
                    idle = limit  # skopt had nothing new: take the next survivor
            if idle >= limit and not study.get_trials(
                    deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
                nxt = next((c for c, k in zip(prep.configs, prep.keys) if k not in done), None)
                if nxt is None:
                    return
                study.enqueue_trial(self.pz.to_params(nxt))
                idle = 0
            trial = study.ask()
            trial.set_user_attr("worker", worker_id())
            cfg = self.pz.suggest(trial)
            key = config_key(cfg) if cfg is not None else None
            if cfg is None or key not in prep.allowed:
                reason = "invalid" if cfg is None else (
                    "infeasible" if not self.feasible(cfg) else "pruned")
                trial.set_constraint(CONSTRAINT, 1.0)
                trial.set_user_attr("reason", reason)
                if cfg is not None:
                    trial.set_user_attr("config", json.loads(key))  # type: ignore[arg-type]
                study.tell(trial, 0.0)
                idle += 1
                if cfg is not None:
                    self._enqueue_nearest(study, prep, cfg, done)
                continue
            trial.set_user_attr("key", key)
            if key not in done:  # look again: another worker may have taken it meanwhile
                state, value = self._elsewhere(study, key, trial.number)
                if state == "running":
                    trial.set_user_attr("reason", "in progress in another worker")
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    idle += 1
                    continue
                if state == "done":
                    done[key] = value
            if key in done:
                trial.set_constraint(CONSTRAINT, 0.0)
                trial.set_user_attr("duplicate", True)
                trial.set_user_attr("config", json.loads(key))
                trial.set_user_attr("key", key)
                study.tell(trial, done[key])
                idle += 1
                self._enqueue_nearest(study, prep, cfg, done)
                continue
            best = max(done.values(), default=0.0)
            self._evaluate_and_tell(study, trial, cfg, on_trial,
                                    incumbent=best if best > 0 else None)
            idle = 0


    def _enqueue_nearest(self, study: optuna.Study, prep: Prepared, cfg: Config,
                         done: dict[str, float]) -> None:
        """The sampler asked for a configuration that teaches nothing new (evaluated already,
        pruned or infeasible): evaluate instead the unevaluated survivor nearest to it — where
        the sampler wants to look — ties going to the better-ranked survivor. Without this a
        converged sampler re-proposes its favourites, each proposal a stored trial."""
        if not self.opts.prune or study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            return  # without pruning: the plain sampler (a repair made plain TPE worse)
        best: tuple[float, Config] | None = None
        for other, key in zip(prep.configs, prep.keys):  # in rank order: ties keep the first
            if key in done:
                continue
            dist = self.pz.distance(cfg, other)
            if best is None or dist < best[0]:
                best = (dist, other)
        if best is not None:
            study.enqueue_trial(self.pz.to_params(best[1]))

    @staticmethod
    def _elsewhere(study: optuna.Study, key: str, number: int) -> tuple[str | None, float]:
        """Whether another trial evaluates (`running`) or has evaluated (`done`) `key`."""
        for t in study.get_trials(deepcopy=False):
            if t.number == number or t.user_attrs.get("key") != key:
                continue
            if t.state == COMPLETE and t.user_attrs.get("evaluated"):
                return "done", float(t.value or 0.0)
            if t.state == optuna.trial.TrialState.RUNNING and "reason" not in t.user_attrs:
                return "running", 0.0
        return None, 0.0


def _frozen(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    return study._storage.get_trial(study._storage.get_trial_id_from_study_id_trial_number(
        study._study_id, number))


def worker_main(recipe_path: str, opts: dict, worker: int, start: Any = None) -> None:
    """Entry point of a worker process (multiprocessing spawn). `start`, a barrier shared by
    the workers of one command, holds each until all have loaded the study."""
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tuner = Tuner(load_recipe(recipe_path), TuneOptions(**opts))
    study = tuner.open_study(worker)
    if start is not None:
        try:
            start.wait(timeout=120)
        except threading.BrokenBarrierError:
            pass  # a sibling died or is slow: go on alone rather than not at all
    try:
        tuner.work(study, worker)
    except KeyboardInterrupt:
        pass


def options_dict(opts: TuneOptions) -> dict:
    return asdict(opts)

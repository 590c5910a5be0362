"""Stage 2 of Hybrid Auto Selection: Bayesian optimisation over the survivors of pruning.

The optuna study is the record. `prepare` runs once per study (one process prunes — its probes
recorded as trials — and stores the survivors and the warm start on the study; any other
process waits for them); every worker — this process, K local processes, or processes on
other machines sharing the storage — then runs hastune.tune.search until the study holds
`trials` evaluations, each configuration claimed before it is evaluated
(hastune.tune.claims), so none is evaluated twice. Re-running the same command resumes:
finished trials are read back, never repeated; the trials of dead workers are failed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import optuna

from hastune import archs, interrupt
from hastune.config import AnyConfig, parse_config, trial_key
from hastune.cost import Objective, cost_fields
from hastune.errors import InputError
from hastune.evaluators import Evaluator, EvaluatorOptions, make_evaluator
from hastune.evaluators.sim import Evaluation
from hastune.prune import TypedBounds, derived_margin
from hastune.recipe import Recipe
from hastune.space import SearchSpace, on_types, space_for
from hastune.tune.claims import FAIL, STALE_S, Reaper, census, claim, finish, is_memory, new_trial
from hastune.tune.identity import check_resume, recipe_sha256, study_identity
from hastune.tune.params import Parametrization
from hastune.tune.pool import MAX_WORKERS, Inline, Outcome, Processes, evaluate, resolve_workers
from hastune.tune.prepare import prune_study
from hastune.tune.samplers import CONSTRAINT, SkoptProposer, make_sampler
from hastune.tune.search import WAIT_S, Search
from hastune.tune.storage import (
    StorageFailure,
    TuneError,
    check_out,
    check_storage,
    open_storage,
    root_cause,
    storage_errors,
)

log = logging.getLogger(__name__)
Config = AnyConfig
COMPLETE = optuna.trial.TrialState.COMPLETE


@dataclass
class TuneOptions:
    trials: int = 40
    sampler: str = "tpe"
    evaluator: str = "sim"
    storage: str | None = None
    study: str | None = None
    workers: int | str = 1          # evaluation processes; "auto": the cores this one may use
    #                                 (the CLI's default; a script that asks for more than 1
    #                                 needs `if __name__ == "__main__":`, as spawn does)
    in_flight: int = 2              # evaluations under way at once (the result depends on it,
    #                                 not on workers)
    target: str | None = None       # only what this engine can launch (hastune.export.ENGINES);
    #                                 "auto" (the default of `tune` and of hastune.tune.run):
    #                                 the recipe's engine where export writes its launch files
    #                                 and it can launch any configuration of the recipe; None
    #                                 or "all": every configuration (plan, grid's checks)
    patience: int | None = None     # stop once this many evaluations in a row did not raise
    #                                 the best goodput (None: run to --trials)
    out: str = "tune-out"
    seed: int | None = None
    prune: bool = True
    probe_top: int = 3
    margin: float | None = None     # capacity-rule margin; None: derived (prune.derived_margin)
    sustain_rps: float | None = None  # plan --objective cost: the capacity rule keeps what
    #                                   could sustain this rate instead of what could near the
    #                                   best goodput probed (None: tune's rule)
    early_stop: bool = False        # a search that can no longer beat the incumbent stops
    warm_start: int = 5
    backend: str = "local"          # the engine's, with evaluator real
    ray_address: str | None = None
    engine: str | None = None       # evaluator real on vllm / sglang (hastune.evaluators.openai)
    launch_cmd: str | None = None   # … started by this command instead of the export
    prepare_timeout_s: float = 3600.0  # how long to wait for another process's pruning
    force: bool = False             # resume a study tuned with another recipe or sampler


def evaluated_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=(COMPLETE,))
            if t.user_attrs.get("evaluated")]


def trial_goodput(t: optuna.trial.FrozenTrial) -> float:
    """An evaluated trial's goodput (req/s). Its value is the recipe's objective: the goodput
    itself, or (goodput_per_dollar) goodput × 3600 / cost, with the goodput in `goodput_rps`
    (trials recorded before objectives existed have only the value: their goodput)."""
    g = t.user_attrs.get("goodput_rps")
    return float(g if g is not None else (t.value or 0.0))


@dataclass
class Prepared:
    survivors: list[dict]          # ranked by bound, best first
    report: dict[str, Any]
    configs: list[Config] = field(default_factory=list)  # the survivors, parsed once
    keys: list[str] = field(default_factory=list)        # and their config keys
    warm: list[dict] = field(default_factory=list)       # the warm start, to evaluate first
    allowed: set[str] = field(init=False)                # the keys, for membership tests

    def __post_init__(self) -> None:
        self.allowed = set(self.keys)


class Tuner:
    def __init__(self, recipe: Recipe, opts: TuneOptions, evaluator: Evaluator | None = None):
        """`evaluator`: what measures each trial (default: `opts.evaluator` from the registry,
        hastune.evaluators); pruning always works from the recipe's profile."""
        if opts.evaluator != "sim":  # an engine's trials: one GPU type
            recipe.check_one_type()
        opts.workers = resolve_workers(opts.workers, opts.evaluator)
        if opts.backend == "ray" and opts.workers > 1 and not (
                opts.ray_address or os.environ.get("RAY_ADDRESS")):
            raise InputError(None, "--ray-address", "K tune workers with --backend ray would "
                             "start K local Ray clusters", "start one with `ray start --head` "
                             "and pass its address with --ray-address")
        if opts.evaluator != "sim" and opts.workers > 1 and (opts.engine or opts.launch_cmd
                                                             or opts.backend != "ray"):
            raise InputError(None, "--workers", f"{opts.workers} engine trials at once on this "
                             "machine would share its devices and measure each other",
                             "give --workers 1, or run the engine's workers on a Ray cluster "
                             "(--backend ray --ray-address ADDR), one trial per process")
        if opts.trials < 1:
            raise InputError(None, "--trials", f"must be ≥ 1 (got {opts.trials})",
                             "give the number of evaluations to run")
        from hastune.export import ENGINES

        auto = opts.target == "auto"
        if auto:
            opts.target = recipe.engine.name if recipe.engine.name in ("vllm", "sglang") else None
        elif opts.target == "all":
            opts.target = None
        if opts.target is not None and opts.target not in ENGINES:
            raise InputError(None, "--target", f"unknown engine {opts.target!r}",
                             f"use one of {', '.join(ENGINES)}, auto (the recipe's engine) "
                             "or all (every configuration)")
        if opts.patience is not None and (isinstance(opts.patience, bool) or not isinstance(
                opts.patience, int) or opts.patience < 1):
            raise InputError(None, "--patience", f"must be a whole number ≥ 1 (got "
                             f"{opts.patience!r})", "give how many evaluations in a row may "
                             "fail to raise the best goodput before the search stops, or "
                             "leave it out to run --trials evaluations")
        if isinstance(opts.in_flight, bool) or not isinstance(opts.in_flight, int) or not (
                1 <= opts.in_flight <= MAX_WORKERS):
            raise InputError(None, "--in-flight", f"must be a whole number in 1..{MAX_WORKERS} "
                             f"(got {opts.in_flight!r})", "give how many evaluations the "
                             "search keeps under way at once (default 2)")
        check_storage(opts.storage, Path(opts.out))  # before any work: one that cannot work
        if opts.storage is None:
            check_out(Path(opts.out))
        self.recipe = recipe
        self.opts = opts
        self.objective = Objective(recipe)  # what the study's values are
        self.reaper = Reaper()
        self.seed = recipe.seed if opts.seed is None else opts.seed
        # how a pool process makes its own evaluator (None: the one given, in this process)
        self.evaluator_spec: tuple[str, EvaluatorOptions | None] | None = None
        if evaluator is None:
            self.evaluator_spec = (opts.evaluator, EvaluatorOptions(
                backend=opts.backend, ray_address=opts.ray_address, engine=opts.engine,
                launch_cmd=opts.launch_cmd))
            evaluator = make_evaluator(opts.evaluator, recipe, self.evaluator_spec[1])
        elif type(evaluator) is Evaluation:
            self.evaluator_spec = ("sim", None)
        self.evaluator: Evaluator = evaluator
        # the simulator's evaluation: the profile and requests pruning works from, whatever
        # measures the trials
        self.simulation = evaluator if isinstance(evaluator, Evaluation) else Evaluation(recipe)
        self.target_note: str | None = None  # why an automatic target searched everything
        self.spaces = self._spaces()
        if auto and opts.target is not None and not self._any_deployable():
            self.target_note = (f"the recipe's engine, {opts.target}, can launch none of its "
                                f"configurations ({', '.join(recipe.architectures)} as the "
                                "search spaces give them): every configuration was searched; "
                                "candidates.csv says what blocks each")
            opts.target = None
            self.spaces = self._spaces()
        for space in self.spaces.values():  # before any work: each can run something
            self.simulation.check_space(space, space.source)
        self.pz = Parametrization(self.spaces, recipe.cluster.gpus)
        self.bounds = TypedBounds(recipe, self.simulation)  # per GPU type
        self.margin = derived_margin(recipe) if opts.margin is None else opts.margin
        self.study_name = opts.study or f"{recipe.name}-{'+'.join(recipe.architectures)}"
        self.prepared: Prepared | None = None
        self.recipe_sha256 = recipe_sha256(recipe, self.simulation.profile)
        self.history: list[dict] = []  # the settings the study was searched with
        self.kept: tuple[float, int, Any] | None = None  # (value, trial, search): the best
        self.stop_reason: str | None = None  # why the search stopped (the summary says)
        self.evaluations: Inline | Processes | None = None  # this command's (run_workers)

    def _spaces(self) -> dict[str, SearchSpace]:
        """Each architecture's space, with the knobs the target needs (target_knobs) and,
        on a cluster of several GPU types, each pool's type as a knob (every type; within the
        budget, not all of it: `at_most`)."""
        rec = self.recipe
        types = [t.gpu for t in rec.cluster.types]
        return {a: on_types(space_for(a, rec.path, rec.search_space, self.simulation.profile)
                            .with_knobs(archs.get(a).target_knobs(self.opts.target)), types)
                for a in rec.architectures}

    def _any_deployable(self) -> bool:
        """Whether the target can launch any configuration of the spaces (the first found
        ends the look)."""
        return any(self.deployable(c) for sp in self.spaces.values()
                   for c in sp.configs(self.recipe.cluster.gpus))

    # -- the study ------------------------------------------------------------------------
    def open_study(self, worker: int = 0) -> optuna.Study:
        storage = open_storage(self.opts.storage, Path(self.opts.out))
        sampler = make_sampler(self.opts.sampler, self.seed + worker)
        try:
            study = optuna.create_study(storage=storage, study_name=self.study_name,
                                        direction="maximize", sampler=sampler,
                                        load_if_exists=True)
            self.reaper.reap(study)  # repair what dead processes left
            self.history = check_resume(study, study_identity(
                self.recipe, self.recipe_sha256, self.opts.sampler, self.seed,
                self.opts.evaluator + (f" on {self.opts.engine}" if self.opts.engine else "")
                + (f", for {self.opts.target}" if self.opts.target else "")),
                self.opts.force, self.opts.storage or self.opts.out)
        except storage_errors() as exc:
            raise InputError(self.opts.storage or self.opts.out, "--storage",
                             f"cannot open study {self.study_name!r} ({root_cause(exc)})",
                             "make the storage writable, or give another --storage") from None
        return study

    def feasible(self, cfg: Config) -> bool:
        b = self.bounds(cfg)
        return b is None or b.memory_ok(cfg)  # several types: the simulator judges it

    def deployable(self, cfg: Config, engine: str | None = None) -> bool:
        """Whether `engine` (default: --target) can launch `cfg` as tuned."""
        from hastune.export import blocking_for

        engine = engine or self.opts.target
        return engine is None or not blocking_for(cfg, self.recipe.cluster.node_sizes,
                                                  engine, *self.model_facts)

    @cached_property
    def model_facts(self) -> tuple[str, str | None, bool]:
        """The recipe's `model_facts`, read once (pruning asks for every configuration)."""
        return model_facts(self.recipe)

    def runnable(self, cfg: Config) -> bool:
        """Whether the evaluator can measure `cfg` (the simulator: anything the recipe can
        run; the engine: one device per worker, no mitosis, …)."""
        return self.evaluator.runnable(cfg)

    def prepare(self, study: optuna.Study,
                on_trial: Callable[[optuna.trial.FrozenTrial], None] | None = None) -> Prepared:
        """Prune once per study (one process of all that share it; the others wait for the
        result); later calls (resumes, workers) read the stored result."""
        if "survivors" not in study.user_attrs:
            self._prepare_once(study, on_trial)
        attrs = study.user_attrs
        survivors = attrs["survivors"]
        configs = [parse_config(d) for d in survivors]
        if self.opts.target:  # a study pruned for another target, continued with --force
            keep = [i for i, c in enumerate(configs) if self.deployable(c)]
            survivors, configs = [survivors[i] for i in keep], [configs[i] for i in keep]
        self.prepared = Prepared(survivors, attrs["prune_report"], configs,
                                 [trial_key(c) for c in configs],
                                 attrs.get("warm_start", []))
        if survivors:
            self.pz = self.pz.narrowed(configs)
        return self.prepared

    def _prepare_once(self, study: optuna.Study, on_trial) -> None:
        # pruning works in goodput: the study's values (the objective's) converted back
        def record(cfg: Config) -> float:
            return self.objective.goodput(cfg, self._record(study, cfg, on_trial))

        def record_many(cfgs: list[Config]) -> list[float]:
            return [self.objective.goodput(c, v)
                    for c, v in zip(cfgs, self._record_many(study, cfgs, on_trial))]

        def done() -> set[str]:
            return set(census(study).evaluated)

        if is_memory(study):  # no other process can see it
            prune_study(self, study, record, done, record_many)
            return
        mine: optuna.Trial | None = None
        pruned = False
        t0 = time.monotonic()
        try:
            while True:
                self.reaper.reap(study)
                preparers = census(study).preparers
                # after the census: a preparer stores the survivors before its trial ends
                if "survivors" in study.user_attrs:
                    break
                if mine is not None and mine.number not in preparers:
                    mine = None  # failed under us (taken for dead): offer again
                if mine is None and not preparers:
                    mine = new_trial(study, role="prepare")
                    continue
                if mine is not None and preparers[0] == mine.number:
                    prune_study(self, study, record, done, record_many)
                    pruned = True
                    break
                waited = time.monotonic() - t0
                if waited > self.opts.prepare_timeout_s:
                    raise TuneError(
                        f"study {self.study_name!r}: waited {waited:.0f} s for trial "
                        f"#{preparers[0]} to finish pruning; it is still running. Wait for "
                        "it and run the same command again (its worker is taken for dead "
                        f"{STALE_S:.0f} s after its last heartbeat)")
                time.sleep(WAIT_S)
        finally:
            if mine is not None:
                with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                    mine.set_user_attr("reason", "pruned the study" if pruned
                                       else "waited for another process's pruning")
                    finish(study, mine, state=FAIL)

    def _record_many(self, study: optuna.Study, cfgs: list[Config],
                     on_trial: Callable[[optuna.trial.FrozenTrial], None] | None
                     ) -> list[float]:
        """`_record` of several configurations at once: each claimed in turn, those this
        process won evaluated together in its pool (`self.evaluations`, else one by one),
        their results told in the order claimed; the others read back as `_record` does."""
        pool = self.evaluations
        won: dict[int, tuple[optuna.Trial, Config]] = {}
        for i, cfg in enumerate(cfgs):
            key = trial_key(cfg)
            c = census(study)
            if pool is None or key in c.evaluated or key in c.claimed:
                continue
            trial, got, outcome = self._claim_probe(study, cfg, key)
            if outcome != "won":
                trial.set_user_attr("reason", "in progress in another worker")
                finish(study, trial, state=FAIL)
                continue
            pool.submit(trial.number, got, None)
            won[i] = (trial, got)
        out = []
        try:
            for i, cfg in enumerate(cfgs):
                if i in won:
                    trial, got = won.pop(i)
                    o = pool.result(trial.number)  # type: ignore[union-attr]
                    out.append(self.tell(study, trial, got, o, on_trial, "prune-probe"))
                else:
                    out.append(self._record(study, cfg, on_trial))
        finally:
            for trial, _ in won.values():  # cut off: failed, so that a resume evaluates them
                with contextlib.suppress(Exception):
                    finish(study, trial, state=FAIL)
        return out

    def _claim_probe(self, study: optuna.Study, cfg: Config, key: str
                     ) -> tuple[optuna.Trial, Config, str]:
        """A new trial with `cfg`'s parameters fixed, claiming it (claims.claim's outcome)."""
        trial = new_trial(study, self.pz.to_params(cfg))
        got = self.pz.suggest(trial)
        if got is None or trial_key(got) != key:
            raise AssertionError(f"parameters of {key} describe {got}")
        trial.set_user_attr("key", key)
        outcome, _ = claim(study, trial, key, quota=None)
        return trial, got, outcome

    def _record(self, study: optuna.Study, cfg: Config,
                on_trial: Callable[[optuna.trial.FrozenTrial], None] | None) -> float:
        """Evaluate one configuration as a trial of the study (pruning's probes), or read its
        goodput back."""
        key = trial_key(cfg)
        while True:
            c = census(study)
            if key in c.evaluated:
                return c.evaluated[key]
            if key not in c.claimed:
                trial, got, outcome = self._claim_probe(study, cfg, key)
                if outcome == "won":
                    return self._evaluate_and_tell(study, trial, got, on_trial,
                                                   incumbent=None, source="prune-probe")
                trial.set_user_attr("reason", "in progress in another worker")
                finish(study, trial, state=FAIL)
            time.sleep(WAIT_S)  # a worker that died with it claimed: the reaper frees it
            self.reaper.reap(study)

    # -- one trial ----------------------------------------------------------------------------
    def _evaluate_and_tell(self, study: optuna.Study, trial: optuna.Trial, cfg: Config,
                           on_trial: Callable[[optuna.trial.FrozenTrial], None] | None,
                           incumbent: float | None, source: str = "sampler") -> float:
        try:
            out = evaluate(self.evaluator, self.recipe.slo, cfg, incumbent,
                           self.opts.early_stop)
        except BaseException:
            finish(study, trial, state=optuna.trial.TrialState.FAIL)
            raise
        return self.tell(study, trial, cfg, out, on_trial, source)

    def tell(self, study: optuna.Study, trial: optuna.Trial, cfg: Config, out: Outcome,
             on_trial: Callable[[optuna.trial.FrozenTrial], None] | None,
             source: str = "sampler") -> float:
        """Record one evaluation as its trial's result — the value of the recipe's objective
        (hastune.cost.Objective), the goodput beside it — and keep its search when it is the
        best of this command so far (the summary reads it instead of searching again).
        Returns the value."""
        value = self.objective.value(cfg, out.goodput_rps)
        attrs = {
            "config": json.loads(trial_key(cfg)), "key": trial_key(cfg), "evaluated": True,
            "source": source, "probes": out.probes, "early_stopped": out.early_stopped,
            "wall_s": out.wall_s, "gpus": cfg.gpus, "goodput_rps": out.goodput_rps,
            **cost_fields(self.recipe.cluster, cfg, out.goodput_rps),
        }
        if out.pid and out.pid != os.getpid():
            attrs["evaluated_by"] = out.pid
        if out.at_goodput is not None:
            attrs["at_goodput"] = out.at_goodput
        try:
            for k, v in attrs.items():
                trial.set_user_attr(k, v)
            trial.set_constraint(CONSTRAINT, 0.0)
            told = finish(study, trial, value)
        except optuna.exceptions.UpdateFinishedTrialError:
            told = False
        except storage_errors() as exc:
            raise StorageFailure(
                f"the study's storage refused a write ({root_cause(exc)}); trial "
                f"#{trial.number} measured {out.goodput_rps:.3f} req/s for {attrs['key']} but "
                "is not recorded. The trials finished before it are in the storage: make it "
                "writable and run the same command to resume") from None
        if not told:
            log.warning("trial #%d was failed by another process (it took this one for "
                        "dead); its result is not recorded", trial.number)
        else:
            if out.result is not None and not out.early_stopped and (
                    self.kept is None or value > self.kept[0]):
                self.kept = (value, trial.number, out.result)
            if on_trial:
                on_trial(_frozen(study, trial.number))
        interrupt.check()  # a Ctrl-C dropped during the evaluation: stop, its result kept
        return value

    def final(self, number: int, cfg: Config):
        """The best trial's goodput search: the one this command kept, or (evaluated by an
        earlier command, or in another process) searched again — the same search, so the
        same probes."""
        if self.kept is not None and self.kept[1] == number:
            return self.kept[2]
        return self.simulation.goodput(cfg)

    def pool(self) -> Inline | Processes:
        """Where this command's evaluations run: `workers` processes, each with its own
        evaluator, or this one (one worker; an evaluator object given to the Tuner)."""
        if self.opts.workers > 1 and self.evaluator_spec is not None:
            return Processes(self.opts.workers, self.recipe, self.opts.early_stop,
                             *self.evaluator_spec)
        return Inline(self.evaluator, self.recipe.slo, self.opts.early_stop)

    def work(self, study: optuna.Study, worker: int = 0,
             on_trial: Callable[[optuna.trial.FrozenTrial], None] | None = None) -> None:
        """ask → evaluate → tell until the study holds `trials` evaluations (or the space is
        exhausted), with any other processes working on the same study."""
        prep = self.prepared or self.prepare(study, on_trial)
        skopt = (SkoptProposer(self.pz, self.seed + worker,
                               lambda c: trial_key(c) in prep.allowed)
                 if self.opts.sampler == "skopt" else None)
        pool = self.evaluations or self.pool()
        try:
            Search(self, study, prep, skopt, on_trial, pool).run()
        finally:
            if pool is not self.evaluations:
                pool.close()
        self.reaper.reap(study)


def _frozen(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    return study._storage.get_trial(study._storage.get_trial_id_from_study_id_trial_number(
        study._study_id, number))


def model_facts(recipe: Recipe) -> tuple[str, str | None, bool]:
    """What `hastune.export.blocking_for` needs of a recipe beside the config: Dynamo's
    backend, the model's Hugging Face architecture, whether the workload sends media."""
    from hastune.export import dynamo_backend
    from hastune.export.target import hf_architecture, multimodal

    return (dynamo_backend(recipe.engine.name), hf_architecture(recipe),
            multimodal(recipe))

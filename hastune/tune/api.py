"""Tune from Python: `hastune.tune.run(recipe, **options) -> TuneResult`, what `hastune tune`
does without printing: every input check before any work, pruning, the search (here or in
worker processes on one resumable study), the best configuration's final evaluation, the
optional recheck on the engine, caveats, the baseline comparison, the outputs in `out`, and
the exit code as data (docs/api.md)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hastune.errors import EXIT_FAILED, EXIT_GATE, EXIT_INTERRUPTED, EXIT_NO_CONFIG, InputError
from hastune.recipe import Recipe
from hastune.tune.pool import resolve_workers
from hastune.tune.progress import Progress
from hastune.tune.runner import TuneOptions, Tuner


@dataclass
class TuneResult:
    """What a tune found. `summary` is summary.json's content (None when the study could not be
    read back); `exit_code` what `hastune tune` exits with: 0 found, 3 no configuration meets
    the SLOs, 4 worse than the baseline, 1 failed (`failures` says why; finished trials are
    kept), 130 interrupted (run again to resume)."""

    summary: dict[str, Any] | None
    exit_code: int
    files: list[Path] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    interrupted: bool = False
    recheck_error: InputError | None = None  # the recheck stopped early (outputs written)

    @property
    def goodput_rps(self) -> float:
        return float(self.summary["goodput_rps"]) if self.summary else 0.0

    @property
    def best_config(self) -> Any:
        """The best configuration, parsed (None when none was evaluated)."""
        from hastune.config import parse_config

        cfg = (self.summary or {}).get("best_config")
        return parse_config(cfg) if cfg else None


def run(recipe: str | Path | Recipe, *, baseline: str | Path | None = None,
        max_regression: float = 0.05, recheck: int = 0, recheck_rounds: int = 3,
        plots: bool = True, progress: Progress | None = None, **options: Any) -> TuneResult:
    """Tune `recipe` (a path, or a Recipe loaded from one). `options` are TuneOptions' fields
    (trials=40, sampler="tpe", evaluator="sim", out="tune-out", seed, workers, storage,
    study, prune, early_stop, force, backend, ray_address, engine, launch_cmd; target="auto"
    here, as the command's). Bad input
    raises hastune.errors.InputError before any work; everything after is in the result."""
    options.setdefault("target", "auto")  # as the command: what the recipe's engine runs
    tuner, base = _checked(recipe, baseline, max_regression, recheck, recheck_rounds, options)
    progress = progress or Progress()
    t0 = time.perf_counter()
    st = tuner.open_study(0)
    progress.started(tuner, st, sum(1 for t in st.get_trials(deepcopy=False)
                                    if t.user_attrs.get("evaluated")))
    from hastune.tune.storage import root_cause
    from hastune.tune.workers import run_workers, storage_errors

    try:
        interrupted, failures = run_workers(tuner, st, progress)
    finally:
        progress.stopped()
    try:
        summary, final = _summary(tuner, st, time.perf_counter() - t0)
    except storage_errors() as exc:
        return TuneResult(None, EXIT_FAILED, failures=[
            *failures, f"cannot read the study back ({root_cause(exc)}): no outputs written"])
    recheck_error = None
    if recheck and not interrupted and not failures:
        from hastune.tune.recheck import recheck_stage

        measured, recheck_error = recheck_stage(tuner, st, recheck, recheck_rounds, summary,
                                                progress.recheck)
        final = measured or final
    _conclude(tuner, summary, final, base, max_regression, failures, interrupted)
    from hastune.tune.outputs import write_outputs

    try:
        files = write_outputs(tuner, st, summary, final, plots=plots)
    except storage_errors() as exc:
        return TuneResult(None, EXIT_FAILED, failures=[
            *failures, f"cannot write the outputs to {tuner.opts.out}: {root_cause(exc)}"])
    from hastune.jsonio import dumps

    summary = json.loads(dumps(summary))  # exactly what summary.json and --json say
    return TuneResult(summary, summary["exit_code"], files, failures, interrupted,
                      recheck_error)


def _checked(recipe: str | Path | Recipe, baseline: str | Path | None, max_regression: float,
             recheck: int, rounds: int, options: dict) -> tuple[Tuner, dict | None]:
    """The tuner, after every check that needs no work (storage, outputs, options, the
    recipe's simulation size, the recheck, the sampler, the baseline's recipe)."""
    import optuna

    from hastune.recipe import load_recipe
    from hastune.tune.identity import check_baseline, read_baseline
    from hastune.tune.recheck import check_recipe
    from hastune.tune.samplers import make_sampler
    from hastune.tune.storage import check_out, check_storage
    from hastune.worklimit import check_tune_work

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    opts = TuneOptions(**options)
    check_storage(opts.storage, Path(opts.out))  # before any work: where things go
    check_out(Path(opts.out))
    if not (math.isfinite(max_regression) and 0 <= max_regression < 1):
        raise InputError(None, "--max-regression", f"must be a share in [0, 1) (got "
                         f"{max_regression})", "give the allowed drop, e.g. 0.05 for 5%")
    base = read_baseline(Path(baseline)) if baseline is not None else None
    opts.workers = resolve_workers(opts.workers, opts.evaluator)
    if opts.engine is not None and opts.workers > 1:
        raise InputError(None, "--workers", "trials on an engine run one at a time (each "
                         "deployment takes this machine's GPUs and the router's port)",
                         "drop --workers")
    rec = recipe if isinstance(recipe, Recipe) else load_recipe(Path(recipe))
    if opts.evaluator == "sim":
        check_tune_work(rec, opts.prune, "tune")
    check_recipe(rec, recheck, rounds, opts.evaluator, opts.engine)  # before the search
    make_sampler(opts.sampler, 0)  # unknown sampler / missing torch: fail before any work
    tuner = Tuner(rec, opts)
    if base is not None:
        check_baseline(Path(baseline), base, tuner.recipe_sha256, rec.name, opts.force)
    return tuner, base


def _summary(tuner: Tuner, st: Any, wall_s: float) -> tuple[dict, Any]:
    """summary.json's content and the best config's probes: its search as this command ran
    it, or (evaluated earlier, or by an engine) simulated again for the plots — a real re-run
    would cost as much as the trial itself."""
    from hastune.config import parse_config
    from hastune.tune.outputs import best_trial, summarize

    bt = best_trial(st)
    final = tuner.final(bt.number, parse_config(bt.user_attrs["config"])) if bt else None
    return summarize(tuner, st, wall_s, final), final


def _conclude(tuner: Tuner, summary: dict, final: Any, base: dict | None,
              max_regression: float, failures: list[str], interrupted: bool) -> None:
    """The summary's profile source, engine terms, caveats, baseline and exit code."""
    from hastune.config import parse_config

    desc = tuner.simulation.describe()
    for key in ("profile_source", "engine_terms"):  # built on demand, shipped, ...; terms
        if key in desc:
            summary[key] = desc[key]
    if summary["best_config"]:  # the simulator's (hastune.caveats); none for a measured one
        summary["caveats"] = tuner.simulation.caveats(
            parse_config(summary["best_config"]), summary["goodput_rps"],
            final.best_run if final is not None else None)
    code = 0 if summary["meets_slo"] else EXIT_NO_CONFIG
    if base is not None:
        prev = float(base.get("goodput_rps", 0.0))
        summary["baseline_goodput_rps"] = prev
        summary["max_regression"] = max_regression
        summary["regression"] = (prev - summary["goodput_rps"]) / prev if prev > 0 else 0.0
        if summary["goodput_rps"] < prev * (1 - max_regression):
            code = EXIT_GATE
    if failures:
        summary["failures"] = failures
        code = EXIT_FAILED
    summary["exit_code"] = EXIT_INTERRUPTED if interrupted else code

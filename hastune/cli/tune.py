"""`hastune tune RECIPE`: hastune.tune.run, shown as it goes (hastune/cli/tune_view.py)."""

from __future__ import annotations

from pathlib import Path

from hastune.cli import options as o
from hastune.cli.app import app
from hastune.cli.common import BACKEND_OPTION, RAY_ADDRESS_OPTION


@app.command()
def tune(
    recipe: Path = o.RECIPE, trials: int = o.TRIALS, sampler: str = o.SAMPLER,
    evaluator: str = o.EVALUATOR, storage: str | None = o.STORAGE, study: str | None = o.STUDY,
    workers: str = o.WORKERS, in_flight: int = o.IN_FLIGHT, out: Path = o.TUNE_OUT,
    seed: int | None = o.SEED, patience: int | None = o.PATIENCE, target: str | None = o.TARGET,
    no_prune: bool = o.NO_PRUNE, as_json: bool = o.JSON, no_plots: bool = o.NO_PLOTS,
    early_stop: bool = o.EARLY_STOP, baseline: Path | None = o.BASELINE,
    max_regression: float = o.MAX_REGRESSION, force: bool = o.FORCE,
    backend: str = BACKEND_OPTION, ray_address: str | None = RAY_ADDRESS_OPTION,
    engine: str | None = o.ENGINE, launch_cmd: str | None = o.LAUNCH_CMD,
    recheck: int = o.RECHECK, recheck_rounds: int = o.RECHECK_ROUNDS,
) -> None:
    """Find the deployment with the most P90 goodput: prune, then Bayesian optimisation.

    Exit codes: 0 found a configuration that meets the SLOs; 3 none does; 4 the best is worse
    than --baseline by more than --max-regression; 2 bad input (also: resuming a study tuned
    with another recipe or sampler, a --baseline of another recipe; --force allows both); 1
    the run failed (a worker died, the storage stopped accepting writes: finished trials are
    kept, re-run to resume); 130 interrupted (re-run the same command to resume)."""
    from hastune.cli.tune_view import TuneView, report
    from hastune.tune import run

    view = TuneView(as_json, recheck)
    res = run(recipe, baseline=baseline, max_regression=max_regression, recheck=recheck,
              recheck_rounds=recheck_rounds, plots=not no_plots, progress=view,
              trials=trials, sampler=sampler, evaluator=evaluator, storage=storage,
              study=study, workers=workers, in_flight=in_flight, out=str(out), seed=seed,
              prune=not no_prune, patience=patience, target=target,
              early_stop=early_stop, force=force, backend=backend, ray_address=ray_address,
              engine=engine, launch_cmd=launch_cmd)
    report(res, view, max_regression)

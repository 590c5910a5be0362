"""`hastune tune`, `hastune prune`, `hastune grid`: Hybrid Auto Selection from the CLI."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from hastune.cli import app
from hastune.cli.common import (
    BACKEND_OPTION,
    RAY_ADDRESS_OPTION,
    check_tune_work,
    dumps,
    print_caveats,
    terms_line,
)
from hastune.cli.tune_run import fail, one_line, run_workers, storage_errors
from hastune.config import parse_config
from hastune.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NO_CONFIG, InputError
from hastune.errors import EXIT_GATE as EXIT_REGRESSION
from hastune.evaluators import EVALUATORS


def _fmt_cfg(cfg: dict | None) -> str:
    """A config in one line: its architecture and the knobs not at their defaults."""
    if not cfg:
        return "-"
    try:
        d = parse_config(cfg).model_dump(exclude_defaults=True)
    except InputError:
        d = dict(cfg)
    skip = {"architecture", "kind", "name"}
    return f"{cfg['architecture']} " + " ".join(f"{k}={v}" for k, v in d.items()
                                                  if k not in skip)


class Monitor:
    """The live view: reads the study (so it shows every worker's trials)."""

    def __init__(self, tuner, study, console: Console, enabled: bool):
        self.tuner, self.study, self.console = tuner, study, console
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.seen = 0

    def render(self) -> Table:
        from hastune.tune.runner import evaluated_trials

        trials = self.study.get_trials(deepcopy=False)
        evals = sorted(evaluated_trials(self.study), key=lambda t: t.number)
        target = self.tuner.opts.trials
        best = max(evals, key=lambda t: t.value or 0.0, default=None)
        el = time.perf_counter() - self.t0
        done_now = max(len(evals) - self.seen, 0)
        eta = (el / done_now * (target - len(evals))) if done_now else float("nan")
        rep = self.study.user_attrs.get("prune_report", {})
        t = Table(title=f"hastune tune — {self.tuner.recipe.name} "
                  f"({self.tuner.opts.sampler}, seed {self.tuner.seed})", show_header=False)
        skipped = sum(1 for x in trials
                      if "reason" in x.user_attrs or x.user_attrs.get("duplicate"))
        t.add_row("evaluations", f"{len(evals)} / {target}   (trials {len(trials)}, skipped "
                  f"{skipped}: pruned, infeasible or already evaluated)")
        if rep:
            t.add_row("pruned", f"{rep.get('total', 0) - rep.get('kept', 0)} of "
                      f"{rep.get('total', 0)} configs: " + ", ".join(
                          f"{k} {v}" for k, v in rep.get("rules", {}).items() if v))
        if evals:
            last = evals[-1]
            t.add_row("last", f"#{last.number} {_fmt_cfg(last.user_attrs.get('config'))} → "
                      f"{last.value:.3f} req/s" + (" (stopped early)" if
                                                    last.user_attrs.get("early_stopped") else ""))
        if best is not None:
            t.add_row("best", f"[bold]{best.value:.3f} req/s[/] "
                      f"{_fmt_cfg(best.user_attrs.get('config'))}")
        t.add_row("elapsed / ETA", f"{el:.1f} s / " + (f"{eta:.0f} s" if eta == eta else "-"))
        return t

    def line(self, trial) -> None:
        if not self.enabled:
            return
        v = trial.value or 0.0
        note = "  (stopped early: below the best)" if trial.user_attrs.get("early_stopped") \
            else ""
        self.console.print(f"  #{trial.number:<4} {_fmt_cfg(trial.user_attrs.get('config'))}"
                           f"  → {v:8.3f} req/s{note}")


@app.command()
def tune(
    recipe: Path = typer.Argument(..., help="recipe YAML"),
    trials: int = typer.Option(40, "--trials", "-n", help="evaluations in the study (total)"),
    sampler: str = typer.Option("tpe", "--sampler", help="tpe | gp | skopt | random"),
    evaluator: str = typer.Option("sim", "--evaluator", help="what measures each trial: "
                                  f"{', '.join(EVALUATORS)} (real: the engine)"),
    storage: str | None = typer.Option(None, "--storage",
                                       help="optuna storage URL, or journal:PATH (default: "
                                            "sqlite DIR/study.db)"),
    study: str | None = typer.Option(None, "--study", help="study name (default: from recipe)"),
    workers: int = typer.Option(1, "--workers", "-w", help="worker processes on this study"),
    out: Path = typer.Option(Path("tune-out"), "--out", "-o", help="output directory DIR"),
    seed: int | None = typer.Option(None, "--seed", help="sampler seed (default: recipe seed)"),
    no_prune: bool = typer.Option(False, "--no-prune", help="skip stage 1: no pruning, no bound "
                                  "ranking, no warm start (plain Bayesian optimisation)"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
    no_plots: bool = typer.Option(False, "--no-plots", help="skip the PNG plots"),
    early_stop: bool = typer.Option(False, "--early-stop", help="a trial that fails at the "
                                    "best goodput so far stops at a coarse value (fewer probes; "
                                    "its recorded goodput is then a passing rate, not exact)"),
    baseline: Path | None = typer.Option(None, "--baseline",
                                         help="a previous summary.json to compare against"),
    max_regression: float = typer.Option(0.05, "--max-regression",
                                         help="allowed goodput drop vs --baseline (share)"),
    force: bool = typer.Option(False, "--force", help="resume a study tuned with another "
                               "recipe, sampler or evaluator (refused without it), or "
                               "compare with a --baseline of another recipe"),
    backend: str = BACKEND_OPTION,
    ray_address: str | None = RAY_ADDRESS_OPTION,
    engine: str | None = typer.Option(None, "--engine", help="with --evaluator real: each "
                                      "trial launches its deployment on vllm or sglang and "
                                      "measures it (docs/deploy.md; one worker)"),
    launch_cmd: str | None = typer.Option(None, "--launch-cmd", help="with --engine: start "
                                          "this command per trial instead of the export "
                                          "({port}: a free port; default "
                                          "$HASTUNE_ENGINE_CMD)"),
    recheck: int = typer.Option(0, "--recheck", help="after the simulated search, the engine "
                                "(runners/) measures the top K configurations, re-fits the "
                                "profile from their steps, re-ranks, and measures what enters "
                                "the top K; the answer is the best measured (0: off)"),
    recheck_rounds: int = typer.Option(3, "--recheck-rounds", help="measuring rounds of "
                                       "--recheck at most"),
) -> None:
    """Find the deployment with the most P90 goodput: prune, then Bayesian optimisation.

    Exit codes: 0 found a configuration that meets the SLOs; 3 none does; 4 the best is worse
    than --baseline by more than --max-regression; 2 bad input (also: resuming a study
    tuned with another recipe or sampler, a --baseline of another recipe; --force allows
    both); 1 the run failed (a worker
    died, the storage stopped accepting writes: finished trials are kept, re-run to resume);
    130 interrupted (re-run the same command to resume)."""
    import optuna

    from hastune.recipe import load_recipe
    from hastune.tune.outputs import summarize, write_outputs
    from hastune.tune.runner import TuneOptions, Tuner
    from hastune.tune.storage import check_out, check_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    check_storage(storage, out)  # before any work: where the study and the outputs go
    check_out(out)
    if not (math.isfinite(max_regression) and 0 <= max_regression < 1):
        raise InputError(None, "--max-regression", f"must be a share in [0, 1) (got "
                         f"{max_regression})", "give the allowed drop, e.g. 0.05 for 5%")
    base = None
    if baseline is not None:
        base = _read_baseline(baseline)
    if engine is not None and workers > 1:
        raise InputError(None, "--workers", "trials on an engine run one at a time (each "
                         "deployment takes this machine's GPUs and the router's port)",
                         "drop --workers")
    rec = load_recipe(recipe)
    if evaluator == "sim":
        check_tune_work(rec, not no_prune, "tune")
    from hastune.tune.recheck import check_recipe

    check_recipe(rec, recheck, recheck_rounds, evaluator, engine)  # before the search
    opts = TuneOptions(trials=trials, sampler=sampler, evaluator=evaluator, storage=storage,
                       study=study, workers=workers, out=str(out), seed=seed,
                       prune=not no_prune, backend=backend, ray_address=ray_address,
                       early_stop=early_stop, force=force, engine=engine,
                       launch_cmd=launch_cmd)
    from hastune.tune.samplers import make_sampler

    make_sampler(sampler, 0)  # unknown sampler / missing torch: fail before any work
    tuner = Tuner(rec, opts)
    if base is not None:
        from hastune.tune.identity import check_baseline

        check_baseline(baseline, base, tuner.recipe_sha256, rec.name, force)
    console = Console(stderr=True, highlight=False)
    t0 = time.perf_counter()
    st = tuner.open_study(0)
    mon = Monitor(tuner, st, console, enabled=not as_json and not console.is_terminal)
    mon.seen = len([t for t in st.get_trials(deepcopy=False) if t.user_attrs.get("evaluated")])
    if mon.seen:
        console.print(f"resuming study {tuner.study_name!r}: {mon.seen} evaluations recorded")
    live = Live(mon.render(), console=console, refresh_per_second=4,
                transient=False) if (console.is_terminal and not as_json) else None
    interrupted, failures = run_workers(tuner, st, str(recipe), mon, live)
    recheck_error = None
    from hastune.config import parse_config
    from hastune.tune.outputs import best_trial

    try:
        bt = best_trial(st)
        # the best config's probes and utilisation for the plots (simulated: a real re-run
        # would cost as much as the trial itself)
        final = tuner.ev.goodput(parse_config(bt.user_attrs["config"])) if bt else None
        summary = summarize(tuner, st, time.perf_counter() - t0, final)
    except storage_errors() as exc:
        fail([*failures, f"cannot read the study back ({one_line(exc)}): no outputs written"])
    if recheck and not interrupted and not failures:
        from hastune.cli.tune_recheck import recheck_stage

        measured, recheck_error = recheck_stage(tuner, st, recheck, recheck_rounds, summary,
                                                console, enabled=not as_json)
        final = measured or final
    desc = tuner.ev.describe()
    for key in ("profile_source", "engine_terms"):  # built on demand, shipped, ...; terms
        if key in desc:
            summary[key] = desc[key]
    if summary["best_config"]:  # the simulator's (hastune.caveats); none for a measured one
        summary["caveats"] = tuner.ev.caveats(parse_config(summary["best_config"]),
                                              summary["goodput_rps"],
                                              final.best_run if final is not None else None)
    code = 0 if summary["meets_slo"] else EXIT_NO_CONFIG
    if base is not None:
        prev = float(base.get("goodput_rps", 0.0))
        summary["baseline_goodput_rps"] = prev
        summary["regression"] = (prev - summary["goodput_rps"]) / prev if prev > 0 else 0.0
        if summary["goodput_rps"] < prev * (1 - max_regression):
            code = EXIT_REGRESSION
    if failures:
        summary["failures"] = failures
        code = EXIT_FAILED
    summary["exit_code"] = EXIT_INTERRUPTED if interrupted else code
    try:
        files = write_outputs(tuner, st, summary, final, plots=not no_plots)
    except storage_errors() as exc:
        fail([*failures, f"cannot write the outputs to {out}: {one_line(exc)}"])
    if recheck_error is not None:  # the outputs hold what was measured before it
        raise recheck_error
    if as_json:
        print(dumps(summary))
    else:
        console.print(f"best: [bold]{summary['goodput_rps']:.3f} req/s[/] "
                      f"({summary['goodput_per_gpu']:.3f} per GPU) with "
                      f"{_fmt_cfg(summary['best_config'])}")
        if "engine_terms" in summary:
            console.print(escape(terms_line(summary["engine_terms"])))
        print_caveats(console, summary.get("caveats", []))
        console.print(f"{summary['evaluations']} evaluations, {summary['trials']} trials in "
                      f"{summary['wall_s']:.1f} s; wrote " + ", ".join(str(f) for f in files))
        if code == EXIT_NO_CONFIG:
            console.print("[red]no configuration meets the SLOs[/]: "
                          f"{escape(summary['no_config_reason'])}")
        if code == EXIT_REGRESSION:
            console.print(f"[red]regression: {summary['goodput_rps']:.3f} < baseline "
                          f"{summary['baseline_goodput_rps']:.3f} req/s by more than "
                          f"{max_regression:.0%}[/]")
    if interrupted:
        console.print("interrupted: finished trials are in the study; run the same command "
                      "to resume")
        sys.exit(EXIT_INTERRUPTED)
    if failures:
        fail(failures, json_said=as_json)  # with --json the summary printed says it
    if code:
        sys.exit(code)


def _read_baseline(path: Path) -> dict:
    if not path.exists():
        raise InputError(path, None, "baseline summary not found",
                         "give the summary.json of a previous `hastune tune` run")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(path, None, f"not valid JSON ({exc.msg})",
                         "give the summary.json of a previous run") from None
    if not isinstance(data, dict) or not isinstance(data.get("goodput_rps"), (int, float)):
        raise InputError(path, "goodput_rps", "missing or not a number",
                         "give the summary.json of a previous `hastune tune` run")
    return data

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
from hastune.cli.common import BACKEND_OPTION, RAY_ADDRESS_OPTION, dumps
from hastune.cli.tune_run import fail, one_line, run_workers, storage_errors
from hastune.config import config_dict, parse_config
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
    if "profile_source" in (desc := tuner.ev.describe()):  # built on demand, shipped, ...
        summary["profile_source"] = desc["profile_source"]
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
    if as_json:
        print(dumps(summary))
    else:
        console.print(f"best: [bold]{summary['goodput_rps']:.3f} req/s[/] "
                      f"({summary['goodput_per_gpu']:.3f} per GPU) with "
                      f"{_fmt_cfg(summary['best_config'])}")
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


@app.command("prune")
def prune_cmd(
    recipe: Path = typer.Argument(..., help="recipe YAML"),
    top: int = typer.Option(10, "--top", help="candidates to list"),
    probe_top: int = typer.Option(3, "--probe-top",
                                  help="best-bounded candidates simulated for the lower bound"),
    margin: float | None = typer.Option(
        None, "--margin", help="capacity-rule allowance: keep a configuration whose bound × "
        "margin reaches the lower bound (default: (1 + tolerance) / (1 − shortfall))"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Stage 1 alone: how many configurations each rule removes, and the survivors by bound.

    Exit codes: 0 some configuration is kept; 3 every one is removed (the rules that removed
    them are named); 2 bad input."""
    from hastune.evaluate import Evaluation
    from hastune.prune import emptied, prune
    from hastune.recipe import load_recipe
    from hastune.space import space_for

    _check_count(top, "--top", "candidates to list")
    _check_count(probe_top, "--probe-top", "candidates to simulate (0: no capacity rule)")
    if margin is not None and not (math.isfinite(margin) and margin > 0):
        raise InputError(None, "--margin", f"must be a finite number > 0 (got {margin})",
                         "give an allowance such as 1.2, or leave it out for the derived one")
    rec = load_recipe(recipe)
    ev = Evaluation(rec)
    reports = {}
    for arch in rec.architectures:
        space = space_for(arch, rec.path, rec.search_space, ev.profile)
        reports[arch] = prune(rec, ev.profile, ev.requests, space,
                              evaluate=lambda c: ev.goodput(c).goodput_rps,
                              probe_top=probe_top, margin=margin)
    total = sum(r.total for r in reports.values())
    rules = {k: sum(r.removed[k] for r in reports.values())
             for k in next(iter(reports.values())).removed}
    why = emptied(rules, total) if not any(r.kept for r in reports.values()) else None
    code = EXIT_NO_CONFIG if why else 0
    if as_json:
        if len(reports) == 1:
            out = next(iter(reports.values())).as_dict(top)
        else:
            out = {"total": total, "kept": sum(len(r.kept) for r in reports.values()),
                   "rules": rules,
                   "architectures": {a: r.as_dict(top) for a, r in reports.items()}}
        out["exit_code"] = code
        if why:
            out["no_config_reason"] = why
        print(dumps(out))
        if code:
            raise typer.Exit(code)
        return
    con = Console(highlight=False)
    for arch, rep in reports.items():
        con.print(f"[bold]{arch}[/]: {rep.total} configurations → {len(rep.kept)} kept "
                  f"(lower bound {rep.lower_bound:.3f} req/s from {probe_top} probes, "
                  f"margin {rep.margin:.3f})")
        left = rep.total
        for rule, n in rep.removed.items():
            left -= n
            con.print(f"  {rule:12} removed {n:5d}   → {left}")
        t = Table(title=f"top {min(top, len(rep.kept))} by bound")
        for c in ("config", "bound", "encode", "prefill", "decode", "network", "simulated"):
            t.add_column(c, justify="right" if c != "config" else "left")
        for c in rep.kept[:top]:
            t.add_row(_fmt_cfg(config_dict(c.config)), f"{c.bound:.2f}",
                      *(f"{c.stages[s]:.1f}" for s in ("encode", "prefill", "decode", "network")),
                      "-" if c.goodput is None else f"{c.goodput:.2f}")
        con.print(t)
    if why:
        con.print(f"[red]no configuration meets the SLOs[/]: {escape(why)}")
        raise typer.Exit(code)


def _check_count(value: int, flag: str, what: str) -> None:
    if value < 0:
        raise InputError(None, flag, f"must be ≥ 0 (got {value})", f"give the number of {what}")


@app.command()
def grid(
    recipe: Path = typer.Argument(..., help="recipe YAML"),
    no_prune: bool = typer.Option(False, "--no-prune", help="evaluate the unpruned space"),
    workers: int = typer.Option(1, "--workers", "-w", help="processes"),
    out: Path | None = typer.Option(None, "--out", "-o", help="write grid.csv / grid.json here"),
    top: int = typer.Option(10, "--top", help="rows to show"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Evaluate the whole space exhaustively (small budgets; checking the tuner).

    Exit codes: 0 some configuration meets the SLOs; 3 none does; 2 bad input."""
    from hastune.tune.grid import run_grid
    from hastune.tune.storage import check_out

    _check_count(top, "--top", "rows to show")
    if out is not None:
        check_out(out)  # before the work, not after it
    res = run_grid(recipe, prune_first=not no_prune, workers=workers)
    if out is not None:
        out.mkdir(exist_ok=True)
        (out / "grid.json").write_text(dumps(res))
        import csv

        with (out / "grid.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            keys = sorted({k for r in res["results"] for k in r["config"]})
            w.writerow([*keys, "goodput_rps"])
            for r in res["results"]:
                w.writerow([*(r["config"].get(k, "") for k in keys), r["goodput_rps"]])
    best = max((r["goodput_rps"] for r in res["results"]), default=0.0)
    code = 0 if best > 0 else EXIT_NO_CONFIG
    res["exit_code"] = code
    if code:
        res["no_config_reason"] = (f"none of the {res['evaluated']} evaluated configurations "
                                   "meets the SLOs at any rate" if res["evaluated"] else
                                   "no configuration was evaluated (the pruned space is empty)")
    if as_json:
        print(dumps(res))
        if code:
            raise typer.Exit(code)
        return
    con = Console(highlight=False)
    t = Table(title=f"{res['evaluated']} configurations evaluated in {res['wall_s']:.1f} s "
              f"({'pruned' if res['pruned'] else 'unpruned'} space of {res['total']})")
    t.add_column("rank", justify="right")
    t.add_column("config")
    t.add_column("goodput (req/s)", justify="right")
    for i, r in enumerate(res["results"][:top], 1):
        t.add_row(str(i), _fmt_cfg(r["config"]), f"{r['goodput_rps']:.3f}")
    con.print(t)
    if code:
        con.print(f"[red]no configuration meets the SLOs[/]: {res['no_config_reason']}")
        raise typer.Exit(code)

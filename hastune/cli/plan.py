"""`hastune plan RECIPE --rate R`: the fewest GPUs that sustain a load (hastune.plan)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hastune.cli import app
from hastune.cli.common import check_tune_work, dumps, print_caveats
from hastune.errors import EXIT_INTERRUPTED
from hastune.evaluators import EVALUATORS


def _fmt(x: float | None) -> str:
    return "-" if x is None else ("∞" if x == float("inf") else f"{x:.3f}")


def table(res) -> Table:
    """The GPUs → goodput table: every count 1..cluster.gpus and how it was settled."""
    from hastune.cli.tune import _fmt_cfg

    pareto = set(res.pareto())
    a = res.answer
    tuned = ", ".join(str(s.gpus) for s in res.tuned) or "none"
    t = Table(title=f"{res.recipe}: fewest GPUs for {res.rate:g} req/s "
              f"(search {res.search}; tuned: {tuned})")
    for c, j in (("GPUs", "right"), ("status", "left"), ("bound", "right"),
                 ("goodput", "right"), ("per GPU", "right"), ("evals", "right"),
                 ("config", "left")):
        t.add_column(c, justify=j)
    for s in res.steps:
        mark = (" ★" if a is not None and s.gpus == a.gpus else
                " ·" if s.gpus in pareto else "")
        status = s.status + (" ✓" if s.sustains(res.rate) else
                             " ✗" if s.goodput_rps is not None else "")
        t.add_row(f"{s.gpus}{mark}", status, _fmt(s.ceiling_rps), _fmt(s.goodput_rps),
                  _fmt(None if s.goodput_rps is None else s.goodput_rps / s.gpus),
                  str(s.evaluations) if s.status == "tuned" else "",
                  escape(_fmt_cfg(s.config)) if s.config else "")
    t.caption = ("bound: capacity bound × margin, no goodput exceeds it; ★ the answer, "
                 "· on the Pareto front (more goodput than any fewer-GPU count tuned)")
    return t


def write_outputs(res, recipe, out: Path, plots: bool) -> list[Path]:
    """DIR/plan.json (as --json prints), plan.csv, plan.png, and best_config.yaml (the answer's
    configuration) next to the studies."""
    import yaml

    from hastune.config import dump_config, parse_config
    from hastune.plan import write_plot

    out.mkdir(exist_ok=True)
    d = res.as_dict()
    written = [out / "plan.json"]
    written[0].write_text(dumps(d))
    p = out / "plan.csv"
    with p.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["gpus", "status", "ceiling_rps", "goodput_rps", "goodput_per_gpu",
                    "sustains", "evaluations", "study", "config"])
        for s in d["steps"]:
            w.writerow([s["gpus"], s["status"], s["ceiling_rps"], s["goodput_rps"],
                        s["goodput_per_gpu"], s["sustains"], s["evaluations"], s["study"] or "",
                        json.dumps(s["config"], sort_keys=True) if s["config"] else ""])
    written.append(p)
    if (a := res.answer) is not None:
        from hastune.export.target import TARGET_KEY, build_target, dump_target
        from hastune.plan import budget_recipe

        cfg = parse_config(a.config)
        target = build_target(budget_recipe(recipe, a.gpus), cfg, a.goodput_rps or 0.0,
                              a.recipe_sha256)
        p = out / "best_config.yaml"
        p.write_text(f"# Fewest GPUs found by `hastune plan` for recipe {res.recipe} at "
                     f"{res.rate:g} req/s:\n# {a.gpus} GPUs, P90 goodput {a.goodput_rps:.3f} "
                     f"req/s (study {a.study}). Simulate it: hastune evaluate RECIPE --config "
                     "this-file;\n# deploy it: hastune export this-file --engine "
                     "vllm|sglang|dynamo (`target:` says what it is for)\n"
                     + yaml.safe_dump(dump_config(cfg), sort_keys=False)
                     + yaml.safe_dump({TARGET_KEY: dump_target(target)}, sort_keys=False))
        written.append(p)
    if plots:
        p = out / "plan.png"
        write_plot(res, p)
        written.append(p)
    return written


@app.command()
def plan(
    recipe: Path = typer.Argument(..., help="recipe YAML (cluster.gpus: the most GPUs to use)"),
    rate: float = typer.Option(..., "--rate", "-r", help="the load to sustain, req/s"),
    trials: int = typer.Option(20, "--trials", "-n", help="evaluations per GPU count tuned"),
    search: str = typer.Option("up", "--search", help="up: GPU counts in increasing order, "
                               "stop at the first that sustains the rate; bisect: fewer "
                               "tunes, assumes goodput grows with the GPUs"),
    sampler: str = typer.Option("tpe", "--sampler", help="tpe | gp | skopt | random"),
    evaluator: str = typer.Option("sim", "--evaluator", help="what measures each trial: "
                                  f"{', '.join(EVALUATORS)}"),
    storage: str | None = typer.Option(None, "--storage", help="optuna storage URL, or "
                                       "journal:PATH (default: sqlite DIR/study.db)"),
    study: str | None = typer.Option(None, "--study", help="base of the studies' names (each "
                                     "count's is BASE-gN; default: from the recipe)"),
    out: Path = typer.Option(Path("plan-out"), "--out", "-o", help="output directory DIR"),
    seed: int | None = typer.Option(None, "--seed", help="sampler seed (default: recipe seed)"),
    no_prune: bool = typer.Option(False, "--no-prune", help="tune each count without stage 1 "
                                  "(the analytic ceilings still rule counts out)"),
    force: bool = typer.Option(False, "--force", help="resume studies tuned with another "
                               "recipe, sampler or evaluator"),
    as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
    no_plots: bool = typer.Option(False, "--no-plots", help="skip plan.png"),
) -> None:
    """The fewest GPUs (up to the recipe's cluster.gpus) whose best configuration sustains
    --rate req/s within the SLOs, tuning one study per GPU count (resumable like tune).

    Exit codes: 0 found; 3 not even cluster.gpus sustains the rate (the most goodput
    reached is printed); 2 bad input; 1 the run failed (finished trials are kept); 130
    interrupted (re-run the same command to resume)."""
    import optuna

    from hastune.cli.tune_run import fail, one_line, storage_errors
    from hastune.plan import TUNED, Planner
    from hastune.recipe import load_recipe
    from hastune.tune.runner import TuneOptions
    from hastune.tune.samplers import make_sampler
    from hastune.tune.storage import check_out, check_storage, interrupted

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    check_storage(storage, out)
    check_out(out)
    make_sampler(sampler, 0)  # unknown sampler / missing torch: fail before any work
    opts = TuneOptions(trials=trials, sampler=sampler, evaluator=evaluator, storage=storage,
                       study=study, out=str(out), seed=seed, prune=not no_prune, force=force)
    rec = load_recipe(recipe)
    if evaluator == "sim":
        check_tune_work(rec, not no_prune, "plan")
    planner = Planner(rec, rate, opts, search=search)
    con = Console(stderr=True, highlight=False)

    def said(step) -> None:
        if as_json:
            return
        if step.status != TUNED:
            con.print(f"{step.gpus} GPUs: tuning {trials} evaluations "
                      f"(bound {_fmt(step.ceiling_rps)} req/s) …")
        else:
            ok = "sustains" if step.sustains(rate) else "does not sustain"
            con.print(f"{step.gpus} GPUs: best {step.goodput_rps:.3f} req/s, {ok} {rate:g} "
                      f"({step.evaluations} evaluations, {step.wall_s:.1f} s)")

    def stopped() -> None:  # typer would turn a KeyboardInterrupt into a silent 130
        from hastune.cli.report import emit_error

        emit_error(EXIT_INTERRUPTED, "interrupted: finished trials are in the studies",
                   fix="run the same command again to resume")
        sys.exit(EXIT_INTERRUPTED)

    try:
        res = planner.run(on_step=said)
        files = write_outputs(res, rec, out, plots=not no_plots)
    except storage_errors() as exc:
        if interrupted(exc):  # Ctrl-C inside a storage write: still an interrupt
            stopped()
        fail([f"the study's storage failed ({one_line(exc)}); finished trials are kept: fix "
              "it and run the same command to resume"])
    except KeyboardInterrupt:
        stopped()
    d = res.as_dict()
    if as_json:
        print(dumps(d))
    else:
        Console(highlight=False).print(table(res))
        a = res.answer
        if a is not None:
            from hastune.cli.tune import _fmt_cfg

            con.print(f"fewest GPUs: [bold]{a.gpus}[/] — {a.goodput_rps:.3f} req/s ≥ "
                      f"{rate:g} with {escape(_fmt_cfg(a.config))}")
            print_caveats(con, res.caveats)
        else:
            con.print(f"[red]no GPU count sustains {rate:g} req/s[/]: "
                      f"{escape(d['no_config_reason'])}")
        con.print(f"searched (tuned) GPU counts: {d['searched'] or 'none'}; ruled out "
                  f"without simulating: {sorted(map(int, d['ruled_out'])) or 'none'}; "
                  f"{res.wall_s:.1f} s; wrote " + ", ".join(str(f) for f in files))
    if res.exit_code:
        sys.exit(res.exit_code)

"""`hastune plan RECIPE --rate R`: the fewest GPUs (or the cheapest deployment) that sustain a
load (hastune.plan)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hastune.cli.app import app
from hastune.cli.common import dumps, print_caveats
from hastune.errors import EXIT_INTERRUPTED
from hastune.evaluators import EVALUATORS
from hastune.tune.progress import config_line


def _fmt(x: float | None) -> str:
    return "-" if x is None else ("∞" if x == float("inf") else f"{x:.3f}")


def table(res) -> Table:
    """The GPUs → goodput table: every count 1..cluster.gpus and how it was settled."""
    pareto = set(res.pareto())
    a = res.answer
    tuned = ", ".join(str(s.gpus) for s in res.tuned) or "none"
    what = "cheapest deployment" if res.objective == "cost" else "fewest GPUs"
    priced = any(s.cost_per_hour is not None for s in res.steps)
    t = Table(title=f"{res.recipe}: {what} for {res.rate:g} req/s "
              f"(search {res.search}; tuned: {tuned})")
    for c, j in (("GPUs", "right"), ("status", "left"), ("bound", "right"),
                 ("goodput", "right"), ("per GPU", "right"),
                 *((("$/h", "right"),) if priced else ()), ("evals", "right"),
                 ("config", "left")):
        t.add_column(c, justify=j)
    for s in res.steps:
        mark = (" ★" if a is not None and s.gpus == a.gpus else
                " ·" if s.gpus in pareto else "")
        status = s.status + (" ✓" if s.sustains(res.rate) else
                             " ✗" if s.goodput_rps is not None else "")
        t.add_row(f"{s.gpus}{mark}", status, _fmt(s.ceiling_rps), _fmt(s.goodput_rps),
                  _fmt(None if s.goodput_rps is None else s.goodput_rps / s.gpus),
                  *((_fmt(s.cost_per_hour),) if priced else ()),
                  str(s.evaluations) if s.status == "tuned" else "",
                  escape(config_line(s.config)) if s.config else "")
    t.caption = ("bound: capacity bound × margin, no goodput exceeds it; ★ the answer's "
                 "count, · on the Pareto front (more goodput than any fewer-GPU count tuned)"
                 + ("; $/h: the count's best configuration's cost per hour" if priced else ""))
    return t


def cost_table(res) -> Table:
    """The Pareto front of cost per hour against goodput over every configuration
    evaluated."""
    cfg = res.answer_config[0]
    t = Table(title=f"{res.recipe}: cost per hour against goodput (the configurations no "
              "other evaluated beats on both)")
    for c in ("$/h", "goodput", "per dollar", "GPUs", "config"):
        t.add_column(c, justify="left" if c == "config" else "right")
    for p in res.cost_pareto():
        mark = " ★" if p["config"] == cfg else (" ✓" if p["goodput_rps"] >= res.rate else "")
        t.add_row(f"{p['cost_per_hour']:.4g}{mark}", f"{p['goodput_rps']:.3f}",
                  f"{p['goodput_per_dollar']:.4g}", str(p["gpus"]),
                  escape(config_line(p["config"])))
    t.caption = f"★ the answer ({res.objective}), ✓ sustains {res.rate:g} req/s"
    return t


@app.command()
def plan(
    recipe: Path = typer.Argument(..., help="recipe YAML (cluster.gpus: the most GPUs to use)"),
    rate: float = typer.Option(..., "--rate", "-r", help="the load to sustain, req/s"),
    trials: int = typer.Option(20, "--trials", "-n", help="evaluations per GPU count tuned"),
    search: str = typer.Option("up", "--search", help="up: GPU counts in increasing order, "
                               "stop at the first that sustains the rate; bisect: fewer "
                               "tunes, assumes goodput grows with the GPUs"),
    objective: str = typer.Option("gpus", "--objective", help="gpus: the fewest GPUs that "
                                  "sustain the rate; cost: the cheapest configuration "
                                  "evaluated that does (needs cluster prices)"),
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
    --rate req/s within the SLOs, or with --objective cost the cheapest configuration that
    does, tuning one study per GPU count (cost on several GPU types: per count and rate;
    resumable like tune).

    Exit codes: 0 found; 3 not even cluster.gpus sustains the rate (the most goodput
    reached is printed); 2 bad input; 1 the run failed (finished trials are kept); 130
    interrupted (re-run the same command to resume)."""
    from hastune.cli.report import fail
    from hastune.plan import TUNED, run
    from hastune.tune.storage import interrupted, root_cause
    from hastune.tune.workers import storage_errors

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
        res = run(recipe, rate, search=search, plots=not no_plots, on_step=said,
                  objective=objective, trials=trials,
                  sampler=sampler, evaluator=evaluator, storage=storage, study=study,
                  out=str(out), seed=seed, prune=not no_prune, force=force)
    except storage_errors() as exc:
        if interrupted(exc):  # Ctrl-C inside a storage write: still an interrupt
            stopped()
        fail([f"the study's storage failed ({root_cause(exc)}); finished trials are kept: fix "
              "it and run the same command to resume"])
    except KeyboardInterrupt:
        stopped()
    d = res.as_dict()
    if as_json:
        print(dumps(d))
    else:
        Console(highlight=False).print(table(res))
        if d["cost_pareto"]:
            Console(highlight=False).print(cost_table(res))
        a = res.answer
        if a is not None:
            cost = (f", {d['cost_per_hour']:.4g} per hour"
                    if d["cost_per_hour"] is not None else "")
            what = "cheapest" if objective == "cost" else "fewest GPUs"
            con.print(f"{what}: [bold]{d['gpus']}[/] GPUs — {d['goodput_rps']:.3f} req/s ≥ "
                      f"{rate:g}{cost} with {escape(config_line(d['config']))}")
            print_caveats(con, res.caveats)
        else:
            con.print(f"[red]no GPU count sustains {rate:g} req/s[/]: "
                      f"{escape(d['no_config_reason'])}")
        con.print(f"searched (tuned) GPU counts: {d['searched'] or 'none'}; ruled out "
                  f"without simulating: {sorted(map(int, d['ruled_out'])) or 'none'}; "
                  f"{res.wall_s:.1f} s; wrote " + ", ".join(str(f) for f in res.files))
    if res.exit_code:
        sys.exit(res.exit_code)

"""`hastune evaluate RECIPE --config CFG`: the goodput search for one deployment."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hastune.cli.app import app
from hastune.cli.common import (
    BACKEND_OPTION,
    RAY_ADDRESS_OPTION,
    dumps,
    fmt_s,
    print_caveats,
    terms_line,
)
from hastune.config import load_config
from hastune.cost import cost_fields, cost_line
from hastune.errors import EXIT_NO_CONFIG
from hastune.evaluators import EVALUATORS, EvaluatorOptions, make_evaluator
from hastune.evaluators.sim import check_requests, check_seed
from hastune.recipe import load_recipe
from hastune.worklimit import check_sim_work


@app.command()
def evaluate(
    recipe: Path = typer.Argument(..., help="recipe YAML"),
    config: Path = typer.Option(..., "--config", "-c", help="deployment config YAML"),
    requests: int | None = typer.Option(None, "--requests", "-n", help="requests per probe"),
    seed: int | None = typer.Option(None, "--seed", help="override the recipe's seed"),
    evaluator: str = typer.Option("sim", "--evaluator", help="what measures it: "
                                  f"{', '.join(EVALUATORS)} (sim: the simulator; real: the "
                                  "engine in runners/ with a real model, or vLLM / SGLang "
                                  "with --engine)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    backend: str = BACKEND_OPTION,
    ray_address: str | None = RAY_ADDRESS_OPTION,
    oversubscribe: bool = typer.Option(False, "--oversubscribe", help="with --evaluator real: "
                                       "run a deployment that needs more cores (workers × "
                                       "threads) or GPUs than this machine has, workers "
                                       "sharing them; the result is then not comparable with "
                                       "the simulator's (default: refused, exit 2)"),
    engine: str | None = typer.Option(None, "--engine", help="with --evaluator real: launch "
                                      "the deployment on vllm or sglang (the scripts of "
                                      "hastune export, on this machine's GPUs) and measure it "
                                      "at its OpenAI endpoint (docs/deploy.md)"),
    launch_cmd: str | None = typer.Option(None, "--launch-cmd", help="with --engine: start "
                                          "this shell command instead of the exported "
                                          "launch ({port}: a free port it must serve on; "
                                          "default $HASTUNE_ENGINE_CMD)"),
    dummy_weights: bool = typer.Option(False, "--dummy-weights", help="with --engine: load "
                                       "random weights (--load-format dummy)"),
) -> None:
    """Find the P90 goodput of a deployment: the highest rate that still meets the SLOs.

    Exit codes: 0 a rate meets the SLOs; 3 none does (the lowest probe's misses are printed);
    2 bad input."""
    check_requests(requests)  # before any evaluator (the real one took 0 as "the default")
    check_seed(seed)
    rec, cfg = load_recipe(recipe), load_config(config)
    if evaluator == "sim":
        check_sim_work(rec, requests, 1, "evaluate")
    ev = make_evaluator(evaluator, rec, EvaluatorOptions(requests=requests, seed=seed,
                                                         backend=backend,
                                                         ray_address=ray_address,
                                                         oversubscribe=oversubscribe,
                                                         engine=engine, launch_cmd=launch_cmd,
                                                         dummy_weights=dummy_weights))
    ev.check(cfg, config)
    con = Console(highlight=False, stderr=as_json)
    pct = rec.slo.percentile

    def show(p) -> None:
        if not as_json:
            mark = "[green]pass[/]" if p.passed else "[red]fail[/]"
            v = p.stability
            why = ""
            if v is not None and v.judged:
                why = ("  steady" if v.stable else f"  [yellow]unstable: {v.reason}[/]")
            elif v is not None:  # not judged: say why (stopped early, closed loop, …)
                why = f"  ({v.reason})"
            if p.repeats:  # a close call, run again: the majority's verdict, the median run
                why += f"  [cyan]{p.runs_passed} of {p.runs} runs pass[/]"
            con.print(f"  rate {p.rate:9.3f} req/s  {p.requests:7d} req  "
                      f"TTFT P{pct:g} {fmt_s(p.ttft_p):>10}  TPOT P{pct:g} {fmt_s(p.tpot_p):>10}"
                      f"  attainment {p.attainment:6.1%}  {mark}{why}")

    t0 = time.perf_counter()
    if not as_json:
        con.print(f"[bold]{rec.name}[/]: {cfg.architecture} on {cfg.gpus} GPUs, "
                  f"SLO TTFT {fmt_s(rec.slo.ttft_s)} / TPOT {fmt_s(rec.slo.tpot_s)} at "
                  f"P{pct:g} ({rec.slo.criterion}), {evaluator} evaluator, seed {ev.seed}")
        if "engine_terms" in (desc := ev.describe()):
            con.print(escape(terms_line(desc["engine_terms"])))
    res = ev.goodput(cfg, config, on_probe=show)
    wall = time.perf_counter() - t0
    out = res.as_dict()
    out.update({"architecture": cfg.architecture, "gpus": cfg.gpus,
                "goodput_per_gpu": res.goodput_rps / cfg.gpus, "seed": ev.seed,
                "evaluator": evaluator, "wall_s": wall})
    cost = cost_fields(rec.cluster, cfg, res.goodput_rps)  # {} without prices
    out.update(cost)
    out.update(ev.describe())
    if res.best_run is not None:
        out["at_goodput"] = {k: v for k, v in res.best_run.summary(rec.slo).items()
                             if k in ("ttft_p90_s", "tpot_p90_s", "attainment", "utilisation")}
    if res.goodput_rps > 0:  # the simulator's: hastune.caveats (none for a measured result)
        out["caveats"] = ev.caveats(cfg, res.goodput_rps, res.best_run)
    why = res.failure(rec.slo)
    code = EXIT_NO_CONFIG if why else 0
    out["exit_code"] = code
    if why:
        out["no_rate_meets_slo"] = why
    if as_json:
        print(dumps(out))
        if code:
            raise typer.Exit(code)
        return
    tab = Table(show_header=False)
    tab.add_row("goodput", f"[bold]{res.goodput_rps:.3f} req/s[/] "
                f"({res.goodput_rps / cfg.gpus:.3f} per GPU)")
    if cost:
        tab.add_row("cost", cost_line(cost))
    tab.add_row("criterion", f"{res.criterion}, P{pct:g}, tolerance {res.tolerance:.0%}")
    span = ev.describe().get("probe_span_s")
    runs = sum(p.runs for p in res.probes)
    tab.add_row("probes", f"{len(res.probes)}{f' ({runs} runs)' if runs > len(res.probes) else ''}"
                f" in {wall:.2f} s" + (
        f", each at least {span:.4g} s of arrivals (min_span × request lifetime)"
        if span is not None else ""))
    if res.spread is not None:
        lo, hi = res.spread
        again = sum(p.runs > 1 for p in res.probes)
        tab.add_row("spread", f"{lo:.3f} – {hi:.3f} req/s (where the goodput lies as far "
                    f"as the probes tell; {again} of {len(res.probes)} run again: close "
                    "calls and the bracket's ends)")
    fit = out.get("fit") or {}
    if fit.get("oversubscribed"):
        tab.add_row("devices", f"[yellow]{fit['arithmetic']}: {fit['note']}[/]")
    if not res.bracketed:
        tab.add_row("note", "[yellow]the search hit its rate limit; the bound is not exact[/]")
    con.print(tab)
    print_caveats(con, out.get("caveats", []))
    if why:
        con.print(f"[red]no rate meets the SLOs[/]: {why}")
        raise typer.Exit(code)

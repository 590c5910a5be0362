"""`hastune simulate RECIPE --config CFG --rate R`: one simulated run at one rate."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hastune.cli.app import app
from hastune.cli.common import dumps, fmt_s, load_inputs, print_caveats, terms_line
from hastune.errors import EXIT_NO_CONFIG
from hastune.evaluators.sim import check_rate, check_requests, check_seed
from hastune.sim import warmup


@app.command()
def simulate(
    recipe: Path = typer.Argument(..., help="recipe YAML"),
    config: Path = typer.Option(..., "--config", "-c", help="deployment config YAML"),
    rate: float = typer.Option(..., "--rate", "-r", help="arrival rate, requests/s"),
    requests: int | None = typer.Option(
        None, "--requests", "-n", help="requests to simulate at least (a run is made as long as "
        "a goodput probe at this rate: min_span request lifetimes, longer while unsettled)"),
    seed: int | None = typer.Option(None, "--seed", help="override the recipe's seed"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Simulate a deployment at one arrival rate: TTFT/TPOT, SLO attainment, utilisation, and
    whether the run is a steady state (the probe a goodput search would make at this rate).

    Exit codes: 0 the run meets the SLOs (and is steady where judged); 3 it does not; 2 bad
    input."""
    check_rate(rate)  # the values first: nothing is loaded for a run that cannot start
    check_requests(requests)
    check_seed(seed)
    rec, cfg, ev = load_inputs(recipe, config, requests, seed)
    run = ev.run(cfg, rate, config)
    s = run.summary(rec.slo)
    if run.verdict is not None:
        s["stability"] = run.verdict.as_dict()
        s["passes"] = s["slo_met"] and run.verdict.stable
    s.update({"architecture": cfg.architecture, "seed": ev.seed, "wall_s": run.wall_s,
              "percentile": rec.slo.percentile, "profile": ev.profile.name,
              "engine_terms": ev.describe()["engine_terms"],
              "caveats": ev.caveats(cfg, rate, run)})
    code = 0 if s.get("passes", s["slo_met"]) else EXIT_NO_CONFIG
    s["exit_code"] = code
    if as_json:
        print(dumps(s))
        if code:
            raise typer.Exit(code)
        return
    con = Console(highlight=False)
    t = Table(title=f"{rec.name}: {cfg.architecture} at {rate:g} req/s "
              f"({s['measured']} measured of {s['requests']}, seed {ev.seed})")
    t.add_column("metric")
    for c in ("mean", "P50", "P90", "P99", "SLO"):
        t.add_column(c, justify="right")
    t.add_row("TTFT", *(fmt_s(s[f"ttft_{k}_s"]) for k in ("mean", "p50", "p90", "p99")),
              fmt_s(rec.slo.ttft_s))
    t.add_row("TPOT", *(fmt_s(s[f"tpot_{k}_s"]) for k in ("mean", "p50", "p90", "p99")),
              fmt_s(rec.slo.tpot_s))
    con.print(t)
    u = Table(title="utilisation (busy SM share)")
    u.add_column("stage")
    u.add_column("utilisation", justify="right")
    for k, v in s["utilisation"].items():
        u.add_row(k, f"{v:.0%}")
    con.print(u)
    verdict = "[green]meets[/]" if s["slo_met"] else "[red]misses[/]"
    con.print(f"SLO attainment {s['attainment']:.1%}; P{rec.slo.percentile:g} {verdict} the SLOs; "
              f"{s['completed']} completed, {s['rejected']} rejected; "
              f"simulated {s['requests']} requests in {run.wall_s:.3f} s")
    con.print(escape(terms_line(s["engine_terms"])))
    print_caveats(con, s["caveats"])
    if s.get("rounds", 0) > s.get("rounds_asked", float("inf")):
        con.print(f"closed loop: run to {s['rounds']:g} rounds per client, not the "
                  f"{s['rounds_asked']:g} asked for: its steady mean TTFT was not yet known "
                  f"(warm-up cut at half the run, halves {warmup.DRIFT:.0%} apart, a "
                  f"standard error over {warmup.PRECISION:.1%}, or over {warmup.SURE:.1%} "
                  f"with a mean {warmup.AGREE:.0%} off its first half's: "
                  "hastune.sim.warmup.known)")
    if run.verdict is not None and not run.verdict.judged:
        con.print(f"steady state: not judged ({run.verdict.reason})")
    elif run.verdict is not None:
        v = run.verdict
        mark = "[green]stable[/]" if v.stable else "[red]unstable[/]"
        con.print(f"steady state: {mark} ({v.reason}); throughput {v.throughput_rps:.4g} of "
                  f"{v.arrival_rps:.4g} req/s arriving over the last two thirds")
    if code:
        raise typer.Exit(code)

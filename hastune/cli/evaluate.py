"""`hastune evaluate RECIPE --config CFG`: the goodput search for one deployment."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from hastune.cli import app
from hastune.cli.common import dumps, fmt_s, load_inputs


@app.command()
def evaluate(
    recipe: Path = typer.Argument(..., help="recipe YAML"),
    config: Path = typer.Option(..., "--config", "-c", help="deployment config YAML"),
    requests: int | None = typer.Option(None, "--requests", "-n", help="requests per probe"),
    seed: int | None = typer.Option(None, "--seed", help="override the recipe's seed"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Find the P90 goodput of a deployment: the highest rate that still meets the SLOs."""
    rec, cfg, ev = load_inputs(recipe, config, requests, seed)
    con = Console(highlight=False, stderr=as_json)
    pct = rec.slo.percentile

    def show(p) -> None:
        if not as_json:
            mark = "[green]pass[/]" if p.passed else "[red]fail[/]"
            con.print(f"  rate {p.rate:9.3f} req/s  TTFT P{pct:g} {fmt_s(p.ttft_p):>10}  "
                      f"TPOT P{pct:g} {fmt_s(p.tpot_p):>10}  "
                      f"attainment {p.attainment:6.1%}  {mark}")

    t0 = time.perf_counter()
    if not as_json:
        con.print(f"[bold]{rec.name}[/]: {cfg.architecture} on {cfg.gpus} GPUs, "
                  f"SLO TTFT {fmt_s(rec.slo.ttft_s)} / TPOT {fmt_s(rec.slo.tpot_s)} at "
                  f"P{pct:g} ({rec.slo.criterion}), {len(ev.requests)} requests per probe, "
                  f"seed {ev.seed}")
    res = ev.goodput(cfg, config, on_probe=show)
    wall = time.perf_counter() - t0
    out = res.as_dict()
    out.update({"architecture": cfg.architecture, "gpus": cfg.gpus,
                "goodput_per_gpu": res.goodput_rps / cfg.gpus, "seed": ev.seed,
                "requests_per_probe": len(ev.requests), "wall_s": wall,
                "profile": ev.profile.name})
    if res.best_run is not None:
        out["at_goodput"] = {k: v for k, v in res.best_run.summary(rec.slo).items()
                             if k in ("ttft_p90_s", "tpot_p90_s", "attainment", "utilisation")}
    if as_json:
        print(dumps(out))
        return
    tab = Table(show_header=False)
    tab.add_row("goodput", f"[bold]{res.goodput_rps:.3f} req/s[/] "
                f"({res.goodput_rps / cfg.gpus:.3f} per GPU)")
    tab.add_row("criterion", f"{res.criterion}, P{pct:g}, tolerance {res.tolerance:.0%}")
    tab.add_row("probes", f"{len(res.probes)} in {wall:.2f} s")
    if not res.bracketed:
        tab.add_row("note", "[yellow]the search hit its rate limit; the bound is not exact[/]")
    con.print(tab)

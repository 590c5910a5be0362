"""`hastune prune` and `hastune grid`: stage 1 of Hybrid Auto Selection alone, and the whole
space evaluated exhaustively (checking the tuner)."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hastune.cli.app import app
from hastune.cli.common import dumps
from hastune.config import config_dict
from hastune.errors import EXIT_NO_CONFIG, InputError
from hastune.tune.progress import config_line


@app.command("prune")
def prune_cmd(
    recipe: Path = typer.Argument(..., help="recipe YAML"),
    top: int = typer.Option(10, "--top", help="candidates to list"),
    probe_top: int = typer.Option(3, "--probe-top",
                                  help="best-bounded candidates simulated for the lower bound "
                                  "(0: no capacity rule)"),
    margin: float | None = typer.Option(
        None, "--margin", help="capacity-rule allowance: keep a configuration whose bound × "
        "margin reaches the lower bound (default: (1 + tolerance) / (1 − shortfall))"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Stage 1 alone: how many configurations each rule removes, and the survivors by bound.

    Exit codes: 0 some configuration is kept; 3 every one is removed (the rules that removed
    them are named); 2 bad input."""
    from hastune.evaluators.sim import Evaluation
    from hastune.prune import emptied, prune
    from hastune.recipe import load_recipe
    from hastune.space import space_for
    from hastune.worklimit import check_work

    _check_count(top, "--top", "candidates to list")
    _check_count(probe_top, "--probe-top", "candidates to simulate (0: no capacity rule)")
    if margin is not None and not (math.isfinite(margin) and margin > 0):
        raise InputError(None, "--margin", f"must be a finite number > 0 (got {margin})",
                         "give an allowance such as 1.2, or leave it out for the derived one")
    rec = load_recipe(recipe)
    check_work(rec.workload.requests, probe_top * len(rec.architectures),
               f"prune (--probe-top {probe_top}, {len(rec.architectures)} "
               f"architecture{'s' if len(rec.architectures) > 1 else ''})", rec.path,
               other="--probe-top 0 (no capacity rule: nothing simulated)")
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
            t.add_row(config_line(config_dict(c.config)), f"{c.bound:.2f}",
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
    workers: str = typer.Option("auto", "--workers", "-w", help="processes: auto (this "
                                "machine's cores) or a number; the table is the same for any"),
    out: Path | None = typer.Option(None, "--out", "-o", help="write grid.csv / grid.json here"),
    top: int = typer.Option(10, "--top", help="rows to show"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Evaluate the whole space exhaustively (small budgets; checking the tuner).

    Exit codes: 0 some configuration meets the SLOs; 3 none does; 2 bad input."""
    from hastune.cli.report import emit_error
    from hastune.tune.grid import GridFailed, run_grid
    from hastune.tune.storage import check_out

    _check_count(top, "--top", "rows to show")
    if out is not None:
        check_out(out)  # before the work, not after it
    from hastune.recipe import load_recipe
    from hastune.worklimit import check_tune_work

    check_tune_work(load_recipe(recipe), not no_prune, "grid")
    try:
        res = run_grid(recipe, prune_first=not no_prune, workers=workers)
    except GridFailed as exc:
        emit_error(1, str(exc), fix="run the same command again (with fewer --workers if "
                   "memory ran out)")
        raise typer.Exit(1) from None
    if out is not None:
        out.mkdir(exist_ok=True)
        (out / "grid.json").write_text(dumps(res))
        import csv

        with (out / "grid.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            keys = sorted({k for r in res["results"] for k in r["config"]})
            cost = [k for k in ("cost_per_hour", "goodput_per_dollar")
                    if any(k in r for r in res["results"])]
            w.writerow([*keys, "goodput_rps", *cost])
            for r in res["results"]:
                w.writerow([*(r["config"].get(k, "") for k in keys), r["goodput_rps"],
                            *(r.get(k, "") for k in cost)])
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
    priced = any("cost_per_hour" in r for r in res["results"])
    if priced:
        t.add_column("cost per hour", justify="right")
        t.add_column("per dollar", justify="right")
    for i, r in enumerate(res["results"][:top], 1):
        t.add_row(str(i), config_line(r["config"]), f"{r['goodput_rps']:.3f}", *(
            (f"{r['cost_per_hour']:.4g}", f"{r['goodput_per_dollar']:.4g}") if priced else ()))
    con.print(t)
    if code:
        con.print(f"[red]no configuration meets the SLOs[/]: {res['no_config_reason']}")
        raise typer.Exit(code)
